package tlsfiles_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
)

// selfSigned writes a self-signed server certificate for 127.0.0.1 valid
// until notAfter, and returns its files.
func selfSigned(t *testing.T, dir string, serial int64, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// served handshakes with a server using s and returns the serial number
// of the certificate it serves.
func served(t *testing.T, s *tlsfiles.Server) int64 {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) // only the serial is read
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func TestServerReloads(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir, 1, time.Now().Add(time.Hour))
	s, err := tlsfiles.NewServer(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := served(t, s); got != 1 {
		t.Fatalf("serial %d, want 1", got)
	}
	if changed, err := s.ReloadIfChanged(); changed || err != nil {
		t.Fatalf("unchanged files: changed %v, %v", changed, err)
	}
	selfSigned(t, dir, 2, time.Now().Add(time.Hour))
	if changed, err := s.ReloadIfChanged(); !changed || err != nil {
		t.Fatalf("changed files: changed %v, %v", changed, err)
	}
	if got := served(t, s); got != 2 {
		t.Fatalf("after the change: serial %d, want 2", got)
	}
	// A broken pair keeps the certificate in force.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "tls.key_file") {
		t.Fatalf("broken key: %v", err)
	}
	if got := served(t, s); got != 2 {
		t.Fatalf("after a failed reload: serial %d, want 2", got)
	}
}

func TestServerErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir, 1, time.Now().Add(-time.Hour))
	if _, err := tlsfiles.NewServer(certFile, keyFile, ""); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired certificate: %v", err)
	}
	certFile, keyFile = selfSigned(t, dir, 1, time.Now().Add(time.Hour))
	if _, err := tlsfiles.NewServer(certFile, keyFile, keyFile); err == nil || !strings.Contains(err.Error(), "tls.client_ca_file") {
		t.Fatalf("a key as the client CA: %v", err)
	}
	if _, err := tlsfiles.NewServer(filepath.Join(dir, "missing.pem"), keyFile, ""); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("missing certificate: %v", err)
	}
	if _, err := tlsfiles.Client("", certFile, "", ""); err == nil {
		t.Fatal("a client certificate without its key was accepted")
	}
}

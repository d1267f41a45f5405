package tlsfiles_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// issue writes a server certificate of ca for 127.0.0.1 with serial,
// valid until notAfter, to cert.pem and cert-key.pem in ca.Dir (replacing
// the last), and returns its files.
func issue(ca *tlstest.CA, serial int64, notAfter time.Time) (certFile, keyFile string) {
	is := ca.Issue("cert", tlstest.Leaf{CommonName: "test", Server: true, Serial: serial, NotAfter: notAfter})
	return is.CertFile, is.KeyFile
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
	ca := tlstest.NewCA(t, "test")
	certFile, keyFile := issue(ca, 1, time.Now().Add(time.Hour))
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
	issue(ca, 2, time.Now().Add(time.Hour))
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
	ca := tlstest.NewCA(t, "test")
	dir := ca.Dir
	certFile, keyFile := issue(ca, 1, time.Now().Add(-time.Minute))
	if _, err := tlsfiles.NewServer(certFile, keyFile, ""); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired certificate: %v", err)
	}
	certFile, keyFile = issue(ca, 1, time.Now().Add(time.Hour))
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

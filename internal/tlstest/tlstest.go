// Package tlstest makes throwaway certificates for tests that do real TLS
// handshakes: a certificate authority, and server and client certificates
// it signs, written as PEM files to the test's temporary directory.
package tlstest

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
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// CA is a certificate authority made for one test. It is safe for
// concurrent use.
type CA struct {
	// Dir is the directory its files are written to.
	Dir string
	// CertFile is the CA's certificate, PEM, for a client CA or root file.
	CertFile string
	// CertPEM is the same certificate in memory.
	CertPEM []byte
	// Pool holds the CA's certificate, for a tls.Config's RootCAs or
	// ClientCAs.
	Pool *x509.CertPool

	t      testing.TB
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	mu     sync.Mutex
	serial int64
}

// NewCA makes a CA named name, valid from an hour ago for a day, and
// writes its certificate to name-ca.pem in a new temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Dir: t.TempDir(), Pool: x509.NewCertPool(), t: t, cert: cert, key: key, serial: 1}
	ca.Pool.AddCert(cert)
	ca.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	ca.CertFile = ca.write(name+"-ca.pem", ca.CertPEM)
	return ca
}

// Leaf says what a certificate the CA issues holds.
type Leaf struct {
	// CommonName is the subject's common name.
	CommonName string
	// Server makes a server certificate (for 127.0.0.1, ::1 and
	// DNSNames); otherwise a client certificate.
	Server bool
	// NoIPs leaves 127.0.0.1 and ::1 out of a server certificate: it names
	// DNSNames only, so a client that dials an IP address and checks the
	// name refuses it.
	NoIPs bool
	// DNSNames and URIs are subject alternative names.
	DNSNames []string
	URIs     []string
	// Serial is the serial number; zero takes the CA's next.
	Serial int64
	// NotAfter ends its validity; zero means a day from now. It is valid
	// from an hour ago.
	NotAfter time.Time
}

// Issued is a certificate the CA signed and its key.
type Issued struct {
	// CertFile and KeyFile are its PEM files.
	CertFile, KeyFile string
	// CertPEM and KeyPEM are their contents.
	CertPEM, KeyPEM []byte
	// Serial is its serial number.
	Serial int64
	// Certificate is it, for a tls.Config.
	Certificate tls.Certificate
}

// Issue signs a certificate for l and writes it to name.pem and its key
// to name-key.pem in Dir, the key first and each renamed into place, so
// that a server reloading them never reads a pair half written.
func (ca *CA) Issue(name string, l Leaf) Issued {
	ca.t.Helper()
	key := newKey(ca.t)
	ca.mu.Lock()
	serial := l.Serial
	if serial == 0 {
		ca.serial++
		serial = ca.serial
	}
	ca.mu.Unlock()
	notAfter := l.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: l.CommonName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, DNSNames: l.DNSNames,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if l.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		if !l.NoIPs {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
	}
	for _, s := range l.URIs {
		u, err := url.Parse(s)
		if err != nil {
			ca.t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	is := Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		Serial:  serial,
	}
	is.Certificate = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	is.KeyFile = ca.writeRenamed(name+"-key.pem", is.KeyPEM)
	is.CertFile = ca.writeRenamed(name+".pem", is.CertPEM)
	return is
}

// ClientTLS returns a client's tls.Config that trusts the CA and, if is is
// not nil, presents it.
func (ca *CA) ClientTLS(is *Issued) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	if is != nil {
		c.Certificates = []tls.Certificate{is.Certificate}
	}
	return c
}

func (ca *CA) write(name string, data []byte) string {
	ca.t.Helper()
	path := filepath.Join(ca.Dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return path
}

func (ca *CA) writeRenamed(name string, data []byte) string {
	ca.t.Helper()
	tmp := ca.write(name+".tmp", data)
	path := filepath.Join(ca.Dir, name)
	if err := os.Rename(tmp, path); err != nil {
		ca.t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

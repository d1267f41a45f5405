// Package tlsfiles builds TLS configurations from PEM files: a server's,
// whose certificate and client CA are read again on Reload (and served to
// the next handshakes without a restart), and a client's, for the Redis
// store.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/floodgate-rl/floodgate/internal/filebound"
	"os"
	"sync/atomic"
	"time"
)

// Server is a server's TLS files: a certificate and key, and for mutual
// TLS the CA that client certificates must chain to. Create it with
// NewServer; it is safe for concurrent use.
type Server struct {
	certFile, keyFile, clientCAFile string
	current                         atomic.Pointer[serverFiles]
}

// serverFiles is what one reading of the files gave.
type serverFiles struct {
	cert     *tls.Certificate
	clientCA *x509.CertPool // nil: no client certificates asked for
	stamp    string         // the files' sizes and modification times
}

// NewServer reads the files; clientCAFile may be empty (no mutual TLS). A
// file's error is a *FileError naming the file at fault by its key
// (tls.cert_file, tls.key_file, tls.client_ca_file).
func NewServer(certFile, keyFile, clientCAFile string) (*Server, error) {
	s := &Server{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again. On error the files in force stay.
func (s *Server) Reload() error {
	f, err := s.read()
	if err != nil {
		return err
	}
	s.current.Store(f)
	return nil
}

// ReloadIfChanged reloads when a file's size or modification time differs
// from the last reading, and reports whether it did.
func (s *Server) ReloadIfChanged() (bool, error) {
	if stamp(s.certFile, s.keyFile, s.clientCAFile) == s.current.Load().stamp {
		return false, nil
	}
	return true, s.Reload()
}

// FileError is a TLS file that cannot be used: the configuration key
// that names it (such as "tls.cert_file"), the file, and why.
type FileError struct {
	Key  string
	File string
	Err  error
}

// Error implements error: "tls.cert_file /etc/c.pem: why".
func (e *FileError) Error() string { return e.Key + " " + e.File + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FileError) Unwrap() error { return e.Err }

// Keys of the server's files, as the configuration names them.
const (
	keyCert     = "tls.cert_file"
	keyKey      = "tls.key_file"
	keyClientCA = "tls.client_ca_file"
)

func (s *Server) read() (*serverFiles, error) {
	f := &serverFiles{stamp: stamp(s.certFile, s.keyFile, s.clientCAFile)}
	cert, err := keyPair(s.certFile, s.keyFile, keyCert, keyKey)
	if err != nil {
		return nil, err
	}
	if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
		return nil, &FileError{keyCert, s.certFile, fmt.Errorf("the certificate expired at %s", cert.Leaf.NotAfter.Format(time.RFC3339))}
	}
	f.cert = &cert
	if s.clientCAFile != "" {
		if f.clientCA, err = ReadPool(s.clientCAFile); err != nil {
			return nil, &FileError{keyClientCA, s.clientCAFile, err}
		}
	}
	return f, nil
}

// keyPair reads a certificate and its key, and blames the file at fault:
// the certificate's when it is unreadable or holds no certificate, the
// key's otherwise (unreadable, no key, or not the certificate's key).
func keyPair(certFile, keyFile, certKey, keyKey string) (tls.Certificate, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return tls.Certificate{}, &FileError{certKey, certFile, err}
	}
	if !holdsCertificate(certPEM) {
		return tls.Certificate{}, &FileError{certKey, certFile, errors.New("holds no PEM certificate")}
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return tls.Certificate{}, &FileError{keyKey, keyFile, err}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, &FileError{keyKey, keyFile, fmt.Errorf("is not the key of the certificate in %s: %w", certFile, err)}
	}
	return cert, nil
}

// holdsCertificate reports whether data's first PEM certificate parses.
func holdsCertificate(data []byte) bool {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return false
		}
		if b.Type == "CERTIFICATE" {
			_, err := x509.ParseCertificate(b.Bytes)
			return err == nil
		}
	}
}

// stamp describes the files' sizes and modification times.
func stamp(files ...string) string {
	out := ""
	for _, name := range files {
		if name == "" {
			continue
		}
		if fi, err := os.Stat(name); err == nil {
			out += fmt.Sprintf("%s:%d:%d;", name, fi.Size(), fi.ModTime().UnixNano())
		} else {
			out += name + ":missing;"
		}
	}
	return out
}

// ReadPool reads a PEM file of CA certificates. Its errors leave the
// file's name out, for the caller to name it (see FileError).
func ReadPool(file string) (*x509.CertPool, error) {
	data, err := readFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

// readFile reads a PEM file, a regular file of at most filebound.MaxPEM
// bytes, with errors that leave the file's name out: "no such file or
// directory", "is not a regular file (a folder)".
func readFile(file string) ([]byte, error) {
	return filebound.Read(file, filebound.MaxPEM)
}

// MutualTLS reports whether clients must present a certificate.
func (s *Server) MutualTLS() bool { return s.clientCAFile != "" }

// Config returns a server configuration (TLS 1.2 or later) that serves the
// certificate in force at each handshake and, for mutual TLS, requires a
// client certificate that chains to the client CA in force. nextProtos are
// the ALPN protocols, such as "h2" and "http/1.1".
func (s *Server) Config(nextProtos ...string) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			f := s.current.Load()
			c := base.Clone()
			c.Certificates = []tls.Certificate{*f.cert}
			if f.clientCA != nil {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = f.clientCA
			}
			return c, nil
		},
	}
}

// Client returns a client configuration (TLS 1.2 or later) that trusts the
// CAs of caFile (empty: the system's roots), presents the certificate of
// certFile and keyFile if given (both or neither), and checks the server's
// name against serverName (empty: the address dialled). A file's error is
// a *FileError keyed by the Redis store section's keys (tls_ca_file,
// tls_cert_file, tls_key_file).
func Client(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pool, err := ReadPool(caFile)
		if err != nil {
			return nil, &FileError{"tls_ca_file", caFile, err}
		}
		c.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := keyPair(certFile, keyFile, "tls_cert_file", "tls_key_file")
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	return c, nil
}

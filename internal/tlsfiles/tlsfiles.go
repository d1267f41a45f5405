// Package tlsfiles builds TLS configurations from PEM files: a server's,
// whose certificate and client CA are read again on Reload (and served to
// the next handshakes without a restart), and a client's, for the Redis
// store.
//
// It is a helper room: it imports the standard library only.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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

// NewServer reads the files; clientCAFile may be empty (no mutual TLS).
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

func (s *Server) read() (*serverFiles, error) {
	f := &serverFiles{stamp: stamp(s.certFile, s.keyFile, s.clientCAFile)}
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls.cert_file %s, tls.key_file %s: %w", s.certFile, s.keyFile, err)
	}
	if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("tls.cert_file %s: the certificate expired at %s", s.certFile, cert.Leaf.NotAfter.Format(time.RFC3339))
	}
	f.cert = &cert
	if s.clientCAFile != "" {
		if f.clientCA, err = ReadPool(s.clientCAFile); err != nil {
			return nil, fmt.Errorf("tls.client_ca_file: %w", err)
		}
	}
	return f, nil
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

// ReadPool reads a PEM file of CA certificates.
func ReadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
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
// name against serverName (empty: the address dialled).
func Client(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pool, err := ReadPool(caFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	return c, nil
}

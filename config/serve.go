package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/filebound"
	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
	"github.com/floodgate-rl/floodgate/server"
)

// Auth says where the API's bearer tokens are: a file, or an environment
// variable, never the config file itself. Both hold tokens one per line as
// NAME SCOPES TOKEN (see server.ParseTokens); an environment variable may
// separate them with ';'. With neither, the API needs no token.
type Auth struct {
	// TokensFile is a file of tokens, read again on SIGHUP and when it
	// changes.
	TokensFile string `yaml:"tokens_file"`
	// TokensEnv names an environment variable holding the tokens.
	TokensEnv string `yaml:"tokens_env"`
}

// Enabled reports whether tokens are configured.
func (a Auth) Enabled() bool { return a.TokensFile != "" || a.TokensEnv != "" }

// Tokens reads the tokens; nil without Auth. Errors name the key
// (auth.tokens_file or auth.tokens_env), the file or the variable and the
// line, never a token.
func (a Auth) Tokens() (*server.Tokens, error) {
	t, err := a.tokens()
	if err != nil {
		key := "auth.tokens_file"
		if a.TokensFile == "" {
			key = "auth.tokens_env"
		}
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return t, nil
}

// tokens is Tokens without the key in its errors, for a caller that names
// it (validation's errors name the key and its line).
func (a Auth) tokens() (*server.Tokens, error) {
	switch {
	case a.TokensFile != "":
		fi, err := os.Stat(a.TokensFile)
		if err == nil && fi.IsDir() {
			return nil, fmt.Errorf("%s is a folder; name the tokens file in it (one token per line as NAME SCOPES TOKEN)", a.TokensFile)
		}
		data, err := filebound.Read(a.TokensFile, filebound.MaxTokens)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.TokensFile, err)
		}
		return server.ParseTokens(string(data), a.TokensFile)
	case a.TokensEnv != "":
		data, ok := os.LookupEnv(a.TokensEnv)
		if !ok {
			return nil, fmt.Errorf("the environment variable %s is not set", a.TokensEnv)
		}
		return server.ParseTokens(data, "$"+a.TokensEnv)
	}
	return nil, nil
}

// TLS is a listener's certificate, its key, and for mutual TLS the CA that
// client certificates must chain to. The files are read again on SIGHUP
// and when they change.
type TLS struct {
	// CertFile is the PEM certificate (chain) the listeners serve.
	CertFile string `yaml:"cert_file"`
	// KeyFile is its PEM private key.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, if set, requires every client to present a certificate
	// signed by one of its PEM CAs (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the listeners serve TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// Server reads the files and returns the listeners' TLS; nil without
// CertFile.
func (t TLS) Server() (*tlsfiles.Server, error) {
	if !t.Enabled() {
		return nil, nil
	}
	return tlsfiles.NewServer(t.CertFile, t.KeyFile, t.ClientCAFile)
}

// Defaults of the serve settings.
const (
	// DefaultMaxConnections is each listener's connection cap.
	DefaultMaxConnections = 10_000
	// DefaultMaxKeys is the memory store's cap on keys.
	DefaultMaxKeys = 1_000_000
)

// MaxConnectionsValue returns MaxConnections or its default.
func (c *Config) MaxConnectionsValue() int {
	if c.MaxConnections == 0 {
		return DefaultMaxConnections
	}
	return c.MaxConnections
}

// MaxKeysValue returns the memory store's cap on keys, or its default.
func (s Store) MaxKeysValue() int {
	if s.MaxKeys == 0 {
		return DefaultMaxKeys
	}
	return s.MaxKeys
}

// checkServe checks the listeners' settings: addresses, caps, tokens and
// TLS files (read now, so a bad file is found by validation, not at the
// first request).
func (c *Config) checkServe() []error {
	var errs []error
	bad := func(path, value, reason string) { errs = append(errs, c.lines.Error(path, value, reason)) }
	if c.MaxConnections < 0 {
		bad("max_connections", fmt.Sprint(c.MaxConnections), fmt.Sprintf("must be positive (0 or absent: %d)", DefaultMaxConnections))
	}
	if c.MaxInFlight < 0 {
		bad("max_in_flight", fmt.Sprint(c.MaxInFlight), fmt.Sprintf("must be positive (0 or absent: %d)", server.DefaultMaxInFlight))
	}
	switch {
	case c.Auth.TokensFile != "" && c.Auth.TokensEnv != "":
		bad("auth.tokens_env", c.Auth.TokensEnv, "cannot be used together with auth.tokens_file; keep one")
	case c.Auth.Enabled():
		path := "auth.tokens_file"
		if c.Auth.TokensEnv != "" {
			path = "auth.tokens_env"
		}
		if _, err := c.Auth.tokens(); err != nil {
			bad(path, "", err.Error())
		}
	}
	t := c.TLS
	switch {
	case t.CertFile == "" && (t.KeyFile != "" || t.ClientCAFile != ""):
		var set []string // only the keys the file sets
		if t.KeyFile != "" {
			set = append(set, "tls.key_file")
		}
		if t.ClientCAFile != "" {
			set = append(set, "tls.client_ca_file")
		}
		bad("tls.cert_file", "", "is required with "+strings.Join(set, " and ")+": the certificate the listeners serve")
	case t.CertFile != "" && t.KeyFile == "":
		bad("tls.key_file", "", "is required with tls.cert_file")
	case t.Enabled():
		if _, err := t.Server(); err != nil {
			var fe *tlsfiles.FileError
			if errors.As(err, &fe) {
				bad(fe.Key, fe.File, fe.Err.Error())
			} else {
				bad("tls", "", err.Error())
			}
		}
	}
	return errs
}

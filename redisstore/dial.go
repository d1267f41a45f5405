package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// applyDial sets what opt needs beyond rueidis's defaults for cfg: a dialer
// for a unix socket address, and the TLS verification of
// Config.TLSSkipHostnameVerification. Over TCP without the option, opt is
// left as it was (rueidis's own dialer and crypto/tls's full check).
func applyDial(opt *rueidis.ClientOption, cfg *Config) {
	if cfg.TLS != nil && cfg.TLSSkipHostnameVerification {
		opt.TLSConfig = skipHostname(cfg.TLS)
		if opt.Sentinel.MasterSet != "" {
			opt.Sentinel.TLSConfig = opt.TLSConfig
		}
		if cfg.Logger != nil {
			cfg.Logger.Warn("redisstore: TLS hostname verification is off (tls_skip_hostname_verification): Redis's certificate must chain to the trusted CAs, but may name any host")
		}
	}
	if len(cfg.Addrs) == 1 {
		if path, ok := unixPath(cfg.Addrs[0]); ok {
			opt.DialCtxFn = unixDialer(cfg.Addrs[0], path)
		}
	}
}

// unixDialer returns a rueidis dial function that reaches the address
// addr over the unix socket at path, with TLS over it when rueidis passes a
// configuration, and any other address (a cluster node that a server
// reached under ModeAuto announces) over TCP as rueidis would.
func unixDialer(addr, path string) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		network := "tcp"
		if dst == addr {
			network, dst = "unix", path
		}
		if tc != nil {
			return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, network, dst)
		}
		return d.DialContext(ctx, network, dst)
	}
}

// skipHostname returns a copy of c that verifies the server's certificate
// chain as crypto/tls would (c.RootCAs, or the system's roots when nil;
// valid now; meant for a server) but not the name it holds.
// envoyproxy/ratelimit does the same with InsecureSkipVerify and its own
// chain check.
func skipHostname(c *tls.Config) *tls.Config {
	out := c.Clone()
	roots, next := c.RootCAs, c.VerifyConnection
	out.InsecureSkipVerify = true
	out.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redisstore: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return err
		}
		if next != nil {
			return next(cs)
		}
		return nil
	}
	return out
}

// errHandshake explains a connection that the server closed while rueidis
// opened it: what a proxy that does not speak the Redis commands a
// connection starts with (HELLO, CLIENT SETNAME) does, such as twemproxy
// (nutcracker), the usual target of envoyproxy/ratelimit's default unix
// socket.
var errHandshake = errors.New("the server closed the connection during the handshake (HELLO, CLIENT SETNAME): is it a proxy such as twemproxy (nutcracker)? floodgate needs Redis itself (7.0 or later; Sentinel and Cluster are fine), which runs its Lua scripts")

// refusedSetUp returns the *ConfigError that err means when Redis answered
// the connection's set-up (HELLO with AUTH, SELECT) with an error reply that
// is not an outage: a wrong password or user, an ACL user without the
// commands a connection starts with, or a database number out of range.
// Such a store is misconfigured, not unavailable: its calls fail as store
// errors, which never admit, whatever a rule's failure mode. It returns nil
// for any other error.
func refusedSetUp(err error, cfg *Config) error {
	rerr, ok := rueidis.IsRedisErr(err)
	if !ok {
		return nil
	}
	msg := rerr.Error()
	for _, p := range outages {
		if strings.HasPrefix(msg, p) {
			return nil
		}
	}
	field, value, fix := "Password", "(not shown)", "check the username and password (Config.Username, Config.Password)"
	if cfg.mode() == ModeSentinel {
		fix += ", and the Sentinels' own (Config.SentinelUsername, Config.SentinelPassword)"
	}
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
	case strings.HasPrefix(msg, "NOAUTH"):
		value, fix = "(empty)", "Redis requires a password: set Config.Password (and Config.Username for an ACL user)"
	case strings.HasPrefix(msg, "NOPERM"):
		field, value, fix = "Username", strconv.Quote(cfg.Username), "the ACL user lacks a command a connection starts with (HELLO, CLIENT, SELECT): grant them"
	case strings.Contains(msg, "DB index"):
		field, value, fix = "DB", strconv.Itoa(cfg.DB), "use a database number the server has (its `databases` setting; 0 to 15 by default)"
	default:
		field, value, fix = "Addrs", strconv.Quote(strings.Join(cfg.Addrs, ",")), "the server there refused the commands a connection starts with (HELLO, CLIENT SETNAME, SELECT): is it Redis 7 or later, and does its configuration allow them?"
	}
	return &ConfigError{Field: field, Value: value, Reason: fmt.Sprintf("is refused by Redis (%s): %s", msg, fix)}
}

// connectError adds errHandshake to err when the server closed the
// connection before answering.
func connectError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w (%w)", errHandshake, err)
	}
	return err
}

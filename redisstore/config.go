package redisstore

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// DefaultTimeout is the per-call timeout used when Config.Timeout is zero.
const DefaultTimeout = 50 * time.Millisecond

// DefaultFlushDelay is the flush delay used when Config.FlushDelay is zero.
const DefaultFlushDelay = 20 * time.Microsecond

// maxFlushDelay bounds Config.FlushDelay: the delay adds up to itself to a
// call's latency.
const maxFlushDelay = time.Millisecond

// DefaultKeyPrefix is the key prefix used when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "fg:"

// Mode selects how the store connects to Redis.
type Mode uint8

// The modes. The zero value, ModeAuto, infers the mode from the Config.
const (
	// ModeAuto uses Sentinel if SentinelMaster is set; otherwise it asks
	// the server at Addrs and uses Cluster if it runs in cluster mode, and a
	// single server if not.
	ModeAuto Mode = iota
	// ModeStandalone talks to the single server at Addrs[0].
	ModeStandalone
	// ModeSentinel asks the sentinels at Addrs for the primary of
	// SentinelMaster and follows it across failovers.
	ModeSentinel
	// ModeCluster discovers a Redis Cluster from the nodes at Addrs, and
	// fails if they are not cluster nodes.
	ModeCluster
)

var modeNames = [...]string{ModeAuto: "auto", ModeStandalone: "standalone", ModeSentinel: "sentinel", ModeCluster: "cluster"}

// String returns the mode's name, such as "cluster".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Config configures a Store. The zero value is not usable: Addrs is
// required. Every other field has a working default.
type Config struct {
	// Addrs are the host:port addresses to connect to: the server, the
	// sentinels (ModeSentinel) or any cluster nodes (ModeCluster). A single
	// server (ModeStandalone, or ModeAuto with one address) may instead be
	// a unix socket: "unix:///path/to/redis.sock" or a path starting with
	// "/" (with TLS over it, set TLS.ServerName).
	Addrs []string
	// Mode selects standalone, Sentinel or Cluster. Zero (ModeAuto) infers
	// it.
	Mode Mode
	// SentinelMaster is the name of the primary the sentinels monitor.
	// Setting it selects ModeSentinel under ModeAuto.
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (empty: no AUTH). Username and Password apply to the Redis servers.
	SentinelUsername, SentinelPassword string
	// Username and Password authenticate with AUTH (Redis 6 ACL users);
	// leave Username empty for the default user.
	Username, Password string
	// TLS, if not nil, connects with TLS (to the sentinels too).
	TLS *tls.Config
	// TLSSkipHostnameVerification, with TLS, accepts a server certificate
	// that does not name the address dialled (or TLS.ServerName), as
	// envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION does. The
	// certificate must still chain to TLS.RootCAs (nil: the system's roots)
	// and be valid now, so any server certificate of those CAs is accepted;
	// prefer setting TLS.ServerName. New logs a warning when it is set.
	TLSSkipHostnameVerification bool
	// DB selects the database (standalone and Sentinel only: a cluster has
	// only database 0).
	DB int
	// KeyPrefix is prepended to every key; empty means DefaultKeyPrefix. It
	// must not contain '{' or '}', which would break the hash tags.
	KeyPrefix string
	// Timeout bounds every store call, from sending the script to reading
	// its reply; zero means DefaultTimeout. A call never blocks longer
	// (plus scheduling delays), even when Redis hangs.
	Timeout time.Duration
	// FlushDelay is how long the connection's writer may pause after
	// sending a batch of calls, to gather the calls made meanwhile into the
	// next batch (rueidis's MaxFlushDelay): under load, fewer and larger
	// batches cost both sides fewer system calls. A lone caller never
	// waits. Zero means DefaultFlushDelay (20µs); a negative value sends
	// every batch at once. At most 1ms.
	FlushDelay time.Duration
	// Clock, if not nil, supplies the time of each decision instead of
	// Redis's TIME. It is meant for tests and simulations: Redis still
	// expires keys on its own clock.
	Clock floodgate.Clock
	// LazyConnect makes New return a working store even when Redis cannot
	// be reached: the store answers every call with ErrStoreUnavailable
	// (so rules follow their failure mode) and keeps connecting in the
	// background, every 250ms, logging the reason; calls succeed as soon
	// as it has connected. It needs an explicit Mode (ModeAuto must ask
	// the server which mode it runs in).
	LazyConnect bool
	// MaxInFlight bounds the calls in flight to each Redis node, counting
	// the ones whose callers gave up but Redis has not answered; a call
	// waits for a place at most until its deadline. Zero means
	// DefaultMaxInFlight; a negative value removes the bound. At most 768.
	MaxInFlight int
	// BreakerFailures is how many calls to one node must fail in a row
	// (no answer within their deadline, or a broken connection) to open
	// the node's circuit breaker: calls for the node's keys then fail at
	// once with ErrStoreUnavailable, until the node answers a probe (sent
	// every 200ms). Zero means DefaultBreakerFailures (5); a negative
	// value never opens the breaker.
	BreakerFailures int
	// Logger receives the store's warnings: breakers opening and closing,
	// failed connection attempts, an evicting maxmemory-policy. Nil logs
	// nothing.
	Logger *slog.Logger
}

// maxMaxInFlight bounds Config.MaxInFlight: rueidis's ring holds 1024
// commands per connection, and its own PINGs and the store's probes need
// room beside the calls.
const maxMaxInFlight = 768

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field  string // the field's name, such as "KeyPrefix"
	Value  string // the bad value, quoted or formatted
	Reason string // what is wrong with it
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("redisstore: invalid config: %s %s %s", e.Field, e.Value, e.Reason)
}

// validateStore checks the fields every store uses, whoever made its
// connection: the key prefix and the timeout.
func (c *Config) validateStore() error {
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return &ConfigError{Field: "KeyPrefix", Value: strconv.Quote(c.KeyPrefix), Reason: "must not contain '{' or '}' (they would break the Redis Cluster hash tags)"}
	}
	if c.FlushDelay > maxFlushDelay {
		return &ConfigError{Field: "FlushDelay", Value: c.FlushDelay.String(), Reason: "must be at most 1ms (it adds up to itself to a call's latency; negative turns it off)"}
	}
	if c.Timeout < 0 {
		return &ConfigError{Field: "Timeout", Value: c.Timeout.String(), Reason: "must not be negative (zero means the default, 50ms)"}
	}
	if c.MaxInFlight > maxMaxInFlight {
		return &ConfigError{Field: "MaxInFlight", Value: strconv.Itoa(c.MaxInFlight), Reason: "must be at most 768 (rueidis queues 1024 commands per connection; zero means the default, 256; negative removes the bound)"}
	}
	return nil
}

// Validate reports whether c is usable, as a *ConfigError naming the first
// bad field. New calls it.
func (c *Config) Validate() error {
	if len(c.Addrs) == 0 {
		return &ConfigError{Field: "Addrs", Value: "[]", Reason: "must name at least one host:port"}
	}
	if c.Mode > ModeCluster {
		return &ConfigError{Field: "Mode", Value: c.Mode.String(), Reason: "is not auto, standalone, sentinel or cluster"}
	}
	mode := c.mode()
	for i, a := range c.Addrs {
		if path, ok := unixPath(a); ok {
			switch {
			case path == "" || path[0] != '/':
				return &ConfigError{Field: fmt.Sprintf("Addrs[%d]", i), Value: strconv.Quote(a), Reason: "is not a unix socket address: write unix:///absolute/path/to/redis.sock"}
			case mode == ModeSentinel || mode == ModeCluster:
				return &ConfigError{Field: fmt.Sprintf("Addrs[%d]", i), Value: strconv.Quote(a), Reason: "is a unix socket, which reaches one server only: " + mode.String() + " mode needs host:port addresses (its nodes announce each other by host:port)"}
			case len(c.Addrs) > 1:
				return &ConfigError{Field: fmt.Sprintf("Addrs[%d]", i), Value: strconv.Quote(a), Reason: "is a unix socket, which reaches one server only: it must be the only address"}
			}
			continue
		}
		if reason := checkHostPort(a, len(c.Addrs) == 1 && (mode == ModeAuto || mode == ModeStandalone)); reason != "" {
			return &ConfigError{Field: fmt.Sprintf("Addrs[%d]", i), Value: strconv.Quote(a), Reason: reason}
		}
	}
	switch {
	case c.TLSSkipHostnameVerification && c.TLS == nil:
		return &ConfigError{Field: "TLSSkipHostnameVerification", Value: "true", Reason: "applies only with TLS; set TLS too"}
	case mode == ModeSentinel && c.SentinelMaster == "":
		return &ConfigError{Field: "SentinelMaster", Value: `""`, Reason: "must name the monitored primary in sentinel mode"}
	case mode != ModeSentinel && c.SentinelMaster != "":
		return &ConfigError{Field: "SentinelMaster", Value: strconv.Quote(c.SentinelMaster), Reason: "applies to sentinel mode only, but Mode is " + c.Mode.String()}
	case mode == ModeStandalone && len(c.Addrs) > 1:
		return &ConfigError{Field: "Addrs", Value: strconv.Quote(strings.Join(c.Addrs, ",")), Reason: "must hold exactly one address in standalone mode"}
	case c.DB < 0:
		return &ConfigError{Field: "DB", Value: strconv.Itoa(c.DB), Reason: "must not be negative"}
	case c.DB != 0 && mode == ModeCluster:
		return &ConfigError{Field: "DB", Value: strconv.Itoa(c.DB), Reason: "must be 0 in cluster mode (a cluster has only database 0)"}
	case c.LazyConnect && mode == ModeAuto:
		return &ConfigError{Field: "Mode", Value: "auto", Reason: "cannot be used with LazyConnect (the server would have to say whether it is a cluster); set standalone, sentinel or cluster"}
	}
	return c.validateStore()
}

// checkHostPort returns why addr, not a unix socket, cannot be dialled as
// host:port, or "" if it can: the port must be a number from 1 to 65535.
// unixOK says whether a unix socket could stand there instead: the fix
// names one if addr looks like a path.
func checkHostPort(addr string, unixOK bool) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		if unixOK && strings.Contains(addr, "/") {
			return "is not host:port (nor a unix socket): write host:port, such as redis:6379, or unix:///path/to/redis.sock"
		}
		return "is not host:port: write host:port, such as redis:6379"
	}
	n, err := strconv.Atoi(port)
	switch {
	case err != nil || strings.Trim(port, "0123456789") != "":
		return fmt.Sprintf("has port %q, which is not a number: write host:port with a port from 1 to 65535, such as redis:6379", port)
	case n < 1 || n > 65535:
		return fmt.Sprintf("has port %s, not one from 1 to 65535: write host:port, such as redis:6379", port)
	}
	return ""
}

// unixPath reports whether addr names a unix socket ("unix://path" or a
// path starting with "/"), and its path.
func unixPath(addr string) (string, bool) {
	if rest, ok := strings.CutPrefix(addr, "unix://"); ok {
		return rest, true
	}
	return addr, strings.HasPrefix(addr, "/")
}

func (c *Config) mode() Mode {
	if c.Mode == ModeAuto && c.SentinelMaster != "" {
		return ModeSentinel
	}
	return c.Mode
}

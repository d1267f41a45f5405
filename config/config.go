// Package config reads floodgate's server configuration, a YAML file naming
// the listen addresses, the store, the rules and how to find a client's
// address, and maps it onto the libraries' own types: [Config.Policy] is the
// server's policy, [Config.RedisConfig] the Redis store's config. The
// libraries validate their values; config translates their errors into the
// file's terms, naming the line, the field and the bad value. Unknown keys
// are rejected.
package config

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/filebound"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// Config is the whole server configuration. Parse fills it from YAML; a
// Config written in Go works the same, without line numbers in its errors.
type Config struct {
	// Listen is the HTTP API's address (API, metrics, health).
	Listen string `yaml:"listen"`
	// GRPCListen is the Envoy rate-limit gRPC service's address.
	GRPCListen string `yaml:"grpc_listen"`
	// EnvoyConfig names a folder of envoyproxy/ratelimit-format rule files.
	EnvoyConfig string `yaml:"envoy_config"`
	// EnvoyQuota configures the Rate Limit Quota Service beside RLS.
	EnvoyQuota EnvoyQuota `yaml:"envoy_quota"`
	// Store says where rate-limit state lives.
	Store Store `yaml:"store"`
	// Rules are the named limits the API decides against.
	Rules []Rule `yaml:"rules"`
	// ClientIP says how forward-auth finds the original client.
	ClientIP ClientIP `yaml:"client_ip"`
	// ForwardAuth configures /v1/forward-auth.
	ForwardAuth ForwardAuth `yaml:"forward_auth"`
	// Log configures structured logging.
	Log Log `yaml:"log"`
	// Headers selects the rate-limit response headers: both (default),
	// ietf (RateLimit, RateLimit-Policy), legacy (X-RateLimit-*) or none.
	Headers string `yaml:"headers"`
	// Auth names where the API's bearer tokens are (none: no
	// authentication).
	Auth Auth `yaml:"auth"`
	// TLS serves the HTTP and gRPC listeners over TLS, or mutual TLS.
	TLS TLS `yaml:"tls"`
	// MetricsListen, if set, serves /metrics, /healthz and /readyz on an
	// address of their own, without authentication, and takes /metrics off
	// the API's listener.
	MetricsListen string `yaml:"metrics_listen"`
	// MaxConnections bounds the open connections of each listener (0 or
	// absent: DefaultMaxConnections).
	MaxConnections int `yaml:"max_connections"`
	// MaxInFlight bounds the API requests waiting on the store at once (0
	// or absent: server.DefaultMaxInFlight); see server.Options.MaxInFlight.
	MaxInFlight int `yaml:"max_in_flight"`

	// Source names where the config came from (a path, or "built-in").
	Source string `yaml:"-"`

	lines  yamlfield.Lines // the line of each path, from Parse
	failed map[string]bool // the paths that did not decode, from Parse
}

// ClientIP configures how a client's address is found behind proxies
// (clientip.Resolver).
type ClientIP struct {
	// TrustedProxies are the CIDRs whose forwarding headers are believed.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Header is the forwarding header the trusted proxies write:
	// x-forwarded-for (default) or forwarded (RFC 7239).
	Header string `yaml:"header"`
	// IPv6Prefix groups IPv6 clients by this prefix length (default 64).
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// ForwardAuth configures the forward-auth endpoint.
type ForwardAuth struct {
	// DenyStatus is the status when a request is over its limit (default
	// 429; nginx auth_request needs 401 or 403).
	DenyStatus int `yaml:"deny_status"`
	// RuleHeader names the request header carrying the rule, when the query
	// has none (default X-Floodgate-Rule).
	RuleHeader string `yaml:"rule_header"`
}

// Log configures logging.
type Log struct {
	// Format is text or json.
	Format string `yaml:"format"`
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
}

// Defaults of the settings no library has.
const (
	DefaultListen     = "127.0.0.1:8080"
	DefaultGRPCListen = "127.0.0.1:8081"
)

// FieldError is a bad value in the file: its line, field path and value.
type FieldError = yamlfield.Error

// Parse reads a configuration from YAML and validates it. source names the
// file in error messages.
func Parse(data []byte, source string) (*Config, error) {
	root, dec, err := yamlfield.Parse(data)
	if errors.Is(err, io.EOF) || err == nil && len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty", source)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if line := yamlfield.NextDocument(dec); line > 0 {
		return nil, fmt.Errorf("%s: %w", source, &FieldError{Line: line, Reason: "holds more than one YAML document", Fix: "keep one configuration per file"})
	}
	c := &Config{Source: source}
	lines, decodeErr := yamlfield.Decode(root, c)
	c.lines = lines
	// Validate what did decode too, so that one type error does not hide
	// the file's other errors; a field that did not decode is reported
	// once, by its type error.
	errs := leaves(decodeErr)
	if decodeErr == nil {
		errs = nil
	}
	failed := map[string]bool{}
	for _, e := range errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			failed[fe.Path] = true
		}
	}
	c.failed = failed
	for _, e := range leaves(c.validate()) {
		var fe *FieldError
		if e == nil || errors.As(e, &fe) && underAny(fe.Path, failed) {
			continue
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", source, errors.Join(byLine(errs)...))
	}
	return c, nil
}

// underAny reports whether path is one of paths or inside one.
func underAny(path string, paths map[string]bool) bool {
	for p := range paths {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

// Load reads and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := filebound.Read(path, filebound.MaxConfig)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(data, path)
}

// Example is the built-in policy `floodgate serve` runs with no config file.
const Example = `# floodgate's built-in example policy (floodgate serve with no --config).
listen: 127.0.0.1:8080
store:
  type: memory
rules:
  - name: login
    algorithm: sliding_window_log
    limit: 5
    window: 1m
    failure_mode: closed
  - name: api
    algorithm: token_bucket
    capacity: 100
    refill: 10/s
    failure_mode: open
`

// Default returns the built-in example configuration.
func Default() *Config {
	c, err := Parse([]byte(Example), "built-in")
	if err != nil {
		panic("config: built-in example is invalid: " + err.Error()) // a bug, caught by tests
	}
	return c
}

// validate fills in the defaults and checks every section, through the
// libraries' own validation where they have it.
func (c *Config) validate() error {
	var errs []error
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.GRPCListen == "" {
		c.GRPCListen = DefaultGRPCListen
	}
	if c.Store.Type == "" {
		c.Store.Type = StoreMemory
	}
	errs = append(errs, c.checkListeners()...)
	errs = append(errs, c.Store.validate(c.lines)...)
	errs = append(errs, c.checkServe()...)
	errs = append(errs, c.checkQuota()...)
	if _, err := c.Policy(); err != nil {
		errs = append(errs, err)
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if err := CheckLogFormat(c.Log.Format); err != nil {
		errs = append(errs, c.lines.Error("log.format", c.Log.Format, err.Error()))
	}
	switch c.Log.Level {
	case "":
		c.Log.Level = "info"
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, c.lines.Error("log.level", c.Log.Level, "is not debug, info, warn or error"))
	}
	return errors.Join(errs...)
}

// CheckLogFormat checks a log format: text or json.
func CheckLogFormat(format string) error {
	if format != "text" && format != "json" {
		return errors.New("is not text or json")
	}
	return nil
}

// Where names the place of path in the file, for an error found outside
// this package: "floodgate.yaml: line 3" (or the nearest enclosing path's
// line, or just the source).
func (c *Config) Where(path string) string {
	if n := c.lines.Line(path); n > 0 {
		return fmt.Sprintf("%s: line %d: %s", c.Source, n, path)
	}
	return fmt.Sprintf("%s: %s", c.Source, path)
}

// Warnings lists settings that are valid but probably mistakes, each
// naming its line: a trusted_proxies entry that trusts every address (so
// any client can pick its own key with X-Forwarded-For), a tokens file
// that every user of the machine can read.
func (c *Config) Warnings() []string {
	var out []string
	if f := c.Auth.TokensFile; f != "" {
		if fi, err := os.Stat(f); err == nil && fi.Mode().Perm()&0o004 != 0 {
			out = append(out, c.Source+": "+c.lines.Error("auth.tokens_file", f, fmt.Sprintf("is readable by every user of this machine (mode %04o): anyone logged in can read the tokens; chmod 600 it (a Kubernetes Secret volume: defaultMode: 0440 with the pod's fsGroup)", fi.Mode().Perm())).Error())
		}
	}
	for i, cidr := range c.ClientIP.TrustedProxies {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(cidr))
		if err != nil || pfx.Bits() != 0 {
			continue
		}
		path := yamlfield.Index("client_ip.trusted_proxies", i)
		out = append(out, c.Source+": "+c.lines.Error(path, cidr, "trusts every address: any client can then choose its own key with X-Forwarded-For or Forwarded, and spend another client's quota; list only your proxies' addresses").Error())
	}
	return out
}

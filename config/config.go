// Package config reads and validates floodgate's server configuration: a
// YAML file naming the listen addresses, the store, the rules and how to find
// a client's address. Errors name the line, the field and the bad value;
// unknown keys are rejected.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/server"
)

// Config is the whole server configuration.
type Config struct {
	// Listen is the HTTP API's address (API, metrics, health).
	Listen string `yaml:"listen"`
	// GRPCListen is the Envoy rate-limit gRPC service's address.
	GRPCListen string `yaml:"grpc_listen"`
	// EnvoyConfig names a folder of envoyproxy/ratelimit-format rule files.
	EnvoyConfig string `yaml:"envoy_config"`
	// Store says where rate-limit state lives.
	Store Store `yaml:"store"`
	// Rules are the named limits the API decides against.
	Rules []Rule `yaml:"rules"`
	// ClientIP says how forward-auth finds the original client.
	ClientIP ClientIP `yaml:"client_ip"`
	// ForwardAuth configures GET /v1/forward-auth.
	ForwardAuth ForwardAuth `yaml:"forward_auth"`
	// Log configures structured logging.
	Log Log `yaml:"log"`
	// Headers selects the rate-limit response headers: both (default),
	// ietf (RateLimit, RateLimit-Policy), legacy (X-RateLimit-*) or none.
	Headers string `yaml:"headers"`

	// Source names where the config came from (a path, or "built-in").
	Source string `yaml:"-"`
}

// Store configures the rate-limit store.
type Store struct {
	// Type is memory, redis, redis-cluster or redis-sentinel.
	Type string `yaml:"type"`
	// Addrs are the Redis addresses (seeds, for a cluster; sentinels, for
	// redis-sentinel).
	Addrs []string `yaml:"addrs"`
	// MasterName is the Sentinel master set (redis-sentinel only).
	MasterName string `yaml:"master_name"`
	// Username is the Redis ACL user, if any.
	Username string `yaml:"username"`
	// Password is the Redis password. Prefer PasswordEnv. Never logged.
	Password string `yaml:"password"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `yaml:"password_env"`
	// TLS turns on TLS to Redis with the system's roots.
	TLS bool `yaml:"tls"`
	// DB selects the Redis database (standalone and sentinel only).
	DB int `yaml:"db"`
	// Timeout bounds each store call.
	Timeout time.Duration `yaml:"timeout"`
	// KeyPrefix starts every Redis key.
	KeyPrefix string `yaml:"key_prefix"`
	// FlushDelay is how long the Redis connection may wait to gather
	// concurrent calls into one batch (0 or absent: 20µs; a negative value
	// such as -1ns turns it off; at most 1ms). See redisstore.Config.
	FlushDelay time.Duration `yaml:"flush_delay"`

	line lines
}

// Rule is one named limit.
type Rule struct {
	// Name identifies the rule in the API, metrics and headers.
	Name string `yaml:"name"`
	// Algorithm is sliding_window_log, token_bucket, sliding_window_counter
	// or fixed_window.
	Algorithm string `yaml:"algorithm"`
	// Limit is the quota per window (windowed algorithms).
	Limit int64 `yaml:"limit"`
	// Window is the window length (windowed algorithms).
	Window time.Duration `yaml:"window"`
	// Capacity is the bucket size (token_bucket).
	Capacity int64 `yaml:"capacity"`
	// Refill is the bucket's refill rate such as 10/s or 1/500ms
	// (token_bucket).
	Refill string `yaml:"refill"`
	// FailureMode is open (admit when the store is unavailable) or closed
	// (deny with 503).
	FailureMode string `yaml:"failure_mode"`
	// Shadow decides and reports but never denies.
	Shadow bool `yaml:"shadow"`

	line  lines
	limit floodgate.Limit
}

// ClientIP configures how a client's address is found behind proxies.
type ClientIP struct {
	// TrustedProxies are the CIDRs whose forwarding headers are believed.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Header is the forwarding header the trusted proxies write:
	// x-forwarded-for (default) or forwarded (RFC 7239).
	Header string `yaml:"header"`
	// IPv6Prefix groups IPv6 clients by this prefix length (default 64).
	IPv6Prefix int `yaml:"ipv6_prefix"`

	line lines
}

// HeaderMode returns the rate-limit header mode the config selects.
func (c *Config) HeaderMode() httplimit.HeaderMode {
	switch c.Headers {
	case "ietf":
		return httplimit.HeadersIETF
	case "legacy":
		return httplimit.HeadersLegacy
	case "none":
		return httplimit.HeadersNone
	}
	return httplimit.HeadersBoth
}

// Resolver returns the clientip settings this section describes.
func (c ClientIP) Resolver() clientip.Resolver {
	r := clientip.Resolver{TrustedProxies: c.TrustedProxies, IPv6Prefix: c.IPv6Prefix}
	if strings.EqualFold(c.Header, "forwarded") {
		r.Header = clientip.Forwarded
	}
	return r
}

// ForwardAuth configures the forward-auth endpoint.
type ForwardAuth struct {
	// DenyStatus is the status when a request is over its limit (default
	// 429; nginx auth_request needs 401 or 403).
	DenyStatus int `yaml:"deny_status"`
	// RuleHeader names the request header carrying the rule, when the query
	// has none (default X-Floodgate-Rule).
	RuleHeader string `yaml:"rule_header"`

	line lines
}

// Log configures logging.
type Log struct {
	// Format is text or json.
	Format string `yaml:"format"`
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`

	line lines
}

// Defaults.
const (
	DefaultListen     = "127.0.0.1:8080"
	DefaultGRPCListen = "127.0.0.1:8081"
	DefaultTimeout    = 50 * time.Millisecond
	DefaultKeyPrefix  = "fg:"
	DefaultRuleHeader = "X-Floodgate-Rule"
)

// Failure modes.
const (
	FailOpen   = "open"
	FailClosed = "closed"
)

// Store types.
const (
	StoreMemory        = "memory"
	StoreRedis         = "redis"
	StoreRedisCluster  = "redis-cluster"
	StoreRedisSentinel = "redis-sentinel"
)

// RateLimit returns the rule's validated floodgate.Limit.
func (r Rule) RateLimit() floodgate.Limit { return r.limit }

// FailOpen reports whether the rule admits requests when the store is
// unavailable.
func (r Rule) FailOpen() bool { return r.FailureMode == FailOpen }

// Rule returns the rule with the given name.
func (c *Config) Rule(name string) (Rule, bool) {
	for _, r := range c.Rules {
		if r.Name == name {
			return r, true
		}
	}
	return Rule{}, false
}

// lines maps a mapping's keys to their line numbers, for error messages.
type lines map[string]int

func (l lines) at(field string) int { return l[field] }

// captureLines records the line of each key of a mapping node.
func captureLines(n *yaml.Node) lines {
	l := lines{"": n.Line}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			l[n.Content[i].Value] = n.Content[i].Line
		}
	}
	return l
}

// UnmarshalYAML implements yaml.Unmarshaler, recording line numbers.
func (r *Rule) UnmarshalYAML(n *yaml.Node) error {
	type plain Rule // without the method, so decoding does not recurse
	return decodeWithLines(n, (*plain)(r), &r.line)
}

// UnmarshalYAML implements yaml.Unmarshaler, recording line numbers.
func (s *Store) UnmarshalYAML(n *yaml.Node) error {
	type plain Store // without the method, so decoding does not recurse
	return decodeWithLines(n, (*plain)(s), &s.line)
}

// UnmarshalYAML implements yaml.Unmarshaler, recording line numbers.
func (c *ClientIP) UnmarshalYAML(n *yaml.Node) error {
	type plain ClientIP // without the method, so decoding does not recurse
	return decodeWithLines(n, (*plain)(c), &c.line)
}

// UnmarshalYAML implements yaml.Unmarshaler, recording line numbers.
func (f *ForwardAuth) UnmarshalYAML(n *yaml.Node) error {
	type plain ForwardAuth // without the method, so decoding does not recurse
	return decodeWithLines(n, (*plain)(f), &f.line)
}

// UnmarshalYAML implements yaml.Unmarshaler, recording line numbers.
func (l *Log) UnmarshalYAML(n *yaml.Node) error {
	type plain Log // without the method, so decoding does not recurse
	return decodeWithLines(n, (*plain)(l), &l.line)
}

// decodeWithLines decodes a mapping node strictly into v and records the
// line of each of its keys in line.
func decodeWithLines(n *yaml.Node, v any, line *lines) error {
	if err := decodeStrict(n, v); err != nil {
		return err
	}
	*line = captureLines(n)
	return nil
}

// decodeStrict decodes a node into v, rejecting unknown keys. (A custom
// UnmarshalYAML does not inherit the decoder's KnownFields setting, so the
// node is re-encoded and decoded strictly.)
func decodeStrict(n *yaml.Node, v any) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping, got %s", n.Line, nodeKind(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !hasField(v, k.Value) {
			return fmt.Errorf("line %d: unknown key %q", k.Line, k.Value)
		}
	}
	return n.Decode(v)
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// Parse reads a configuration from YAML and validates it. source names the
// file in error messages.
func Parse(data []byte, source string) (*Config, error) {
	c := &Config{Source: source}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the file is empty", source)
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = unknownField.ReplaceAllString(msg, `unknown key "$1"`)
		return nil, fmt.Errorf("%s: %s", source, msg)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return c, nil
}

// Load reads and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
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

// FieldError is a bad value in the file: its line, field path and value.
type FieldError struct {
	Line   int
	Field  string // such as rules[1].window
	Value  string
	Reason string
}

// Error implements error.
func (e *FieldError) Error() string {
	v := e.Value
	if v == "" {
		v = `""`
	}
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s %s", e.Line, e.Field, v, e.Reason)
	}
	return fmt.Sprintf("%s: %s %s", e.Field, v, e.Reason)
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

var ruleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func (c *Config) validate() error {
	var errs []error
	bad := func(line int, field, value, reason string) {
		errs = append(errs, &FieldError{Line: line, Field: field, Value: value, Reason: reason})
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.GRPCListen == "" {
		c.GRPCListen = DefaultGRPCListen
	}
	s := &c.Store
	if s.Type == "" {
		s.Type = StoreMemory
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.KeyPrefix == "" {
		s.KeyPrefix = DefaultKeyPrefix
	}
	switch s.Type {
	case StoreMemory:
	case StoreRedis, StoreRedisCluster, StoreRedisSentinel:
		if len(s.Addrs) == 0 {
			bad(s.line.at("type"), "store.addrs", "[]", "must list at least one address for store type "+s.Type)
		}
		for i, a := range s.Addrs {
			if _, _, err := splitHostPort(a); err != nil {
				bad(s.line.at("addrs"), fmt.Sprintf("store.addrs[%d]", i), a, "is not host:port")
			}
		}
		if s.Type == StoreRedisSentinel && s.MasterName == "" {
			bad(s.line.at("type"), "store.master_name", "", "is required for redis-sentinel")
		}
		if s.Type == StoreRedisCluster && s.DB != 0 {
			bad(s.line.at("db"), "store.db", fmt.Sprint(s.DB), "must be 0 on a Redis Cluster")
		}
	default:
		bad(s.line.at("type"), "store.type", s.Type, "is not one of memory, redis, redis-cluster, redis-sentinel")
	}
	if s.Timeout < time.Millisecond || s.Timeout > time.Minute {
		bad(s.line.at("timeout"), "store.timeout", s.Timeout.String(), "must be between 1ms and 1m")
	}
	if s.FlushDelay > time.Millisecond {
		bad(s.line.at("flush_delay"), "store.flush_delay", s.FlushDelay.String(), "must be at most 1ms (negative turns it off)")
	}
	if strings.ContainsAny(s.KeyPrefix, "{}") {
		bad(s.line.at("key_prefix"), "store.key_prefix", s.KeyPrefix, "must not contain { or } (they would break Redis Cluster hash tags)")
	}
	if s.DB < 0 {
		bad(s.line.at("db"), "store.db", fmt.Sprint(s.DB), "must not be negative")
	}
	if s.Password != "" && s.PasswordEnv != "" {
		bad(s.line.at("password_env"), "store.password_env", s.PasswordEnv, "cannot be used together with store.password")
	}
	if s.PasswordEnv != "" {
		if _, ok := os.LookupEnv(s.PasswordEnv); !ok {
			bad(s.line.at("password_env"), "store.password_env", s.PasswordEnv, "names an environment variable that is not set")
		}
	}

	seen := map[string]int{}
	for i := range c.Rules {
		r := &c.Rules[i]
		field := func(f string) string { return fmt.Sprintf("rules[%d].%s", i, f) }
		if !ruleName.MatchString(r.Name) {
			bad(r.line.at("name"), field("name"), r.Name, "must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit")
		} else if prev, dup := seen[r.Name]; dup {
			bad(r.line.at("name"), field("name"), r.Name, fmt.Sprintf("is already the name of rules[%d]", prev))
		}
		seen[r.Name] = i
		switch r.FailureMode {
		case "":
			r.FailureMode = FailOpen
		case FailOpen, FailClosed:
		default:
			bad(r.line.at("failure_mode"), field("failure_mode"), r.FailureMode, "is not open or closed")
		}
		alg, err := floodgate.ParseAlgorithm(r.Algorithm)
		if err != nil {
			bad(r.line.at("algorithm"), field("algorithm"), r.Algorithm, "is not one of sliding_window_log, token_bucket, sliding_window_counter, fixed_window")
			continue
		}
		if alg == floodgate.TokenBucket {
			if r.Limit != 0 || r.Window != 0 {
				bad(r.line.at("limit")+r.line.at("window"), field("limit"), fmt.Sprint(r.Limit), "and window do not apply to token_bucket: use capacity and refill")
				continue
			}
			n, per, err := floodgate.ParseRate(r.Refill)
			if err != nil {
				bad(r.line.at("refill"), field("refill"), r.Refill, "is not a rate such as 10/s, 100/m, 5/h or 1/500ms")
				continue
			}
			r.limit = floodgate.NewTokenBucket(r.Capacity, n, per)
		} else {
			if r.Capacity != 0 || r.Refill != "" {
				bad(r.line.at("capacity")+r.line.at("refill"), field("capacity"), fmt.Sprint(r.Capacity), "and refill apply to token_bucket only: use limit and window")
				continue
			}
			r.limit = floodgate.NewLimit(alg, r.Limit, r.Window)
		}
		if err := r.limit.Validate(); err != nil {
			var le *floodgate.LimitError
			if errors.As(err, &le) {
				name, value := yamlField(alg, le.Field, r)
				bad(r.line.at(name), field(name), value, le.Reason)
			} else {
				bad(r.line.at(""), field("algorithm"), r.Algorithm, err.Error())
			}
		}
	}

	ip := &c.ClientIP
	if ip.IPv6Prefix == 0 {
		ip.IPv6Prefix = 64
	}
	if ip.IPv6Prefix < 1 || ip.IPv6Prefix > 128 {
		bad(ip.line.at("ipv6_prefix"), "client_ip.ipv6_prefix", fmt.Sprint(ip.IPv6Prefix), "must be between 1 and 128")
	}
	switch strings.ToLower(ip.Header) {
	case "", "x-forwarded-for", "forwarded":
	default:
		bad(ip.line.at("header"), "client_ip.header", ip.Header, "is not x-forwarded-for or forwarded")
	}
	if _, err := clientip.New(ip.Resolver()); err != nil {
		var ce *clientip.ConfigError
		if errors.As(err, &ce) && strings.HasPrefix(ce.Field, "TrustedProxies") {
			bad(ip.line.at("trusted_proxies"), "client_ip.trusted_proxies"+strings.TrimPrefix(ce.Field, "TrustedProxies"), ce.Value, "is not a CIDR such as 10.0.0.0/8 or an IP address")
		} else if ip.IPv6Prefix >= 1 && ip.IPv6Prefix <= 128 {
			bad(ip.line.at(""), "client_ip", "", err.Error())
		}
	}

	fa := &c.ForwardAuth
	if fa.DenyStatus == 0 {
		fa.DenyStatus = 429
	}
	if fa.DenyStatus < 400 || fa.DenyStatus > 599 {
		bad(fa.line.at("deny_status"), "forward_auth.deny_status", fmt.Sprint(fa.DenyStatus), "must be a 4xx or 5xx status such as 429, 401 or 403")
	}
	if fa.RuleHeader == "" {
		fa.RuleHeader = DefaultRuleHeader
	}

	switch c.Headers {
	case "":
		c.Headers = "both"
	case "both", "ietf", "legacy", "none":
	default:
		bad(0, "headers", c.Headers, "is not both, ietf, legacy or none")
	}
	switch c.Log.Format {
	case "":
		c.Log.Format = "text"
	case "text", "json":
	default:
		bad(c.Log.line.at("format"), "log.format", c.Log.Format, "is not text or json")
	}
	switch c.Log.Level {
	case "":
		c.Log.Level = "info"
	case "debug", "info", "warn", "error":
	default:
		bad(c.Log.line.at("level"), "log.level", c.Log.Level, "is not debug, info, warn or error")
	}
	return errors.Join(errs...)
}

// yamlField maps a floodgate.Limit field to the YAML key the user wrote.
func yamlField(alg floodgate.Algorithm, limitField string, r *Rule) (string, string) {
	bucket := alg == floodgate.TokenBucket
	switch {
	case limitField == "Quota" && bucket:
		return "capacity", fmt.Sprint(r.Capacity)
	case limitField == "Quota":
		return "limit", fmt.Sprint(r.Limit)
	case limitField == "Window" && bucket, limitField == "Refill":
		return "refill", r.Refill
	default:
		return "window", r.Window.String()
	}
}

func splitHostPort(a string) (string, string, error) {
	ap, err := netip.ParseAddrPort(a)
	if err == nil {
		return ap.Addr().String(), fmt.Sprint(ap.Port()), nil
	}
	host, port, ok := strings.Cut(a, ":")
	if !ok || host == "" || port == "" || strings.Contains(port, ":") {
		return "", "", fmt.Errorf("want host:port")
	}
	return host, port, nil
}

// PasswordValue returns the Redis password from Password or PasswordEnv.
func (s Store) PasswordValue() string {
	if s.PasswordEnv != "" {
		return os.Getenv(s.PasswordEnv)
	}
	return s.Password
}

// String describes the store without secrets.
func (s Store) String() string {
	if s.Type == StoreMemory {
		return "memory (embedded, this process only)"
	}
	return fmt.Sprintf("%s %s", s.Type, strings.Join(s.Addrs, ","))
}

// hasField reports whether the struct v points to has a field with YAML key
// name.
func hasField(v any, name string) bool {
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == name && tag != "-" {
			return true
		}
	}
	return false
}

// Policy returns the server policy the config describes.
func (c *Config) Policy() (server.Policy, error) {
	ex, err := clientip.New(c.ClientIP.Resolver())
	if err != nil {
		return server.Policy{}, fmt.Errorf("client_ip: %w", err)
	}
	p := server.Policy{ClientIP: ex, Headers: c.HeaderMode(), DenyStatus: c.ForwardAuth.DenyStatus, RuleHeader: c.ForwardAuth.RuleHeader}
	for _, r := range c.Rules {
		mode := decide.FailClosed
		if r.FailOpen() {
			mode = decide.FailOpen
		}
		p.Rules = append(p.Rules, server.Rule{Name: r.Name, Limit: r.RateLimit(), Failure: mode, Shadow: r.Shadow})
	}
	return p, nil
}

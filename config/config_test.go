package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if len(c.Rules) != 2 || c.Store.Type != StoreMemory || c.Listen != DefaultListen {
		t.Fatalf("Default() = %+v", c)
	}
	p, err := c.Policy()
	if err != nil {
		t.Fatal(err)
	}
	want := []server.Rule{
		{Name: "login", Limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 5, time.Minute), Failure: decide.FailClosed},
		{Name: "api", Limit: floodgate.NewTokenBucket(100, 10, time.Second), Failure: decide.FailOpen},
	}
	if !reflect.DeepEqual(p.Rules, want) {
		t.Fatalf("rules = %+v, want %+v", p.Rules, want)
	}
	if rc, err := c.RedisConfig(); rc != nil || err != nil {
		t.Fatalf("RedisConfig() of the memory store = %+v, %v", rc, err)
	}
}

// TestLiteralConfig: a Config written in Go gives the same policy as the
// same config read from YAML (a literal once failed with "Algorithm 0 is
// not a known algorithm").
func TestLiteralConfig(t *testing.T) {
	literal := &Config{
		Rules: []Rule{
			{Name: "login", Algorithm: "sliding_window_log", Limit: 5, Window: time.Minute, FailureMode: decide.FailClosed},
			{Name: "api", Algorithm: "token_bucket", Capacity: 100, Refill: "10/s"},
		},
		ClientIP:    ClientIP{TrustedProxies: []string{"10.0.0.0/8"}},
		ForwardAuth: ForwardAuth{DenyStatus: 403},
		Headers:     "ietf",
	}
	got, err := literal.Policy()
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := Parse([]byte(Example+"client_ip:\n  trusted_proxies: [10.0.0.0/8]\nforward_auth:\n  deny_status: 403\nheaders: ietf\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := parsed.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("literal policy %+v\nparsed policy %+v", got, want)
	}
	// A literal's errors name the field, without a line.
	literal.Rules[0].Window = 0
	if _, err := literal.Policy(); err == nil || !strings.Contains(err.Error(), "rules[0].window: 0s must be at least 1ms") {
		t.Fatalf("literal with no window: %v", err)
	}
}

func TestRedisConfig(t *testing.T) {
	t.Setenv("FLOODGATE_TEST_PW", "p")
	c, err := Parse([]byte("store:\n  type: redis-sentinel\n  addrs: [\"s:26379\"]\n  master_name: m\n  username: u\n  password_env: FLOODGATE_TEST_PW\n  sentinel_username: su\n  sentinel_password: sp\n"+
		"  tls: true\n  db: 2\n  timeout: 1s\n  key_prefix: \"app:\"\n  flush_delay: -1ns\n  require_at_start: true\n  max_in_flight: 100\n  breaker_failures: -1\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.RedisConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Mode != redisstore.ModeSentinel || rc.SentinelMaster != "m" || rc.Username != "u" || rc.Password != "p" || rc.TLS == nil ||
		rc.DB != 2 || rc.Timeout != time.Second || rc.KeyPrefix != "app:" || rc.FlushDelay != -1 || len(rc.Addrs) != 1 ||
		rc.LazyConnect || rc.MaxInFlight != 100 || rc.BreakerFailures != -1 || rc.SentinelUsername != "su" || rc.SentinelPassword != "sp" {
		t.Fatalf("RedisConfig() = %+v", rc)
	}
	// A unix socket, hostname verification off, and a per-second store.
	c, err = Parse([]byte("store:\n  type: redis\n  addrs: [unix:///run/redis.sock]\n  per_second:\n    type: redis\n    addrs: [\"10.0.0.8:6379\"]\n"+
		"    tls: true\n    tls_skip_hostname_verification: true\n    timeout: 2s\n    password: ps\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rc, err := c.RedisConfig(); err != nil || rc.Addrs[0] != "unix:///run/redis.sock" || rc.TLS != nil || rc.TLSSkipHostnameVerification {
		t.Fatalf("RedisConfig() = %+v, %v", rc, err)
	}
	ps, err := c.Store.PerSecondRedisConfig()
	if err != nil || ps == nil || ps.Addrs[0] != "10.0.0.8:6379" || ps.TLS == nil || !ps.TLSSkipHostnameVerification || ps.Timeout != 2*time.Second || ps.Password != "ps" || ps.Mode != redisstore.ModeStandalone || !ps.LazyConnect {
		t.Fatalf("PerSecondRedisConfig() = %+v, %v", ps, err)
	}
	if got := c.Store.String(); !strings.Contains(got, "per-second limits: redis 10.0.0.8:6379") {
		t.Fatalf("String() = %q", got)
	}
	// The library's defaults apply to what the file leaves out.
	c, err = Parse([]byte("store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rc, _ := c.RedisConfig(); rc.Timeout != 0 || rc.KeyPrefix != "" || rc.Mode != redisstore.ModeStandalone || !rc.LazyConnect || rc.MaxInFlight != 0 || rc.BreakerFailures != 0 {
		t.Fatalf("RedisConfig() = %+v, want zero (default) timeout and prefix, and a store that starts without Redis", rc)
	}
}

// The issue's example file, verbatim apart from the password comment.
const issueExample = `listen: 127.0.0.1:8080        # HTTP API, metrics, health
store:
  type: redis                 # memory | redis | redis-cluster | redis-sentinel
  addrs: [127.0.0.1:6379]
  username: ""                # ACL, optional
  password: ""
  tls: false
  timeout: 50ms
  key_prefix: "fg:"
rules:
  - name: login
    algorithm: sliding_window_log   # sliding_window_log | token_bucket | sliding_window_counter | fixed_window
    limit: 5
    window: 1m
    failure_mode: closed            # open | closed
  - name: api
    algorithm: token_bucket
    capacity: 100
    refill: 10/s                    # N/s, N/m, N/h, or N per duration: 1/500ms
    failure_mode: open
client_ip:                    # how forward-auth finds the client (same rules as the middleware)
  trusted_proxies: [10.0.0.0/8]   # forwarding headers are trusted only from these peers
  ipv6_prefix: 64
`

func TestParseIssueExample(t *testing.T) {
	c, err := Parse([]byte(issueExample), "example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Timeout != 50*time.Millisecond || c.Store.KeyPrefix != "fg:" || len(c.Rules) != 2 {
		t.Fatalf("parsed %+v", c)
	}
	if got := c.ClientIP.TrustedProxies; len(got) != 1 || got[0] != "10.0.0.0/8" {
		t.Fatalf("trusted proxies %v", got)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string // substrings of the error: line, field, value
	}{
		{"unknown top-level key", "listen: x\nlistn: y\n", []string{"line 2", `unknown key "listn"`}},
		{"unknown store key", "store:\n  type: memory\n  timout: 5ms\n", []string{"line 3", `unknown key "timout"`, `did you mean "timeout"?`}},
		{"unknown rule key", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n    burst: 3\n", []string{"line 6", `unknown key "burst"`}},
		{"bad algorithm", "rules:\n  - name: a\n    algorithm: leaky_bucket\n", []string{"line 3", "rules[0].algorithm", "leaky_bucket"}},
		{"zero limit", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 0\n    window: 1s\n", []string{"line 4", "rules[0].limit", "0", "at least 1"}},
		{"short window", "rules:\n  - name: a\n    algorithm: sliding_window_log\n    limit: 3\n    window: 500us\n", []string{"line 5", "rules[0].window", "500µs", "1ms"}},
		{"bad duration", "rules:\n  - name: a\n    algorithm: sliding_window_log\n    limit: 3\n    window: soon\n", []string{"line 5", "soon"}},
		{"bad refill", "rules:\n  - name: a\n    algorithm: token_bucket\n    capacity: 3\n    refill: fast\n", []string{"line 5", "rules[0].refill", "fast"}},
		{"bucket with window", "rules:\n  - name: a\n    algorithm: token_bucket\n    capacity: 3\n    window: 1s\n", []string{"line 5", "rules[0].window", "token_bucket"}},
		{"negative capacity", "rules:\n  - name: a\n    algorithm: token_bucket\n    capacity: -3\n    refill: 1/s\n", []string{"line 4", "rules[0].capacity", "-3"}},
		{"duplicate name", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n  - name: a\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n", []string{"line 6", "rules[1].name", "already"}},
		{"bad name", "rules:\n  - name: a/b\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n", []string{"line 2", "rules[0].name", "a/b"}},
		{"bad failure mode", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n    failure_mode: maybe\n", []string{"line 6", "failure_mode", "maybe"}},
		{"bad store type", "store:\n  type: memcached\n", []string{"line 2", "store.type", "memcached"}},
		{"redis without addrs", "store:\n  type: redis\n", []string{"store.addrs", "at least one"}},
		{"bad addr", "store:\n  type: redis\n  addrs: [localhost]\n", []string{"line 3", "store.addrs[0]", "localhost"}},
		{"sentinel without master", "store:\n  type: redis-sentinel\n  addrs: [127.0.0.1:26379]\n", []string{"store.master_name"}},
		{"brace in prefix", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  key_prefix: \"a{b\"\n", []string{"line 4", "store.key_prefix", "a{b"}},
		{"two standalone addrs", "store:\n  type: redis\n  addrs: [127.0.0.1:6379, 127.0.0.1:6380]\n", []string{"line 3", "store.addrs", "exactly one"}},
		{"db on a cluster", "store:\n  type: redis-cluster\n  addrs: [127.0.0.1:7000]\n  db: 1\n", []string{"line 4", "store.db", "cluster"}},
		{"timeout too long", "store:\n  timeout: 2h\n", []string{"line 2", "store.timeout", "2h0m0s"}},
		{"flush delay too long", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  flush_delay: 5ms\n", []string{"line 4", "store.flush_delay", "5ms"}},
		{"too many in flight", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  max_in_flight: 1000\n", []string{"line 4", "store.max_in_flight", "1000", "at most 768"}},
		{"unset password env", "store:\n  password_env: FLOODGATE_TEST_SURELY_UNSET\n", []string{"line 2", "FLOODGATE_TEST_SURELY_UNSET"}},
		{"sentinel password without sentinels", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  sentinel_password: x\n", []string{"line 4", "store.sentinel_password", "redis-sentinel"}},
		{"sentinel password twice", "store:\n  type: redis-sentinel\n  addrs: [s:26379]\n  master_name: m\n  sentinel_password: x\n  sentinel_password_env: FLOODGATE_TEST_PW\n", []string{"line 6", "store.sentinel_password_env", "together"}},
		{"unset sentinel password env", "store:\n  type: redis-sentinel\n  addrs: [s:26379]\n  master_name: m\n  sentinel_password_env: FLOODGATE_TEST_SURELY_UNSET\n", []string{"line 5", "FLOODGATE_TEST_SURELY_UNSET", "export it"}},
		{"bad proxy", "client_ip:\n  trusted_proxies: [10.0.0.0/8, banana]\n", []string{"line 2", "client_ip.trusted_proxies[1]", "banana"}},
		{"bad prefix", "client_ip:\n  ipv6_prefix: 200\n", []string{"line 2", "client_ip.ipv6_prefix", "200"}},
		{"bad deny status", "forward_auth:\n  deny_status: 200\n", []string{"line 2", "forward_auth.deny_status", "200"}},
		{"bad log format", "log:\n  format: xml\n", []string{"line 2", "log.format", "xml"}},
		{"bad headers", "listen: x\nheaders: all\n", []string{"line 2", "headers", "all"}},
		{"bad forwarding header", "client_ip:\n  header: via\n", []string{"line 2", "client_ip.header", "via"}},
		{"bad duration type", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: ten\n    window: 1s\n", []string{"line 4", "rules[0].limit", "ten", "whole number"}},
		{"not a mapping", "rules:\n  - just-a-string\n", []string{"line 2"}},
		{"empty", "", []string{"empty"}},
		{"two errors reported", "rules:\n  - name: a\n    algorithm: nope\n  - name: b\n    algorithm: nope2\n", []string{"nope", "nope2"}},
		{"fractional limit", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 3.5\n    window: 1m\n", []string{"line 4", "rules[0].limit", `"3.5" is not a whole number`}},
		{"bare number window", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 3\n    window: 60\n", []string{"line 5", "rules[0].window", "a duration such as 60s or 1m"}},
		{"days window", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 3\n    window: 1d\n", []string{"line 5", "rules[0].window", "write 24h"}},
		{"word limit", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: five\n    window: 1m\n", []string{"line 4", `"five" is not a whole number`}},
		{"listen without port", "listen: not-an-address\n", []string{"line 1", "listen", "not-an-address", "host:port"}},
		{"listen port too high", "listen: 127.0.0.1:99999\n", []string{"line 1", "listen", "99999", "65535"}},
		{"listen bad host", "listen: \"exa mple:80\"\n", []string{"line 1", "listen", "host"}},
		{"grpc_listen bad port", "grpc_listen: \"127.0.0.1:http-ish\"\n", []string{"line 1", "grpc_listen", "port"}},
		{"bad log level", "log:\n  level: loud\n", []string{"line 2", "log.level", "loud"}},
		{"relative unix socket", "store:\n  type: redis\n  addrs: [\"unix://redis.sock\"]\n", []string{"line 3", "store.addrs[0]", "unix:///absolute/path"}},
		{"unix socket on a cluster", "store:\n  type: redis-cluster\n  addrs: [/run/redis.sock]\n", []string{"line 3", "store.addrs[0]", "unix socket", "cluster mode needs host:port"}},
		{"unix socket for sentinels", "store:\n  type: redis-sentinel\n  master_name: m\n  addrs: [unix:///run/s.sock]\n", []string{"line 4", "store.addrs[0]", "sentinel mode needs host:port"}},
		{"skip hostname without tls", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  tls_skip_hostname_verification: true\n", []string{"line 4", "store.tls_skip_hostname_verification", "store.tls: true"}},
		{"per-second store beside memory", "store:\n  type: memory\n  per_second:\n    type: redis\n    addrs: [127.0.0.1:6380]\n", []string{"line 3", "store.per_second", "store.type is memory"}},
		{"per-second store without type", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  per_second:\n    addrs: [127.0.0.1:6380]\n", []string{"store.per_second.type", "is required"}},
		{"per-second memory store", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  per_second:\n    type: memory\n", []string{"line 5", "store.per_second.type", "memory", "is a Redis"}},
		{"per-second bad addr", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  per_second:\n    type: redis\n    addrs: [localhost]\n", []string{"line 6", "store.per_second.addrs[0]", "localhost"}},
		{"per-second bad timeout", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  per_second:\n    type: redis\n    addrs: [127.0.0.1:6380]\n    timeout: 2h\n", []string{"line 7", "store.per_second.timeout", "2h0m0s"}},
		{"per-second unknown key", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  per_second:\n    type: redis\n    adrs: [127.0.0.1:6380]\n", []string{"line 6", "store.per_second.adrs", `did you mean "addrs"?`}},
		{"per-second over-limit cache", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  per_second:\n    type: redis\n    addrs: [127.0.0.1:6380]\n    over_limit_cache:\n      disabled: true\n", []string{"line 7", "store.per_second.over_limit_cache", "store.over_limit_cache instead"}},
		{"lease on a sliding log", "rules:\n  - name: a\n    algorithm: sliding_window_log\n    limit: 3\n    window: 1m\n    lease: {}\n", []string{"line 6", "rules[0].lease", "sliding_window_log cannot be leased", "set algorithm: token_bucket or fixed_window"}},
		{"lease ttl below refresh", "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 3\n    window: 1m\n    lease:\n      refresh: 1s\n      ttl: 10ms\n", []string{"line 8", "rules[0].lease.ttl", "10ms", "at least the refresh (1s)", "leave ttl out"}},
		{"lease share above 1", "rules:\n  - name: a\n    algorithm: token_bucket\n    capacity: 3\n    refill: 1/s\n    lease:\n      max_share: 1.5\n", []string{"line 7", "rules[0].lease.max_share", "1.5", "at most 1"}},
		{"lease negative idle", "rules:\n  - name: a\n    algorithm: token_bucket\n    capacity: 3\n    refill: 1/s\n    lease:\n      idle: -1s\n", []string{"line 7", "rules[0].lease.idle", "-1s"}},
		{"lease unknown key", "rules:\n  - name: a\n    algorithm: token_bucket\n    capacity: 3\n    refill: 1/s\n    lease:\n      refesh: 1s\n", []string{"line 7", `unknown key "refesh"`, `did you mean "refresh"?`}},
		{"per-second tls key without tls", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  per_second:\n    type: redis\n    addrs: [127.0.0.1:6380]\n    tls_server_name: x\n", []string{"line 7", "store.per_second.tls_server_name", "store.per_second.tls: true"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml), "f.yaml")
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", c.yaml)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "f.yaml: ") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestFieldErrorIsStructured(t *testing.T) {
	_, err := Parse([]byte("store:\n  type: nope\n"), "f.yaml")
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Line != 2 || fe.Path != "store.type" || fe.Value != "nope" {
		t.Fatalf("error %v is not FieldError{Line: 2, Field: store.type, Value: nope}", err)
	}
}

func TestPasswordFromEnv(t *testing.T) {
	t.Setenv("FLOODGATE_TEST_PW", "s3cret")
	c, err := Parse([]byte("store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  password_env: FLOODGATE_TEST_PW\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.PasswordValue() != "s3cret" {
		t.Fatalf("password %q", c.Store.PasswordValue())
	}
	if strings.Contains(c.Store.String(), "s3cret") {
		t.Fatal("Store.String leaks the password")
	}
}

// TestEveryErrorTogether: a type error does not hide the file's other
// errors, and a field that did not decode is reported once, by its type
// error, not again as the zero value it was left at.
func TestEveryErrorTogether(t *testing.T) {
	src := `listen: 127.0.0.1:99999
rules:
  - name: a
    algorithm: fixed_window
    limit: five
    window: 60
  - name: b
    algorithm: fixed_window
    limit: 3.5
    window: 1d
  - name: c
    algorithm: nope
store:
  type: memcached
`
	_, err := Parse([]byte(src), "f.yaml")
	if err == nil {
		t.Fatal("Parse accepted a file full of errors")
	}
	msg := err.Error()
	for _, want := range []string{
		"line 1: listen", "line 5: rules[0].limit", "line 6: rules[0].window", "line 9: rules[1].limit",
		"line 10: rules[1].window", "line 12: rules[2].algorithm", "line 14: store.type",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "rules[0].limit"); n != 1 {
		t.Errorf("rules[0].limit reported %d times:\n%s", n, msg)
	}
	if strings.Contains(msg, "must be at least") {
		t.Errorf("a field that did not decode is reported again as its zero value:\n%s", msg)
	}
	// In line order.
	if i, j := strings.Index(msg, "line 1:"), strings.Index(msg, "line 14:"); i > j {
		t.Errorf("errors out of line order:\n%s", msg)
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:8080", true}, {":8080", true}, {"[::1]:0", true}, {"localhost:http", true}, {"LocalHost:80", true},
		{"0.0.0.0:65535", true}, {"[fe80::1%eth0]:80", true}, {"[::]:80", true},
		{"not-an-address", false}, {"127.0.0.1:99999", false}, {"127.0.0.1:", false}, {"127.0.0.1:-1", false},
		{"::1:80", false}, {"exa mple:80", false}, {"", false}, {"host:no-such-service-name", false},
		// Hosts serve would have to look up, or cannot read: refused
		// without a lookup, naming the address to write instead.
		{"my-host.example:443", false}, {"0:18520", false}, {"127.1:18520", false}, {"10.1.2:80", false},
		{"256.1.1.1:80", false},
	} {
		if err := CheckListen(c.addr); (err == nil) != c.ok {
			t.Errorf("CheckListen(%q) = %v, want ok %v", c.addr, err, c.ok)
		}
	}
	for addr, want := range map[string]string{
		"0:18520":             "write 0.0.0.0:18520",
		"127.1:18520":         "write 127.0.0.1:18520",
		"10.1.2:80":           "write 10.1.0.2:80",
		"my-host.example:443": "never looked up in DNS",
	} {
		if err := CheckListen(addr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckListen(%q) = %v, want one saying %q", addr, err, want)
		}
	}
}

func TestWarnings(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want []string
	}{
		{"client_ip:\n  trusted_proxies: [10.0.0.0/8]\n", nil},
		{"client_ip:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - 0.0.0.0/0\n", []string{"f.yaml: line 4: client_ip.trusted_proxies[1]: 0.0.0.0/0 trusts every address"}},
		{"client_ip:\n  trusted_proxies: [\"::/0\"]\n", []string{"client_ip.trusted_proxies[0]: ::/0 trusts every address"}},
		{Example, nil},
	} {
		cfg, err := Parse([]byte(c.yaml), "f.yaml")
		if err != nil {
			t.Fatal(err)
		}
		got := cfg.Warnings()
		if len(got) != len(c.want) {
			t.Errorf("%q: warnings %q, want %q", c.yaml, got, c.want)
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], c.want[i]) {
				t.Errorf("%q: warning %q lacks %q", c.yaml, got[i], c.want[i])
			}
		}
	}
}

// FuzzParse: any file is either a config that validates (its policy
// builds) or an error naming the file, never a panic.
func FuzzParse(f *testing.F) {
	f.Add(Example)
	f.Add("listen: 127.0.0.1:99999\nrules:\n  - name: a\n    algorithm: fixed_window\n    limit: 3.5\n    window: 1d\n")
	f.Add("store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  timeout: 5ms\n  tls: true\n")
	f.Add("rules:\n  - &r {name: a, algorithm: token_bucket, capacity: 3, refill: 1/s}\n  - *r\n")
	f.Add("client_ip:\n  trusted_proxies: [0.0.0.0/0]\n  ipv6_prefix: 48\nheaders: ietf\nlog: {level: debug, format: json}\n")
	f.Add("{}")
	f.Add("[1, 2]")
	f.Fuzz(func(t *testing.T, src string) {
		cfg, err := Parse([]byte(src), "f.yaml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if _, err := cfg.Policy(); err != nil {
			t.Fatalf("a config that validated has no policy: %v\n%s", err, src)
		}
		if _, err := cfg.RedisConfig(); err != nil {
			t.Fatalf("a config that validated has no store config: %v\n%s", err, src)
		}
		if err := CheckListen(cfg.Listen); err != nil {
			t.Fatalf("a config that validated listens on %q: %v", cfg.Listen, err)
		}
		_ = cfg.Warnings()
	})
}

// TestStoreAddrs: a Redis address is checked by redisstore.Config.Validate
// only; Parse names its YAML path and line, the address and the fix, for
// the store and the per-second store alike, and accepts a unix socket
// where redisstore does.
func TestStoreAddrs(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // nil: valid
	}{
		{"host:port", "store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\n", nil},
		{"unix socket", "store:\n  type: redis\n  addrs: [\"unix:///run/redis.sock\"]\n", nil},
		{"unix socket path", "store:\n  type: redis\n  addrs: [/run/redis.sock]\n", nil},
		{"port 99999", "store:\n  type: redis\n  addrs: [\"127.0.0.1:99999\"]\n",
			[]string{`f.yaml: line 3: store.addrs[0]: "127.0.0.1:99999" has port 99999, not one from 1 to 65535`, "such as redis:6379"}},
		{"port 0", "store:\n  type: redis\n  addrs: [\"127.0.0.1:0\"]\n", []string{"line 3: store.addrs[0]", `"127.0.0.1:0" has port 0`}},
		{"no port", "store:\n  type: redis\n  addrs: [redishost]\n", []string{"line 3: store.addrs[0]", `"redishost" is not host:port`, "such as redis:6379"}},
		{"a cluster's second node, on its own line", "store:\n  type: redis-cluster\n  addrs:\n    - a:7000\n    - b:99999\n",
			[]string{"line 5: store.addrs[1]", `"b:99999" has port 99999`}},
		{"a unix socket on a cluster", "store:\n  type: redis-cluster\n  addrs: [/run/redis.sock]\n", []string{"line 3: store.addrs[0]", "cluster mode needs host:port"}},
		{"the per-second store's port 0", "store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\n  per_second:\n    type: redis\n    addrs: [\"127.0.0.1:0\"]\n",
			[]string{"line 6: store.per_second.addrs[0]", `"127.0.0.1:0" has port 0`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "f.yaml")
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Parse = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestOverLimitCacheCheckedByDecide: the over-limit cache's bounds are
// checked by decide.CacheOptions.Validate only: Parse reports its reason,
// under the YAML key, with its line, the value and a fix in YAML's terms;
// both bounds at once.
func TestOverLimitCacheCheckedByDecide(t *testing.T) {
	_, err := Parse([]byte("store:\n  over_limit_cache:\n    max_entries: -1\n    max_bytes: -5\n"), "f.yaml")
	want := map[string]struct {
		line  int
		value string
		opts  decide.CacheOptions
	}{
		"store.over_limit_cache.max_entries": {3, "-1", decide.CacheOptions{MaxEntries: -1}},
		"store.over_limit_cache.max_bytes":   {4, "-5", decide.CacheOptions{MaxBytes: -5}},
	}
	for _, leaf := range leaves(errors.Unwrap(err)) { // under "f.yaml: "
		var fe *FieldError
		if !errors.As(leaf, &fe) {
			continue
		}
		w, ok := want[fe.Path]
		if !ok {
			continue
		}
		delete(want, fe.Path)
		var de *fielderr.Error
		if !errors.As(w.opts.Validate(), &de) {
			t.Fatalf("decide accepts %+v", w.opts)
		}
		if fe.Line != w.line || fe.Value != w.value || fe.Reason != de.Reason || !strings.Contains(fe.Fix, "disabled: true") || !strings.Contains(fe.Fix, "65536") {
			t.Errorf("%s: %+v; want line %d, value %s, decide's reason %q and a fix", fe.Path, fe, w.line, w.value, de.Reason)
		}
	}
	for path := range want {
		t.Errorf("Parse = %v, reports nothing about %s", err, path)
	}
}

// TestLeaseKeys: `lease: {}` turns a rule's lease on with the defaults, its
// keys tune it, and a rule without the key has none.
func TestLeaseKeys(t *testing.T) {
	c, err := Parse([]byte(`rules:
  - name: defaults
    algorithm: token_bucket
    capacity: 100
    refill: 10/s
    lease: {}
  - name: tuned
    algorithm: fixed_window
    limit: 1000
    window: 1m
    lease: {refresh: 50ms, ttl: 2s, idle: 1s, max_share: 0.25}
  - name: none
    algorithm: token_bucket
    capacity: 100
    refill: 10/s
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy()
	if err != nil {
		t.Fatal(err)
	}
	want := []*decide.LeaseOptions{{}, {Refresh: 50 * time.Millisecond, TTL: 2 * time.Second, Idle: time.Second, MaxShare: 0.25}, nil}
	for i, w := range want {
		got := p.Rules[i].Lease
		if (got == nil) != (w == nil) || got != nil && *got != *w {
			t.Errorf("rule %s: lease %+v, want %+v", p.Rules[i].Name, got, w)
		}
		if chk := p.Rules[i].Check("k", 1); chk.Lease != got {
			t.Errorf("rule %s: the check's lease %p is not the rule's %p", p.Rules[i].Name, chk.Lease, got)
		}
	}
}

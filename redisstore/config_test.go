package redisstore

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestConfigValidate(t *testing.T) {
	one := []string{"127.0.0.1:6379"}
	cases := []struct {
		name  string
		cfg   Config
		field string // "" when valid
	}{
		{"minimal", Config{Addrs: one}, ""},
		{"everything", Config{Addrs: one, Mode: ModeStandalone, Username: "u", Password: "p", TLS: &tls.Config{}, DB: 3, KeyPrefix: "app:", Timeout: time.Second}, ""},
		{"sentinel inferred", Config{Addrs: []string{"a:26379", "b:26379"}, SentinelMaster: "m"}, ""},
		{"cluster", Config{Addrs: []string{"a:1", "b:2"}, Mode: ModeCluster}, ""},
		{"no addrs", Config{}, "Addrs"},
		{"addr without port", Config{Addrs: []string{"127.0.0.1:6379", "localhost"}}, "Addrs[1]"},
		{"empty addr", Config{Addrs: []string{""}}, "Addrs[0]"},
		{"unknown mode", Config{Addrs: one, Mode: 9}, "Mode"},
		{"sentinel without master", Config{Addrs: one, Mode: ModeSentinel}, "SentinelMaster"},
		{"master outside sentinel mode", Config{Addrs: one, Mode: ModeCluster, SentinelMaster: "m"}, "SentinelMaster"},
		{"standalone with two addrs", Config{Addrs: []string{"a:1", "b:2"}, Mode: ModeStandalone}, "Addrs"},
		{"negative db", Config{Addrs: one, DB: -1}, "DB"},
		{"db in cluster", Config{Addrs: one, Mode: ModeCluster, DB: 1}, "DB"},
		{"open brace in prefix", Config{Addrs: one, KeyPrefix: "a{"}, "KeyPrefix"},
		{"close brace in prefix", Config{Addrs: one, KeyPrefix: "}"}, "KeyPrefix"},
		{"negative timeout", Config{Addrs: one, Timeout: -time.Millisecond}, "Timeout"},
		{"flush delay off", Config{Addrs: one, FlushDelay: -1}, ""},
		{"flush delay 1ms", Config{Addrs: one, FlushDelay: time.Millisecond}, ""},
		{"unix socket URL", Config{Addrs: []string{"unix:///run/redis.sock"}, Mode: ModeStandalone}, ""},
		{"unix socket path, auto", Config{Addrs: []string{"/run/redis.sock"}}, ""},
		{"unix socket, relative", Config{Addrs: []string{"unix://run/redis.sock"}}, "Addrs[0]"},
		{"unix socket in cluster mode", Config{Addrs: []string{"/run/redis.sock"}, Mode: ModeCluster}, "Addrs[0]"},
		{"unix socket in sentinel mode", Config{Addrs: []string{"unix:///run/s.sock"}, SentinelMaster: "m"}, "Addrs[0]"},
		{"unix socket beside another address", Config{Addrs: []string{"a:1", "/run/redis.sock"}}, "Addrs[1]"},
		{"skip hostname with TLS", Config{Addrs: one, TLS: &tls.Config{}, TLSSkipHostnameVerification: true}, ""},
		{"skip hostname without TLS", Config{Addrs: one, TLSSkipHostnameVerification: true}, "TLSSkipHostnameVerification"},
		{"flush delay too long", Config{Addrs: one, FlushDelay: time.Millisecond + 1}, "FlushDelay"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Validate() = %v, want a *ConfigError for %s", err, c.field)
			}
			if _, err := New(c.cfg); !errors.As(err, &ce) {
				t.Fatalf("New = %v, want the same *ConfigError", err)
			}
		})
	}
}

// TestConfigValidateAddrs: Validate is the one check of a Redis address
// (config and the Envoy environment report its error): a port from 1 to
// 65535, or a unix socket; the error names Addrs[i], the address and the fix.
func TestConfigValidateAddrs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string   // "" when valid
		want  []string // in the error
	}{
		{"port 6379", Config{Addrs: []string{"127.0.0.1:6379"}}, "", nil},
		{"port 65535", Config{Addrs: []string{"redis:65535"}}, "", nil},
		{"IPv6", Config{Addrs: []string{"[::1]:6379"}}, "", nil},
		{"no host", Config{Addrs: []string{":6379"}}, "", nil},
		{"unix socket URL", Config{Addrs: []string{"unix:///run/redis.sock"}}, "", nil},
		{"unix socket path", Config{Addrs: []string{"/run/redis.sock"}, Mode: ModeStandalone}, "", nil},
		{"port 99999", Config{Addrs: []string{"127.0.0.1:99999"}}, "Addrs[0]", []string{`"127.0.0.1:99999"`, "has port 99999, not one from 1 to 65535", "such as redis:6379"}},
		{"port 65536", Config{Addrs: []string{"redis:65536"}}, "Addrs[0]", []string{`"redis:65536"`, "has port 65536"}},
		{"port 0", Config{Addrs: []string{"127.0.0.1:0"}}, "Addrs[0]", []string{`"127.0.0.1:0"`, "has port 0, not one from 1 to 65535"}},
		{"no port", Config{Addrs: []string{"redishost"}}, "Addrs[0]", []string{`"redishost"`, "is not host:port", "such as redis:6379"}},
		{"empty port", Config{Addrs: []string{"redishost:"}}, "Addrs[0]", []string{`"redishost:"`, "is not host:port"}},
		{"named port", Config{Addrs: []string{"redishost:redis"}}, "Addrs[0]", []string{`"redishost:redis"`, `has port "redis", which is not a number`}},
		{"signed port", Config{Addrs: []string{"redishost:+6379"}}, "Addrs[0]", []string{`has port "+6379", which is not a number`}},
		{"a cluster's second node", Config{Addrs: []string{"a:7000", "b:99999"}, Mode: ModeCluster}, "Addrs[1]", []string{`"b:99999"`, "has port 99999"}},
		{"a sentinel", Config{Addrs: []string{"s1:26379", "s2:0"}, SentinelMaster: "m"}, "Addrs[1]", []string{`"s2:0"`, "has port 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("Validate() = %v, want a *ConfigError for %s", err, tc.field)
			}
			for _, w := range append([]string{tc.field}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{ModeAuto: "auto", ModeStandalone: "standalone", ModeSentinel: "sentinel", ModeCluster: "cluster", 7: "Mode(7)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", m, got, want)
		}
	}
}

func TestNewFromClientRejectsConnectionFields(t *testing.T) {
	if _, err := NewFromClient(nil, Config{}); err == nil {
		t.Fatal("NewFromClient(nil) succeeded")
	}
	client := newClient(t, redistest.StandaloneAddr(t))
	for _, c := range []struct {
		field string
		cfg   Config
	}{
		{"Addrs", Config{Addrs: []string{"a:1"}}},
		{"Mode", Config{Mode: ModeCluster}},
		{"SentinelMaster", Config{SentinelMaster: "m"}},
		{"Password", Config{Password: "p"}},
		{"TLS", Config{TLS: &tls.Config{}}},
		{"DB", Config{DB: 2}},
		{"KeyPrefix", Config{KeyPrefix: "{x}"}},
		{"Timeout", Config{Timeout: -1}},
		{"FlushDelay", Config{FlushDelay: time.Microsecond}},
	} {
		var ce *ConfigError
		if _, err := NewFromClient(client, c.cfg); !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("NewFromClient with %s set = %v, want a *ConfigError for it", c.field, err)
		}
	}
	s, err := NewFromClient(client, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.timeout != DefaultTimeout || s.prefix != DefaultKeyPrefix {
		t.Errorf("defaults: timeout %s, prefix %q", s.timeout, s.prefix)
	}
	s.Close() // does not close the caller's client
	if _, err := s.Allow(t.Context(), "after-close-"+uniquePrefix(t), floodgate.PerSecond(1)); err != nil {
		t.Errorf("Allow after closing a store that does not own its client: %v", err)
	}
}

// TestNewModes: New connects in each mode, and refuses cluster mode on a
// server that is not a cluster node.
func TestNewModes(t *testing.T) {
	standalone := redistest.StandaloneAddr(t)
	cluster := redistest.ClusterAddrs(t)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Addrs: []string{standalone}}, "standalone"},
		{Config{Addrs: []string{standalone}, Mode: ModeStandalone}, "standalone"},
		{Config{Addrs: cluster[:1]}, "cluster"},
		{Config{Addrs: cluster, Mode: ModeCluster}, "cluster"},
	} {
		s, err := New(c.cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", c.cfg, err)
		}
		if got := string(s.client.Mode()); got != c.want {
			t.Errorf("New(%+v) connected in mode %s, want %s", c.cfg, got, c.want)
		}
		if _, err := s.Allow(t.Context(), uniquePrefix(t), floodgate.PerSecond(1)); err != nil {
			t.Errorf("New(%+v): Allow: %v", c.cfg, err)
		}
		s.Close()
	}
	var ce *ConfigError
	if _, err := New(Config{Addrs: []string{standalone}, Mode: ModeCluster}); !errors.As(err, &ce) || ce.Field != "Mode" {
		t.Errorf("New in cluster mode on a standalone server = %v, want a *ConfigError for Mode", err)
	}
}

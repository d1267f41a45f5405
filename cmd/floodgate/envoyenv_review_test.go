package main

import (
	"context"
	"go/build"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// peerSettingsFile is the peer's settings.go in the module cache, at the
// version compat/envoyratelimit pins; "" when that module is not there.
func peerSettingsFile(t *testing.T) string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join("..", "..", "compat", "envoyratelimit", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github\.com/envoyproxy/ratelimit (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("compat/envoyratelimit/go.mod does not require github.com/envoyproxy/ratelimit")
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		cache = filepath.Join(filepath.SplitList(build.Default.GOPATH)[0], "pkg", "mod")
	}
	path := filepath.Join(cache, "github.com", "envoyproxy", "ratelimit@"+string(m[1]), "src", "settings", "settings.go")
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// TestEnvoyVarsCoverPeerSettings checks that every variable of the peer's
// settings (its envconfig tags) is one readEnvoyEnv knows, so that none is
// reported as a typo.
func TestEnvoyVarsCoverPeerSettings(t *testing.T) {
	path := peerSettingsFile(t)
	if path == "" {
		t.Skip("envoyproxy/ratelimit is not in the module cache (go mod download in compat/envoyratelimit)")
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tags := regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"`).FindAllSubmatch(src, -1)
	if len(tags) < 50 {
		t.Fatalf("only %d envconfig tags in %s: has its format changed?", len(tags), path)
	}
	for _, m := range tags {
		if name := string(m[1]); !slices.Contains(envoyVars, name) {
			t.Errorf("%s (in %s) is not in envoyVars: it would be reported as a typo", name, path)
		}
	}
}

// TestReadEnvoyEnvPeerVariables: the peer's own variables, those of its
// memcache backend and xDS rule source included, are never called typos;
// beside Redis and files they are noted as ignored, as the peer ignores them.
func TestReadEnvoyEnvPeerVariables(t *testing.T) {
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit"}
	tests := []struct {
		name, variable, value, note string
	}{
		{"xds server", "CONFIG_GRPC_XDS_SERVER_URL", "xds:18000", "CONFIG_GRPC_XDS_SERVER_URL: ignored, as by the peer, because CONFIG_TYPE is not GRPC_XDS_SOTW"},
		{"xds node", "CONFIG_GRPC_XDS_NODE_ID", "n1", "CONFIG_GRPC_XDS_NODE_ID: ignored, as by the peer, because CONFIG_TYPE is not GRPC_XDS_SOTW"},
		{"xds client backoff", "XDS_CLIENT_BACKOFF_JITTER", "false", "XDS_CLIENT_BACKOFF_JITTER: ignored, as by the peer, because CONFIG_TYPE is not GRPC_XDS_SOTW"},
		{"xds message size", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1024", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: ignored"},
		{"memcache tls cert", "MEMCACHE_TLS_CLIENT_CERT", "/c.pem", "MEMCACHE_TLS_CLIENT_CERT: ignored, as by the peer, because BACKEND_TYPE is not memcache"},
		{"memcache tls key", "MEMCACHE_TLS_CLIENT_KEY", "/k.pem", "MEMCACHE_TLS_CLIENT_KEY: ignored"},
		{"memcache tls ca", "MEMCACHE_TLS_CACERT", "/ca.pem", "MEMCACHE_TLS_CACERT: ignored"},
		{"memcache skip hostname", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "true", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION: ignored"},
		{"memcache host", "MEMCACHE_HOST_PORT", "mc:11211", "MEMCACHE_HOST_PORT: ignored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{tt.variable: tt.value}
			for k, v := range base {
				vars[k] = v
			}
			c, err := readEnvoyEnv(envOf(vars))
			if err != nil {
				t.Fatal(err)
			}
			notes := strings.Join(c.notes, "\n")
			if strings.Contains(notes, "a typo") {
				t.Errorf("notes %q call a variable of the peer a typo", c.notes)
			}
			if !strings.Contains(notes, tt.note) {
				t.Errorf("notes %q, want one containing %q", c.notes, tt.note)
			}
		})
	}
}

// TestReadEnvoyEnvZeroTimeout: REDIS_TIMEOUT (and its per-second twin) of
// zero or less is "no timeout" for the peer; floodgate's calls always have
// one, so it says so, naming the variable, instead of silently using its own.
func TestReadEnvoyEnvZeroTimeout(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		note string
	}{
		{"REDIS_TIMEOUT=0s", map[string]string{"REDIS_TIMEOUT": "0s"},
			"REDIS_TIMEOUT=0s: for the peer no timeout at all (it connects and waits for Redis without a deadline); every floodgate store call has one, so floodgate's own 50ms applies"},
		{"REDIS_TIMEOUT=0", map[string]string{"REDIS_TIMEOUT": "0"}, "REDIS_TIMEOUT=0: for the peer no timeout at all"},
		{"a negative REDIS_TIMEOUT", map[string]string{"REDIS_TIMEOUT": "-1s"}, "REDIS_TIMEOUT=-1s: for the peer no timeout at all"},
		{"REDIS_PERSECOND_TIMEOUT=0s", map[string]string{"REDIS_TIMEOUT": "1s", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
			"REDIS_PERSECOND_URL": "ps:6380", "REDIS_PERSECOND_TIMEOUT": "0s"},
			"REDIS_PERSECOND_TIMEOUT=0s: for the peer no timeout at all (it connects and waits for Redis without a deadline); every floodgate store call has one, so floodgate's own 50ms applies: a Redis slower than that is an outage, answered by the rules' failure mode. Set REDIS_PERSECOND_TIMEOUT to a duration from 1ms to 1m to choose it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit"}
			for k, v := range tt.vars {
				vars[k] = v
			}
			c, err := readEnvoyEnv(envOf(vars))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(c.notes, "\n"), tt.note) {
				t.Errorf("notes %q, want one containing %q", c.notes, tt.note)
			}
			s := c.cfg.Store
			if ps := s.PerSecond; ps != nil && ps.Timeout != 0 {
				t.Errorf("per-second timeout %v, want 0 (floodgate's default)", ps.Timeout)
			} else if ps == nil && s.Timeout != 0 {
				t.Errorf("timeout %v, want 0 (floodgate's default)", s.Timeout)
			}
		})
	}
}

// TestReadEnvoyEnvLogLevel maps the peer's logrus levels onto floodgate's
// nearest, noting the two it has not, and refuses what the peer refuses.
func TestReadEnvoyEnvLogLevel(t *testing.T) {
	tests := []struct {
		value, want, note, wantErr string
	}{
		{"trace", "debug", "LOG_LEVEL=trace: floodgate's most detailed level is debug; logging at debug", ""},
		{"TRACE", "debug", "LOG_LEVEL=TRACE: floodgate's most detailed level is debug", ""},
		{"debug", "debug", "", ""},
		{"Info", "info", "", ""},
		{"warning", "warn", "", ""},
		{"WARN", "warn", "", ""},
		{"error", "error", "", ""},
		{"fatal", "error", "LOG_LEVEL=fatal: floodgate's least detailed level is error; logging at error", ""},
		{"panic", "error", "LOG_LEVEL=panic: floodgate's least detailed level is error", ""},
		{"verbose", "", "", `LOG_LEVEL="verbose" is not a level of envoyproxy/ratelimit (trace, debug, info, warn, error, fatal or panic)`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, err := readEnvoyEnv(envOf(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit", "LOG_LEVEL": tt.value}))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.cfg.Log.Level != tt.want {
				t.Errorf("level %q, want %q", c.cfg.Log.Level, tt.want)
			}
			notes := strings.Join(c.notes, "\n")
			if tt.note != "" && !strings.Contains(notes, tt.note) {
				t.Errorf("notes %q, want one containing %q", c.notes, tt.note)
			}
			if tt.note == "" && strings.Contains(notes, "LOG_LEVEL") {
				t.Errorf("notes %q mention LOG_LEVEL", c.notes)
			}
		})
	}
}

// TestReadEnvoyEnvErrorsNameVariables: every error names the variables and
// values that caused it, with the fix, and never a line or field of the
// config floodgate builds from them.
func TestReadEnvoyEnvErrorsNameVariables(t *testing.T) {
	ca := tlstest.NewCA(t, "rls")
	leaf := ca.Issue("rls", tlstest.Leaf{CommonName: "localhost", Server: true, DNSNames: []string{"localhost"}})
	other := ca.Issue("other", tlstest.Leaf{CommonName: "localhost", Server: true, DNSNames: []string{"localhost"}})
	tests := []struct {
		name    string
		vars    map[string]string
		wantErr string
	}{
		{"PORT on the gRPC port", map[string]string{"PORT": "8081"},
			`PORT="8081": GRPC_HOST/GRPC_PORT's 0.0.0.0:8081 takes the same address as HOST/PORT's 0.0.0.0:8081; give GRPC_PORT (default 8081) and PORT (default 8080) different ports`},
		{"GRPC_PORT on every interface of HOST's port", map[string]string{"HOST": "127.0.0.1", "GRPC_PORT": "8080"},
			`HOST="127.0.0.1", GRPC_PORT="8080": GRPC_HOST/GRPC_PORT's 0.0.0.0:8080 takes the same port on every interface as HOST/PORT's 127.0.0.1:8080`},
		{"a Redis client key of another certificate", map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": leaf.CertFile, "REDIS_TLS_CLIENT_KEY": other.KeyFile},
			`REDIS_TLS_CLIENT_KEY="` + other.KeyFile + `": ` + other.KeyFile + " is not the key of the certificate in " + leaf.CertFile},
		{"a gRPC key of another certificate", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": leaf.CertFile, "GRPC_SERVER_TLS_KEY": other.KeyFile},
			`GRPC_SERVER_TLS_KEY="` + other.KeyFile + `": ` + other.KeyFile + " is not the key of the certificate in " + leaf.CertFile},
		{"a gRPC client CA that does not exist", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": leaf.CertFile,
			"GRPC_SERVER_TLS_KEY": leaf.KeyFile, "GRPC_CLIENT_TLS_CACERT": "/nonexistent/ca.pem"}, `GRPC_CLIENT_TLS_CACERT="/nonexistent/ca.pem": /nonexistent/ca.pem no such file or directory`},
		{"REDIS_URL without a port", map[string]string{"REDIS_URL": "redishost"},
			`REDIS_URL="redishost", REDIS_SOCKET_TYPE="tcp": "redishost" is not host:port: write host:port, such as redis:6379`},
		{"GRPC_PORT over 65535", map[string]string{"GRPC_PORT": "99999"}, `GRPC_PORT="99999" is not a port: a whole number from 0 to 65535`},
		{"PORT negative", map[string]string{"PORT": "-1"}, `PORT="-1" is not a port: a whole number from 0 to 65535`},
		{"HOST not a host", map[string]string{"HOST": "a b"}, `HOST="a b": a b:8080 has host "a b", which is not an IP address`},
		{"a cluster address empty", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:1,,b:2"},
			`REDIS_URL="a:1,,b:2", REDIS_SOCKET_TYPE="tcp": "" (its address 2) is not host:port: write host:port, such as redis:6379`},
		{"a sentinel without a port", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1"},
			`REDIS_URL="m,s1", REDIS_SOCKET_TYPE="tcp": "s1" (its sentinel 1) is not host:port: write host:port, such as redis:6379`},
		{"an empty sentinel master name", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": ",s1:26379"},
			`REDIS_URL=",s1:26379": with REDIS_TYPE=sentinel it is <master name>,<sentinel1>,...`},
		{"REDIS_TIMEOUT over a minute", map[string]string{"REDIS_TIMEOUT": "2m"}, `REDIS_TIMEOUT="2m": 2m0s must be between 1ms and 1m`},
		{"REDIS_PERSECOND_TIMEOUT over a minute", map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
			"REDIS_PERSECOND_URL": "ps:6380", "REDIS_PERSECOND_TIMEOUT": "90s"}, `REDIS_PERSECOND_TIMEOUT="90s": 1m30s must be between 1ms and 1m`},
		{"a Redis CA file that does not exist", map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CACERT": "/nonexistent/ca.pem"},
			`REDIS_TLS_CACERT="/nonexistent/ca.pem": /nonexistent/ca.pem no such file or directory`},
		{"the per-second Redis's CA file, shared", map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
			"REDIS_PERSECOND_URL": "ps:6380", "REDIS_PERSECOND_TLS": "true", "REDIS_TLS_CACERT": "/nonexistent/ca.pem"},
			`REDIS_TLS_CACERT="/nonexistent/ca.pem": /nonexistent/ca.pem no such file or directory`},
		{"a gRPC certificate that does not exist", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/nonexistent/cert.pem",
			"GRPC_SERVER_TLS_KEY": leaf.KeyFile}, `GRPC_SERVER_TLS_CERT="/nonexistent/cert.pem": /nonexistent/cert.pem no such file or directory`},
	}
	lineRE := regexp.MustCompile(`line \d+`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit"}
			for k, v := range tt.vars {
				vars[k] = v
			}
			_, err := readEnvoyEnv(envOf(vars))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			msg := err.Error()
			if lineRE.MatchString(msg) {
				t.Errorf("error %q names a line of a document the user never wrote", msg)
			}
			for _, field := range []string{"store.", "grpc_listen", "listen:", "tls.", "envoy_config", "per_second"} {
				if strings.Contains(msg, field) {
					t.Errorf("error %q names floodgate's field %s instead of the variable", msg, field)
				}
			}
		})
	}
}

// TestStoreKeyVarsCoverStore: every key of a store section that the
// variables set is named, in config.Store.Validate's errors, by the
// variables that set it (the per-second Redis's own, or the ones both
// share), and every other key is one no variable sets.
func TestStoreKeyVarsCoverStore(t *testing.T) {
	tests := []struct {
		key, main, perSecond string // a variable among those named
	}{
		{"type", "REDIS_TYPE", "REDIS_PERSECOND_TYPE"},
		{"addrs[1]", "REDIS_URL", "REDIS_PERSECOND_URL"},
		{"master_name", "REDIS_URL", "REDIS_PERSECOND_URL"},
		{"db", "REDIS_URL", "REDIS_PERSECOND_URL"},
		{"username", "REDIS_AUTH", "REDIS_PERSECOND_AUTH"},
		{"password", "REDIS_AUTH", "REDIS_PERSECOND_AUTH"},
		{"sentinel_username", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH"},
		{"sentinel_password", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH"},
		{"key_prefix", "CACHE_KEY_PREFIX", "CACHE_KEY_PREFIX"},
		{"tls", "REDIS_TLS", "REDIS_PERSECOND_TLS"},
		{"tls_ca_file", "REDIS_TLS_CACERT", "REDIS_TLS_CACERT"},
		{"tls_cert_file", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_CERT"},
		{"tls_key_file", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CLIENT_KEY"},
		{"tls_skip_hostname_verification", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"},
		{"timeout", "REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT"},
		{"flush_delay", "REDIS_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_WINDOW"},
	}
	// Keys no variable sets: floodgate's own settings.
	unset := []string{"password_env", "sentinel_password_env", "tls_server_name", "max_keys", "require_at_start", "max_in_flight",
		"breaker_failures", "over_limit_cache", "per_second"}
	covered := map[string]bool{}
	for _, tt := range tests {
		key, _, _ := strings.Cut(tt.key, "[")
		covered[key] = true
		for prefix, want := range map[string]string{"REDIS_": tt.main, "REDIS_PERSECOND_": tt.perSecond} {
			vars, shown := storeKeyVars(prefix, tt.key)
			if !slices.Contains(vars, want) {
				t.Errorf("storeKeyVars(%s, %s) = %v, want %s among them", prefix, tt.key, vars, want)
			}
			for _, v := range vars {
				if !slices.Contains(envoyVars, v) {
					t.Errorf("storeKeyVars(%s, %s) names %s, not a variable of the peer", prefix, tt.key, v)
				}
			}
			if shown && strings.Contains(tt.key, "password") {
				t.Errorf("storeKeyVars(%s, %s) shows a password", prefix, tt.key)
			}
		}
	}
	st := reflect.TypeFor[config.Store]()
	for i := range st.NumField() {
		key := st.Field(i).Tag.Get("yaml")
		if !covered[key] && !slices.Contains(unset, key) {
			t.Errorf("store key %s: neither named by its variables in storeKeyVars' test nor listed as set by none", key)
		}
	}
}

// TestReadEnvoyEnvRedisURLs reads REDIS_URL's redis:// forms as the peer's
// client (radix v4) reads them, and never shows a password: not in an
// error, not in a note.
func TestReadEnvoyEnvRedisURLs(t *testing.T) {
	const secret = "s3cr3t-Pw"
	tests := []struct {
		name    string
		vars    map[string]string
		check   func(t *testing.T, s config.Store)
		wantErr string
	}{
		{"user and password", map[string]string{"REDIS_URL": "redis://alice:" + secret + "@r:6379"}, func(t *testing.T, s config.Store) {
			if strings.Join(s.Addrs, ",") != "r:6379" || s.Username != "alice" || s.Password != secret || s.DB != 0 {
				t.Errorf("store %+v", s)
			}
		}, ""},
		{"password only, db 0", map[string]string{"REDIS_URL": "redis://:" + secret + "@r:6379/0"}, func(t *testing.T, s config.Store) {
			if strings.Join(s.Addrs, ",") != "r:6379" || s.Username != "" || s.Password != secret || s.DB != 0 {
				t.Errorf("store %+v", s)
			}
		}, ""},
		{"a database", map[string]string{"REDIS_URL": "redis://r:6379/2"}, func(t *testing.T, s config.Store) {
			rc, err := (&config.Config{Store: s}).RedisConfig()
			if err != nil || rc.DB != 2 || strings.Join(rc.Addrs, ",") != "r:6379" {
				t.Errorf("redis config %+v, %v: want db 2", rc, err)
			}
		}, ""},
		{"the query's username, password and db", map[string]string{"REDIS_URL": "redis://r:6379?username=bob&password=" + secret + "&db=3"},
			func(t *testing.T, s config.Store) {
				if s.Username != "bob" || s.Password != secret || s.DB != 3 {
					t.Errorf("store %+v", s)
				}
			}, ""},
		{"REDIS_AUTH wins, as in radix", map[string]string{"REDIS_URL": "redis://urluser:" + secret + "@r:6379", "REDIS_AUTH": "authuser:authpw"},
			func(t *testing.T, s config.Store) {
				if s.Username != "authuser" || s.Password != "authpw" {
					t.Errorf("store %+v, want REDIS_AUTH's credentials", s)
				}
			}, ""},
		{"REDIS_AUTH's password with the URL's user", map[string]string{"REDIS_URL": "redis://urluser:" + secret + "@r:6379", "REDIS_AUTH": "authpw"},
			func(t *testing.T, s config.Store) {
				if s.Username != "urluser" || s.Password != "authpw" {
					t.Errorf("store %+v, want the URL's user and REDIS_AUTH's password", s)
				}
			}, ""},
		{"cluster URLs", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "redis://:" + secret + "@a:7000,redis://:" + secret + "@b:7001"},
			func(t *testing.T, s config.Store) {
				if s.Type != config.StoreRedisCluster || strings.Join(s.Addrs, ",") != "a:7000,b:7001" || s.Password != secret {
					t.Errorf("store %+v", s)
				}
			}, ""},
		{"sentinel URLs authenticate to the sentinels", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,redis://sen:" + secret + "@s1:26379,redis://sen:" + secret + "@s2:26379"},
			func(t *testing.T, s config.Store) {
				if s.Type != config.StoreRedisSentinel || s.MasterName != "mymaster" || strings.Join(s.Addrs, ",") != "s1:26379,s2:26379" ||
					s.SentinelUsername != "sen" || s.SentinelPassword != secret || s.Password != "" {
					t.Errorf("store %+v", s)
				}
			}, ""},
		{"REDIS_SENTINEL_AUTH wins over the sentinels' URLs", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,redis://sen:" + secret + "@s1:26379",
			"REDIS_SENTINEL_AUTH": "sa:sapw"}, func(t *testing.T, s config.Store) {
			if s.SentinelUsername != "sa" || s.SentinelPassword != "sapw" {
				t.Errorf("store %+v", s)
			}
		}, ""},
		{"the per-second Redis's URL", map[string]string{"REDIS_URL": "r:6379", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
			"REDIS_PERSECOND_URL": "redis://ps:" + secret + "@ps:6380/1"}, func(t *testing.T, s config.Store) {
			ps := s.PerSecond
			if ps == nil || strings.Join(ps.Addrs, ",") != "ps:6380" || ps.Username != "ps" || ps.Password != secret || ps.DB != 1 || s.Password != "" {
				t.Errorf("store %+v, per-second %+v", s, ps)
			}
		}, ""},
		{"rediss:// is not read by the peer", map[string]string{"REDIS_URL": "rediss://alice:" + secret + "@r:6380"}, nil,
			`REDIS_URL="rediss://*****@r:6380": the peer's Redis client reads only redis:// URLs (not rediss://); for TLS write redis://host:port and set REDIS_TLS=true`},
		{"a cluster's database", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "redis://:" + secret + "@a:7000/1"}, nil,
			`REDIS_URL="redis://*****@a:7000/1": a cluster has only database 0, not 1`},
		{"a sentinel's database", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,redis://:" + secret + "@s1:26379/2"}, nil,
			`the database 2 of a sentinel's URL is not the primary's`},
		{"credentials on some cluster nodes only", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "redis://:" + secret + "@a:7000,b:7001"}, nil,
			`REDIS_URL="redis://*****@a:7000,b:7001" (its address 2): the other addresses are redis:// URLs with credentials or a db`},
		{"different credentials per node", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "redis://:" + secret + "@a:7000,redis://:other" + secret + "@b:7001"}, nil,
			`(its address 2): its credentials or db differ from the first address's`},
		{"a URL without a host", map[string]string{"REDIS_URL": "redis://alice:" + secret + "@"}, nil,
			`REDIS_URL="redis://*****@" is not a URL redis://[user:password@]host:port[/db]`},
		{"a URL without a port", map[string]string{"REDIS_URL": "redis://alice:" + secret + "@r"}, nil,
			`REDIS_URL="redis://*****@r", REDIS_SOCKET_TYPE="tcp": "r" is not host:port`},
		{"a database that is not a number", map[string]string{"REDIS_URL": "redis://:" + secret + "@r:6379/x"}, nil, `its database "x" is not a whole number`},
		{"a password in the query", map[string]string{"REDIS_URL": "redis://r?password=" + secret}, nil, `REDIS_URL="redis://r?*****", REDIS_SOCKET_TYPE="tcp": "r" is not host:port`},
		{"a URL with a unix socket type", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "redis://:" + secret + "@r:6379"}, nil,
			`REDIS_URL="redis://*****@r:6379": with REDIS_SOCKET_TYPE=unix`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit"}
			for k, v := range tt.vars {
				vars[k] = v
			}
			c, err := readEnvoyEnv(envOf(vars))
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("error %q shows the password", err)
			}
			if c != nil && strings.Contains(strings.Join(c.notes, "\n"), secret) {
				t.Errorf("notes %q show the password", c.notes)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Count(err.Error(), "REDIS_URL=") > 1 {
					t.Errorf("error %q: REDIS_URL's mistake reported more than once", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c.cfg.Store)
		})
	}
}

// TestServeEnvoyEnvRulesFolderErrors: a rule folder that does not load is
// named by the variables that chose it, never by a line of the YAML built
// from them.
func TestServeEnvoyEnvRulesFolderErrors(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"a missing folder", map[string]string{"RUNTIME_ROOT": filepath.Join(root, "nonexistent"), "RUNTIME_SUBDIRECTORY": "rl"},
			`RUNTIME_ROOT="` + filepath.Join(root, "nonexistent") + `", RUNTIME_SUBDIRECTORY="rl" (the files under ` + filepath.Join(root, "nonexistent", "rl") +
				" whose path there, / as dots, starts with config.)"},
		{"a bad rule file, watch root off", map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "bad", "RUNTIME_WATCH_ROOT": "false"},
			`RUNTIME_ROOT="` + root + `", RUNTIME_SUBDIRECTORY="bad", RUNTIME_WATCH_ROOT="false" (the files under ` + filepath.Join(root, "bad", "config") + ")"},
	} {
		t.Run(c.name, func(t *testing.T) {
			writeFile(t, root, "bad/config/rules.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
			for k, v := range map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "USE_STATSD": "false"} {
				t.Setenv(k, v)
			}
			for k, v := range c.vars {
				t.Setenv(k, v)
			}
			var out, errOut strings.Builder
			err := run(context.Background(), []string{"serve", "--envoy-env"}, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "line 1") || strings.Contains(err.Error(), "envoy_config") {
				t.Errorf("error %q names the YAML built from the environment", err)
			}
		})
	}
}

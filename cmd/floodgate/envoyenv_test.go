package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

func envOf(vars map[string]string) (func(string) (string, bool), []string) {
	var environ []string
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, environ
}

// TestReadEnvoyEnv maps the variables of envoyproxy/ratelimit's deployments
// onto floodgate's settings, refuses the ones it cannot honour, and notes
// the rest.
func TestReadEnvoyEnv(t *testing.T) {
	// Real certificate files: the config checks that TLS files load.
	ca := tlstest.NewCA(t, "rls")
	leaf := ca.Issue("rls", tlstest.Leaf{CommonName: "localhost", Server: true, DNSNames: []string{"localhost"}})
	certFile, keyFile, caFile := leaf.CertFile, leaf.KeyFile, ca.CertFile
	// RUNTIME_SUBDIRECTORY is set as every deployment does: without it the
	// peer reads no rule file (a case of its own below).
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name    string
		vars    map[string]string
		check   func(t *testing.T, c *envoyCompat)
		wantErr string
		note    string
	}{
		{"defaults are the peer's", base, func(t *testing.T, c *envoyCompat) {
			if c.cfg.Listen != "0.0.0.0:8080" || c.cfg.GRPCListen != "0.0.0.0:8081" {
				t.Errorf("listen %s, grpc %s", c.cfg.Listen, c.cfg.GRPCListen)
			}
			if c.cfg.EnvoyConfig != "/srv/runtime_data/current/ratelimit" || c.load.Prefix != "config" || !c.load.DotFiles || c.load.MergeDomains {
				t.Errorf("rules %s, load %+v", c.cfg.EnvoyConfig, c.load)
			}
			if c.cfg.Store.Type != config.StoreRedis || strings.Join(c.cfg.Store.Addrs, ",") != "redis:6379" {
				t.Errorf("store %+v", c.cfg.Store)
			}
			if c.grpc.maxConnAge != 24*time.Hour || c.grpc.maxConnAgeGrace != time.Hour || c.cfg.Log.Level != "warn" {
				t.Errorf("grpc %+v, log %+v", c.grpc, c.cfg.Log)
			}
		}, "", "REDIS_TIMEOUT"},
		{"a deployment's settings", with(map[string]string{
			"HOST": "127.0.0.1", "PORT": "9080", "GRPC_PORT": "9081", "GRPC_UDS": "/tmp/rls.sock", "GRPC_MAX_CONNECTION_AGE": "10m",
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "MERGE_DOMAIN_CONFIG": "true",
			"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_AUTH": "user:secret", "REDIS_TLS": "true",
			"REDIS_TIMEOUT": "30ms", "REDIS_PIPELINE_WINDOW": "150us", "CACHE_KEY_PREFIX": "rl:",
			"SHADOW_MODE": "true", "QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true", "NEAR_LIMIT_RATIO": "0.9",
			"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Left",
			"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": certFile, "GRPC_SERVER_TLS_KEY": keyFile, "GRPC_CLIENT_TLS_CACERT": caFile,
			"USE_PROMETHEUS": "true", "LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true",
		}), func(t *testing.T, c *envoyCompat) {
			if c.cfg.Listen != "127.0.0.1:9080" || c.grpc.uds != "/tmp/rls.sock" || c.grpc.maxConnAge != 10*time.Minute {
				t.Errorf("listen %s, grpc %+v", c.cfg.Listen, c.grpc)
			}
			if c.cfg.EnvoyConfig != "/data/ratelimit" || c.load.Prefix != "config" || c.load.DotFiles || !c.load.MergeDomains {
				t.Errorf("rules %s, load %+v", c.cfg.EnvoyConfig, c.load)
			}
			s := c.cfg.Store
			if s.Type != config.StoreRedisSentinel || s.MasterName != "mymaster" || strings.Join(s.Addrs, ",") != "s1:26379,s2:26379" ||
				s.Username != "user" || s.Password != "secret" || !s.TLS || s.Timeout != 30*time.Millisecond ||
				s.FlushDelay != 150*time.Microsecond || s.KeyPrefix != "rl:" {
				t.Errorf("store %+v", s)
			}
			o := c.opts
			if !o.ShadowMode || !o.QuotaMode || !o.DynamicMetadata || o.NearLimitRatio != 0.9 || o.PeerHeaders == nil ||
				o.PeerHeaders.Remaining != "X-Left" || o.PeerHeaders.Limit != "RateLimit-Limit" {
				t.Errorf("options %+v", o)
			}
			if c.cfg.TLS != (config.TLS{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}) {
				t.Errorf("tls %+v", c.cfg.TLS)
			}
			if c.metrics != ":9090" || c.metricsP != "/metrics" || c.cfg.Log.Level != "debug" || c.cfg.Log.Format != "json" || !c.health {
				t.Errorf("metrics %s%s, log %+v, health %v", c.metrics, c.metricsP, c.cfg.Log, c.health)
			}
		}, "", ""},
		{"RUNTIME_WATCH_ROOT=false reads the app folder, whole", with(map[string]string{"RUNTIME_WATCH_ROOT": "false", "RUNTIME_APPDIRECTORY": "rl"}),
			func(t *testing.T, c *envoyCompat) {
				if c.cfg.EnvoyConfig != "/srv/runtime_data/current/ratelimit/rl" || c.load.Prefix != "" {
					t.Errorf("rules %s, load %+v", c.cfg.EnvoyConfig, c.load)
				}
			}, "", ""},
		{"RUNTIME_WATCH_ROOT without RUNTIME_SUBDIRECTORY reads nothing in the peer", with(map[string]string{"RUNTIME_SUBDIRECTORY": ""}), nil,
			"RUNTIME_WATCH_ROOT=true (the default) needs RUNTIME_SUBDIRECTORY", ""},
		{"an empty RUNTIME_APPDIRECTORY reads nothing in the peer", with(map[string]string{"RUNTIME_APPDIRECTORY": "", "RUNTIME_WATCH_ROOT": "false"}), nil,
			"RUNTIME_APPDIRECTORY is empty", ""},
		{"cluster", with(map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:1,b:2,c:3"}), func(t *testing.T, c *envoyCompat) {
			if c.cfg.Store.Type != config.StoreRedisCluster || len(c.cfg.Store.Addrs) != 3 {
				t.Errorf("store %+v", c.cfg.Store)
			}
		}, "", ""},
		{"redis tls with a client certificate and a CA", with(map[string]string{
			"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": certFile, "REDIS_TLS_CLIENT_KEY": keyFile, "REDIS_TLS_CACERT": caFile,
		}), func(t *testing.T, c *envoyCompat) {
			s := c.cfg.Store
			if !s.TLS || s.TLSCertFile != certFile || s.TLSKeyFile != keyFile || s.TLSCAFile != caFile {
				t.Errorf("store %+v", s)
			}
			rc, err := c.cfg.RedisConfig()
			if err != nil || rc.TLS == nil || len(rc.TLS.Certificates) != 1 || rc.TLS.RootCAs == nil {
				t.Errorf("redis config %+v, %v: want TLS with the client certificate and the CA", rc, err)
			}
		}, "", ""},
		{"redis tls files without REDIS_TLS are ignored, as by the peer", with(map[string]string{"REDIS_TLS_CACERT": caFile}),
			func(t *testing.T, c *envoyCompat) {
				if s := c.cfg.Store; s.TLS || s.TLSCAFile != "" {
					t.Errorf("store %+v", s)
				}
			}, "", "REDIS_TLS_CACERT: ignored, as by the peer, because neither REDIS_TLS nor REDIS_PERSECOND_TLS is true"},
		{"redis client certificate without its key", with(map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": certFile}),
			nil, "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together", ""},
		{"sentinel auth", with(map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1:26379", "REDIS_SENTINEL_AUTH": "sentry:pw"}),
			func(t *testing.T, c *envoyCompat) {
				rc, err := c.cfg.RedisConfig()
				if err != nil || rc.SentinelUsername != "sentry" || rc.SentinelPassword != "pw" || rc.Password != "" {
					t.Errorf("redis config %+v, %v: want the sentinels' credentials only", rc, err)
				}
			}, "", ""},
		{"sentinel auth without sentinels", with(map[string]string{"REDIS_SENTINEL_AUTH": "pw"}), nil, "", "REDIS_SENTINEL_AUTH: ignored"},
		{"memcache", with(map[string]string{"BACKEND_TYPE": "memcache"}), nil, `BACKEND_TYPE="memcache" is not supported`, ""},
		{"unix socket (the peer's default)", map[string]string{"RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false"}, func(t *testing.T, c *envoyCompat) {
			if s := c.cfg.Store; s.Type != config.StoreRedis || strings.Join(s.Addrs, ",") != "/var/run/nutcracker/ratelimit.sock" || s.PerSecond != nil {
				t.Errorf("store %+v, want the peer's default socket", s)
			}
		}, "", ""},
		{"unix socket", map[string]string{"RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis/redis.sock"}, func(t *testing.T, c *envoyCompat) {
			rc, err := c.cfg.RedisConfig()
			if err != nil || strings.Join(rc.Addrs, ",") != "/run/redis/redis.sock" {
				t.Errorf("redis config %+v, %v", rc, err)
			}
		}, "", ""},
		{"unix socket type with host:port", map[string]string{"REDIS_URL": "redis:6379"}, nil,
			`REDIS_URL="redis:6379": with REDIS_SOCKET_TYPE=unix (the peer's default) it is the absolute path of Redis's unix socket; for host:port set REDIS_SOCKET_TYPE=tcp`, ""},
		{"another socket type", with(map[string]string{"REDIS_SOCKET_TYPE": "udp"}), nil, `REDIS_SOCKET_TYPE="udp" is not unix or tcp`, ""},
		{"cluster over the default socket type is TCP, as for the peer", map[string]string{"RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_TYPE": "cluster", "REDIS_URL": "a:1,b:2"}, func(t *testing.T, c *envoyCompat) {
			if s := c.cfg.Store; s.Type != config.StoreRedisCluster || strings.Join(s.Addrs, ",") != "a:1,b:2" {
				t.Errorf("store %+v", s)
			}
		}, "", ""},
		{"sentinels with an explicit unix socket type", map[string]string{"RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_SOCKET_TYPE": "unix", "REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1:26379"}, nil, "",
			"REDIS_SOCKET_TYPE=unix: ignored, as by the peer, with REDIS_TYPE=sentinel"},
		{"skip hostname verification", with(map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CACERT": caFile, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}),
			func(t *testing.T, c *envoyCompat) {
				rc, err := c.cfg.RedisConfig()
				if err != nil || rc.TLS == nil || rc.TLS.RootCAs == nil || !rc.TLSSkipHostnameVerification || rc.TLS.InsecureSkipVerify {
					t.Errorf("redis config %+v, %v: want TLS with the CA and only the hostname check skipped", rc, err)
				}
			}, "", ""},
		{"skip hostname verification without TLS", with(map[string]string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}), func(t *testing.T, c *envoyCompat) {
			if c.cfg.Store.TLSSkipHostnameVerification {
				t.Errorf("store %+v", c.cfg.Store)
			}
		}, "", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: ignored, as by the peer"},
		{"skip hostname verification, bad value", with(map[string]string{"REDIS_TLS": "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "sure"}), nil,
			`REDIS_TLS_SKIP_HOSTNAME_VERIFICATION="sure" is not a boolean`, ""},
		{"per-second redis", with(map[string]string{
			"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "ps:6380", "REDIS_PERSECOND_AUTH": "psuser:pspass",
			"REDIS_PERSECOND_TLS": "true", "REDIS_TLS_CACERT": caFile, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
			"REDIS_PERSECOND_TIMEOUT": "20ms", "REDIS_PERSECOND_PIPELINE_WINDOW": "100us", "REDIS_PERSECOND_POOL_SIZE": "5", "CACHE_KEY_PREFIX": "rl:",
			"REDIS_TIMEOUT": "30ms",
		}), func(t *testing.T, c *envoyCompat) {
			s := c.cfg.Store
			if s.TLS || s.TLSCAFile != "" || s.Timeout != 30*time.Millisecond || s.KeyPrefix != "rl:" || s.PerSecond == nil {
				t.Fatalf("main store %+v: want no TLS (REDIS_TLS unset) and its own timeout", s)
			}
			ps := s.PerSecond
			if ps.Type != config.StoreRedis || strings.Join(ps.Addrs, ",") != "ps:6380" || ps.Username != "psuser" || ps.Password != "pspass" ||
				!ps.TLS || ps.TLSCAFile != caFile || !ps.TLSSkipHostnameVerification || ps.Timeout != 20*time.Millisecond ||
				ps.FlushDelay != 100*time.Microsecond || ps.KeyPrefix != "rl:" {
				t.Errorf("per-second store %+v", ps)
			}
			rc, err := c.cfg.Store.PerSecondRedisConfig()
			if err != nil || rc == nil || rc.TLS == nil || !rc.TLSSkipHostnameVerification || rc.KeyPrefix != "rl:" {
				t.Errorf("per-second redis config %+v, %v", rc, err)
			}
		}, "", "REDIS_PERSECOND_POOL_SIZE: not needed"},
		{"per-second redis on the peer's default socket", with(map[string]string{"REDIS_PERSECOND": "true"}), func(t *testing.T, c *envoyCompat) {
			if ps := c.cfg.Store.PerSecond; ps == nil || strings.Join(ps.Addrs, ",") != "/var/run/nutcracker/ratelimitpersecond.sock" {
				t.Errorf("per-second store %+v", ps)
			}
		}, "", "REDIS_PERSECOND_TIMEOUT: unset"},
		{"per-second sentinels", with(map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TYPE": "SENTINEL", "REDIS_PERSECOND_URL": "psm,ps1:26379,ps2:26379",
			"REDIS_PERSECOND_SENTINEL_AUTH": "sentry:pw", "REDIS_SENTINEL_AUTH": "main-only"}), func(t *testing.T, c *envoyCompat) {
			ps := c.cfg.Store.PerSecond
			if ps == nil || ps.Type != config.StoreRedisSentinel || ps.MasterName != "psm" || len(ps.Addrs) != 2 || ps.SentinelUsername != "sentry" || ps.SentinelPassword != "pw" {
				t.Errorf("per-second store %+v", ps)
			}
		}, "", "REDIS_SENTINEL_AUTH: ignored, as by the peer, because REDIS_TYPE is not sentinel"},
		{"per-second cluster", with(map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TYPE": "cluster", "REDIS_PERSECOND_URL": "c1:7000,c2:7001"}),
			func(t *testing.T, c *envoyCompat) {
				if ps := c.cfg.Store.PerSecond; ps == nil || ps.Type != config.StoreRedisCluster || len(ps.Addrs) != 2 {
					t.Errorf("per-second store %+v", ps)
				}
			}, "", ""},
		{"a bad REDIS_TLS is reported once", with(map[string]string{"REDIS_TLS": "maybe"}), nil, `REDIS_TLS="maybe" is not a boolean (true or false)`, ""},
		{"per-second bad type", with(map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TYPE": "twin"}), nil, `REDIS_PERSECOND_TYPE="twin" is not single, sentinel or cluster`, ""},
		{"per-second sentinel without master", with(map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TYPE": "sentinel", "REDIS_PERSECOND_URL": "s:26379"}), nil,
			`REDIS_PERSECOND_URL="s:26379": with REDIS_PERSECOND_TYPE=sentinel it is <master name>,<sentinel1>,...`, ""},
		{"per-second bad timeout", with(map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TIMEOUT": "soon"}), nil, `REDIS_PERSECOND_TIMEOUT="soon" is not a duration`, ""},
		{"per-second bad address", with(map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "nowhere"}), nil,
			`REDIS_PERSECOND_URL="nowhere", REDIS_PERSECOND_SOCKET_TYPE="tcp": "nowhere" is not host:port: write host:port, such as redis:6379`, ""},
		{"per-second settings without REDIS_PERSECOND", with(map[string]string{"REDIS_PERSECOND_URL": "ps:6380"}), func(t *testing.T, c *envoyCompat) {
			if c.cfg.Store.PerSecond != nil {
				t.Errorf("per-second store %+v", c.cfg.Store.PerSecond)
			}
		}, "", "REDIS_PERSECOND_URL: ignored, as by the peer, because REDIS_PERSECOND is not true"},
		{"xds", with(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}), nil, `CONFIG_TYPE="GRPC_XDS_SOTW" is not supported`, ""},
		{"a key prefix both Redis share, refused once", with(map[string]string{"CACHE_KEY_PREFIX": "{rl}", "REDIS_PERSECOND": "true",
			"REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "ps:6380"}), nil, `CACHE_KEY_PREFIX="{rl}": "{rl}" must not contain '{' or '}'`, ""},
		{"a CA file both Redis share, refused once", with(map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CACERT": "/nonexistent/ca.pem", "REDIS_PERSECOND": "true",
			"REDIS_PERSECOND_TLS": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "ps:6380"}), nil,
			`REDIS_TLS_CACERT="/nonexistent/ca.pem": /nonexistent/ca.pem no such file or directory`, ""},
		{"local cache", with(map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"}), func(t *testing.T, c *envoyCompat) {
			if c.opts.OverLimitCache != (decide.CacheOptions{MaxBytes: 1048576}) {
				t.Errorf("over-limit cache %+v, want on with MaxBytes 1048576", c.opts.OverLimitCache)
			}
		}, "", ""},
		{"local cache 0 is off, as for the peer", with(map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "0"}), func(t *testing.T, c *envoyCompat) {
			if c.opts.OverLimitCache != (decide.CacheOptions{}) {
				t.Errorf("over-limit cache %+v, want off", c.opts.OverLimitCache)
			}
		}, "", ""},
		{"negative local cache", with(map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-5"}), nil,
			`LOCAL_CACHE_SIZE_IN_BYTES="-5" must not be negative (envoyproxy/ratelimit would run its smallest over-limit cache, 512 KiB, with it); ` +
				"set 0 (the default) for no over-limit cache, or its size in bytes, such as 1048576", ""},
		{"GRPC_MAX_CONNECTION_AGE=0 is no age limit, as for the peer", with(map[string]string{"GRPC_MAX_CONNECTION_AGE": "0s"}), func(t *testing.T, c *envoyCompat) {
			if c.grpc.maxConnAge != 0 {
				t.Errorf("max connection age %v, want 0 (none)", c.grpc.maxConnAge)
			}
		}, "", ""},
		{"negative GRPC_MAX_CONNECTION_AGE", with(map[string]string{"GRPC_MAX_CONNECTION_AGE": "-1s"}), nil,
			`GRPC_MAX_CONNECTION_AGE="-1s" is negative: gRPC cannot add its jitter to it, and envoyproxy/ratelimit crashes at its first gRPC connection; ` +
				"set a duration such as 24h (the default), or 0 for no age limit", ""},
		{"GRPC_MAX_CONNECTION_AGE under 10ns", with(map[string]string{"GRPC_MAX_CONNECTION_AGE": "9ns"}), nil, `GRPC_MAX_CONNECTION_AGE="9ns" is under 10ns`, ""},
		{"bad boolean", with(map[string]string{"SHADOW_MODE": "yes please"}), nil, `SHADOW_MODE="yes please" is not a boolean`, ""},
		{"bad ratio", with(map[string]string{"NEAR_LIMIT_RATIO": "2"}), nil, `NEAR_LIMIT_RATIO="2" is not a number in (0, 1]`, ""},
		{"tls without a key", with(map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c"}), nil, "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY", ""},
		{"a typo is noted", with(map[string]string{"REDIS_TIMEOTU": "1s"}), nil, "", "REDIS_TIMEOTU is not a variable of envoyproxy/ratelimit"},
		{"the gRPC library's variables are not the peer's", with(map[string]string{"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": "/x", "GRPC_GO_LOG_SEVERITY_LEVEL": "info"}),
			func(t *testing.T, c *envoyCompat) {
				if n := strings.Join(c.notes, "\n"); strings.Contains(n, "GRPC_DEFAULT_SSL") || strings.Contains(n, "GRPC_GO_") {
					t.Errorf("notes %q", c.notes)
				}
			}, "", ""},
		{"statsd by default, as the peer", map[string]string{"RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379"}, func(t *testing.T, c *envoyCompat) {
			want := statsdSettings{network: "tcp", addr: "localhost:8125", interval: 10 * time.Second, tags: map[string]string{}}
			if c.statsd == nil || c.statsd.network != want.network || c.statsd.addr != want.addr || c.statsd.interval != want.interval || len(c.statsd.tags) != 0 {
				t.Errorf("statsd %+v, want %+v", c.statsd, want)
			}
		}, "", ""},
		{"statsd settings", with(map[string]string{"USE_STATSD": "true", "STATSD_HOST": "statsd", "STATSD_PORT": "9125", "STATSD_PROTOCOL": "UDP",
			"STATS_FLUSH_INTERVAL": "200ms", "EXTRA_TAGS": "release:v1.2,zone:eu"}), func(t *testing.T, c *envoyCompat) {
			s := c.statsd
			if s == nil || s.network != "udp" || s.addr != "statsd:9125" || s.interval != 200*time.Millisecond ||
				len(s.tags) != 2 || s.tags["release"] != "v1.2" || s.tags["zone"] != "eu" {
				t.Errorf("statsd %+v", s)
			}
			if n := strings.Join(c.notes, "\n"); strings.Contains(n, "STATSD_PROTOCOL") {
				t.Errorf("STATSD_PROTOCOL (lyft/gostats' variable) noted as unknown: %q", c.notes)
			}
		}, "", ""},
		{"DISABLE_STATS", with(map[string]string{"USE_STATSD": "true", "DISABLE_STATS": "true"}), func(t *testing.T, c *envoyCompat) {
			if c.statsd != nil {
				t.Errorf("statsd %+v, want none", c.statsd)
			}
		}, "", "DISABLE_STATS: no statsd push"},
		{"USE_STATSD=false", base, func(t *testing.T, c *envoyCompat) {
			if c.statsd != nil {
				t.Errorf("statsd %+v, want none", c.statsd)
			}
		}, "", ""},
		{"statsd and Prometheus", with(map[string]string{"USE_STATSD": "true", "USE_PROMETHEUS": "true"}), func(t *testing.T, c *envoyCompat) {
			if c.statsd == nil || c.metrics == "" {
				t.Errorf("statsd %+v, metrics %q: want both", c.statsd, c.metrics)
			}
		}, "", "the peer refuses both at once"},
		{"dogstatsd", with(map[string]string{"USE_DOG_STATSD": "true"}), nil, "", "USE_DOG_STATSD: not supported"},
		{"bad EXTRA_TAGS", with(map[string]string{"EXTRA_TAGS": "release:v1,zone"}), nil, `EXTRA_TAGS="release:v1,zone": item "zone" is not key:value`, ""},
		{"bad STATS_FLUSH_INTERVAL", with(map[string]string{"USE_STATSD": "true", "STATS_FLUSH_INTERVAL": "0s"}), nil, `STATS_FLUSH_INTERVAL="0s" must be a positive duration`, ""},
		{"bad STATSD_PROTOCOL", with(map[string]string{"STATSD_PROTOCOL": "quic"}), nil, `STATSD_PROTOCOL="quic" is not tcp or udp`, ""},
		{"bad STATSD_PORT", with(map[string]string{"STATSD_PORT": "eighty"}), nil, `STATSD_PORT="eighty" is not a whole number`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := readEnvoyEnv(envOf(tt.vars))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if n := strings.Count(err.Error(), tt.wantErr); n != 1 {
					t.Fatalf("error %v says %q %d times", err, tt.wantErr, n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
			if tt.note != "" && !strings.Contains(strings.Join(c.notes, "\n"), tt.note) {
				t.Errorf("notes %q, want one containing %q", c.notes, tt.note)
			}
		})
	}
}

// TestServeEnvoyEnv runs `floodgate serve --envoy-env` configured only by
// envoyproxy/ratelimit's variables, on a Redis of its own: it serves the
// rules of RUNTIME_ROOT, answers health for "ratelimit" and
// GET /healthcheck, and reloads an edited rule file without a signal.
func TestServeEnvoyEnv(t *testing.T) {
	srv := redistest.Spawn(t)
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(rpu string) {
		t.Helper()
		data := "domain: env\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + rpu + "}\n"
		if err := os.WriteFile(filepath.Join(cfgDir, "rules.yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	for k, v := range map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"RUNTIME_IGNOREDOTFILES": "true", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "USE_STATSD": "false", "LOG_LEVEL": "info",
	} {
		t.Setenv(k, v)
	}
	base, grpcAddr, logs, stop := startServeRLS(t, true, "--envoy-env")
	c, conn := rlsClient(t, grpcAddr)
	if r := rlsCall(t, c, "env", "k", "a"); r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 || r.GetStatuses()[0].GetLimitRemaining() != 1 {
		t.Fatalf("first answer %v", r)
	}
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health ratelimit: %v %v", resp, err)
	}
	res, err := http.Get(base + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != "OK" {
		t.Fatalf("/healthcheck %d %q", res.StatusCode, body)
	}
	write("5")
	deadline := time.Now().Add(15 * time.Second)
	for rlsCall(t, c, "env", "k", "b").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the edited file was never loaded; log:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "envoy rules reloaded: the folder changed") {
		t.Errorf("no reload in the log:\n%s", logs)
	}
}

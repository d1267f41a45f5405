package main

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/envoy"
)

// envoyCompat is what envoyproxy/ratelimit's environment variables configure,
// mapped onto floodgate's types: `floodgate serve --envoy-env` (or the binary
// run as "ratelimit", the peer's name) reads them instead of a config file,
// so the peer's Kubernetes manifest runs floodgate with only the image
// changed. This file is the one place that knows the peer's variables.
type envoyCompat struct {
	cfg      *config.Config    // listen addresses, store, log, rule folder, tls
	opts     envoy.Options     // SHADOW_MODE, QUOTA_MODE, headers, ...
	load     envoy.LoadOptions // RUNTIME_IGNOREDOTFILES, MERGE_DOMAIN_CONFIG
	grpc     grpcSettings      // GRPC_UDS, GRPC_MAX_CONNECTION_AGE(_GRACE)
	metrics  string            // PROMETHEUS_ADDR, when USE_PROMETHEUS: a listener of its own
	metricsP string            // PROMETHEUS_PATH
	force    bool              // FORCE_START_WITHOUT_INITIAL_CONFIG
	health   bool              // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	notes    []string          // variables read but not honoured as the peer does, for the start-up log
	statsd   *statsdSettings   // USE_STATSD's push, nil if off
}

// grpcSettings are the Envoy gRPC listener's settings beyond its address.
type grpcSettings struct {
	uds                string // a unix socket path instead of a TCP address
	maxConnAge         time.Duration
	maxConnAgeGrace    time.Duration
	requireRulesHealth bool
}

// envoyVars are the peer's variables this file reads (settings.go at the
// pinned version); a variable of the peer's families that is not among
// them is reported as unknown.
var envoyVars = []string{
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_HOST", "GRPC_PORT", "GRPC_UDS",
	"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE",
	"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN",
	"LOG_LEVEL", "LOG_FORMAT", "CONFIG_TYPE", "FORCE_START_WITHOUT_INITIAL_CONFIG",
	"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "STATSD_PROTOCOL", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS",
	"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML",
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT",
	"EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "CACHE_KEY_PREFIX", "BACKEND_TYPE",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER",
	"LIMIT_RESET_HEADER", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
	"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT",
	"REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
	"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
	"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH",
	"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT",
	"REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
	"SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA", "MERGE_DOMAIN_CONFIG",
	"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID",
	"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// envoyFamilies are the prefixes of the peer's variables: one with such a
// prefix that the peer does not define is most likely a typo.
var envoyFamilies = []string{"REDIS_", "GRPC_", "RUNTIME_", "LIMIT_", "MEMCACHE_", "CONFIG_GRPC_XDS_", "TRACING_", "PROMETHEUS_", "STATSD_", "XDS_CLIENT_"}

// notEnvoy are variables of those families that other software reads (the
// gRPC library's own), never typos of the peer's.
var notEnvoy = []string{"GRPC_GO_", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "GRPC_TRACE", "GRPC_VERBOSITY", "GRPC_XDS_", "GRPC_ENFORCE_"}

// envReader reads variables, collecting the errors, each naming its
// variable, its value and what it must be.
type envReader struct {
	lookup func(string) (string, bool)
	errs   []string
}

func (e *envReader) str(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

func (e *envReader) set(name string) bool { _, ok := e.lookup(name); return ok }

func (e *envReader) bool(name string, def bool) bool {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a boolean (true or false)", name, v))
	}
	return b
}

func (e *envReader) int(name string, def int) int {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a whole number", name, v))
	}
	return n
}

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a duration (such as 10s or 1h)", name, v))
	}
	return d
}

func (e *envReader) fail(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// readEnvoyEnv maps the peer's environment (lookup, and environ to find
// unknown variables) onto floodgate's settings. Defaults are the peer's.
// Settings floodgate cannot honour in a way that changes decisions are
// errors (the process must not start pretending); the others are notes.
func readEnvoyEnv(lookup func(string) (string, bool), environ []string) (*envoyCompat, error) {
	e := &envReader{lookup: lookup}
	c := &envoyCompat{}
	note := func(format string, args ...any) { c.notes = append(c.notes, fmt.Sprintf(format, args...)) }

	// Listeners. The peer's HTTP port serves /json, /healthcheck (and, here,
	// floodgate's API and /metrics); its gRPC port the RLS service.
	listen := net.JoinHostPort(e.str("HOST", "0.0.0.0"), strconv.Itoa(e.int("PORT", 8080)))
	grpcListen := net.JoinHostPort(e.str("GRPC_HOST", "0.0.0.0"), strconv.Itoa(e.int("GRPC_PORT", 8081)))
	c.grpc.uds = e.str("GRPC_UDS", "")
	c.grpc.maxConnAge = e.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	c.grpc.maxConnAgeGrace = e.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour)
	if e.set("DEBUG_PORT") || e.set("DEBUG_HOST") {
		note("DEBUG_HOST/DEBUG_PORT: there is no debug listener; floodgate's /metrics and health are on the HTTP listener %s", listen)
	}

	// Rules: the peer's runtime folder.
	if t := strings.ToUpper(e.str("CONFIG_TYPE", "FILE")); t != "FILE" {
		e.fail("CONFIG_TYPE=%q is not supported: floodgate reads rule files (FILE) only, not xDS", t)
	}
	root := e.str("RUNTIME_ROOT", "/srv/runtime_data/current")
	sub := e.str("RUNTIME_SUBDIRECTORY", "")
	app := e.str("RUNTIME_APPDIRECTORY", "config")
	dir := filepath.Join(root, sub, app)
	e.bool("RUNTIME_WATCH_ROOT", true) // both ways the files are those of root/sub/app, watched for changes
	c.load.DotFiles = !e.bool("RUNTIME_IGNOREDOTFILES", false)
	c.load.MergeDomains = e.bool("MERGE_DOMAIN_CONFIG", false)
	c.force = e.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	c.health = e.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	c.grpc.requireRulesHealth = c.health

	// Store.
	store := config.Store{}
	switch b := strings.ToLower(e.str("BACKEND_TYPE", "redis")); b {
	case "redis":
	default:
		e.fail("BACKEND_TYPE=%q is not supported: floodgate's shared store is Redis (standalone, Sentinel or Cluster)", b)
	}
	if st := strings.ToLower(e.str("REDIS_SOCKET_TYPE", "unix")); st != "tcp" {
		e.fail("REDIS_SOCKET_TYPE=%q is not supported: floodgate reaches Redis over TCP; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port", st)
	}
	url := e.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")
	switch t := strings.ToLower(e.str("REDIS_TYPE", "single")); t {
	case "single":
		store.Type, store.Addrs = config.StoreRedis, []string{url}
	case "cluster":
		store.Type, store.Addrs = config.StoreRedisCluster, strings.Split(url, ",")
	case "sentinel":
		parts := strings.Split(url, ",")
		if len(parts) < 2 {
			e.fail("REDIS_URL=%q: with REDIS_TYPE=sentinel it is <master name>,<sentinel1>,...", url)
		} else {
			store.Type, store.MasterName, store.Addrs = config.StoreRedisSentinel, parts[0], parts[1:]
		}
	default:
		e.fail("REDIS_TYPE=%q is not single, sentinel or cluster", t)
	}
	if auth := e.str("REDIS_AUTH", ""); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			store.Username, store.Password = user, pass
		} else {
			store.Password = auth
		}
	}
	// The peer reads the certificate files only with REDIS_TLS, and so does
	// floodgate (store.tls_*).
	store.TLS = e.bool("REDIS_TLS", false)
	if store.TLS {
		store.TLSCertFile, store.TLSKeyFile = e.str("REDIS_TLS_CLIENT_CERT", ""), e.str("REDIS_TLS_CLIENT_KEY", "")
		store.TLSCAFile = e.str("REDIS_TLS_CACERT", "")
		if (store.TLSCertFile == "") != (store.TLSKeyFile == "") {
			e.fail("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together: set both for a client certificate, or neither")
		}
	} else {
		for _, v := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT"} {
			if e.str(v, "") != "" {
				note("%s: ignored, as by the peer, because REDIS_TLS is not true", v)
			}
		}
	}
	if e.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
		e.fail("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true is not supported: floodgate always verifies Redis's certificate (set REDIS_TLS_CACERT to the CA that signs it)")
	}
	if auth := e.str("REDIS_SENTINEL_AUTH", ""); auth != "" {
		if store.Type != config.StoreRedisSentinel {
			note("REDIS_SENTINEL_AUTH: ignored, as by the peer, because REDIS_TYPE is not sentinel")
		} else if user, pass, ok := strings.Cut(auth, ":"); ok {
			store.SentinelUsername, store.SentinelPassword = user, pass
		} else {
			store.SentinelPassword = auth
		}
	}
	if e.set("REDIS_TIMEOUT") {
		store.Timeout = e.duration("REDIS_TIMEOUT", 0)
	} else {
		note("REDIS_TIMEOUT: unset, so floodgate's own store timeout applies (50ms), not the peer's 10s")
	}
	if w := e.duration("REDIS_PIPELINE_WINDOW", 0); w > 0 {
		store.FlushDelay = min(w, time.Millisecond)
		if w > time.Millisecond {
			note("REDIS_PIPELINE_WINDOW=%s: floodgate gathers calls for at most 1ms", w)
		}
	}
	store.KeyPrefix = e.str("CACHE_KEY_PREFIX", "")
	if e.bool("REDIS_PERSECOND", false) {
		e.fail("REDIS_PERSECOND=true is not supported: floodgate keeps per-second limits in the one Redis of REDIS_URL")
	}
	for _, v := range []string{"REDIS_POOL_SIZE", "REDIS_PIPELINE_LIMIT", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"} {
		if e.set(v) {
			note("%s: not needed (floodgate multiplexes every call on one pipelined connection per node; health always asks the store)", v)
		}
	}
	if e.set("EXPIRATION_JITTER_MAX_SECONDS") {
		note("EXPIRATION_JITTER_MAX_SECONDS: not needed (floodgate's keys expire when their window ends)")
	}
	if e.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false) {
		note("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: always so in floodgate: a request over the limit counts nowhere")
	}
	if n := e.int("LOCAL_CACHE_SIZE_IN_BYTES", 0); n > 0 {
		// The reference's freecache holds a key until its unit ends;
		// floodgate's until the denial's own retry delay has passed.
		c.opts.OverLimitCache = decide.CacheOptions{MaxBytes: int64(n)}
	}

	// Behaviour.
	c.opts.ShadowMode = e.bool("SHADOW_MODE", false)
	c.opts.QuotaMode = e.bool("QUOTA_MODE", false)
	c.opts.DynamicMetadata = e.bool("RESPONSE_DYNAMIC_METADATA", false)
	if e.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		c.opts.PeerHeaders = &envoy.PeerHeaders{
			Limit:     e.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
			Remaining: e.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
			Reset:     e.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		}
	}
	if v, ok := lookup("NEAR_LIMIT_RATIO"); ok {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 1 {
			e.fail("NEAR_LIMIT_RATIO=%q is not a number in (0, 1]", v)
		}
		c.opts.NearLimitRatio = r
	}

	// TLS of the gRPC listener: tls.* in floodgate's config.
	var tls config.TLS
	if e.bool("GRPC_SERVER_USE_TLS", false) {
		tls.CertFile, tls.KeyFile = e.str("GRPC_SERVER_TLS_CERT", ""), e.str("GRPC_SERVER_TLS_KEY", "")
		tls.ClientCAFile = e.str("GRPC_CLIENT_TLS_CACERT", "")
		if tls.CertFile == "" || tls.KeyFile == "" {
			e.fail("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
		if e.str("GRPC_CLIENT_TLS_SAN", "") != "" {
			e.fail("GRPC_CLIENT_TLS_SAN is not supported yet: floodgate checks that client certificates chain to GRPC_CLIENT_TLS_CACERT, not their SAN")
		}
	}

	// Logs and metrics.
	level := strings.ToLower(e.str("LOG_LEVEL", "warn"))
	if level == "warning" {
		level = "warn"
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, level) {
		note("LOG_LEVEL=%q: floodgate logs at debug, info, warn or error; using warn", level)
		level = "warn"
	}
	format := strings.ToLower(e.str("LOG_FORMAT", "text"))
	if format != "json" {
		format = "text"
	}
	c.statsd = readStatsdEnv(e, note) // USE_STATSD, STATSD_*, STATS_FLUSH_INTERVAL, EXTRA_TAGS, DISABLE_STATS
	if e.bool("USE_PROMETHEUS", false) {
		c.metrics = e.str("PROMETHEUS_ADDR", ":9090")
		c.metricsP = e.str("PROMETHEUS_PATH", "/metrics")
		if e.str("PROMETHEUS_MAPPER_YAML", "") != "" {
			note("PROMETHEUS_MAPPER_YAML: not supported; the series are named as the peer's default mapping names them")
		}
	}
	if e.bool("TRACING_ENABLED", false) {
		note("TRACING_ENABLED: floodgate does not export traces")
	}

	// Unknown variables of the peer's families.
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(envoyVars, name) || slices.ContainsFunc(notEnvoy, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		for _, p := range envoyFamilies {
			if strings.HasPrefix(name, p) && !strings.HasPrefix(name, "FLOODGATE_") {
				note("%s is not a variable of envoyproxy/ratelimit: ignored (a typo?)", name)
				break
			}
		}
	}
	if len(e.errs) > 0 {
		return nil, fmt.Errorf("envoyproxy/ratelimit environment: %s", strings.Join(e.errs, "; "))
	}

	// floodgate's config, validated as a file would be.
	st := map[string]any{"type": store.Type, "addrs": store.Addrs, "tls": store.TLS}
	for k, v := range map[string]string{"master_name": store.MasterName, "username": store.Username, "password": store.Password,
		"sentinel_username": store.SentinelUsername, "sentinel_password": store.SentinelPassword, "key_prefix": store.KeyPrefix,
		"tls_cert_file": store.TLSCertFile, "tls_key_file": store.TLSKeyFile, "tls_ca_file": store.TLSCAFile} {
		if v != "" {
			st[k] = v
		}
	}
	if store.Timeout != 0 {
		st["timeout"] = store.Timeout.String()
	}
	if store.FlushDelay != 0 {
		st["flush_delay"] = store.FlushDelay.String()
	}
	raw := map[string]any{"listen": listen, "grpc_listen": grpcListen, "envoy_config": dir, "store": st,
		"log": map[string]string{"format": format, "level": level}}
	if tls != (config.TLS{}) {
		raw["tls"] = map[string]string{"cert_file": tls.CertFile, "key_file": tls.KeyFile, "client_ca_file": tls.ClientCAFile}
	}
	data, err := yaml.Marshal(raw)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse(data, "envoyproxy/ratelimit environment")
	if err != nil {
		return nil, err
	}
	c.cfg = cfg
	return c, nil
}

package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/redisstore"
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
	// rulesWhere names the variables that chose the rule files, and the
	// files they chose, for errors about loading them.
	rulesWhere string
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
	"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	"SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA", "MERGE_DOMAIN_CONFIG",
	"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID",
	"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// envoyUnused are the families of the peer's variables that only its
// memcache backend and its xDS rule source read: floodgate refuses those
// (BACKEND_TYPE, CONFIG_TYPE), so set beside Redis and files they change
// nothing, as for the peer, and are noted.
var envoyUnused = []struct{ prefix, why string }{
	{"MEMCACHE_", "BACKEND_TYPE is not memcache"},
	{"CONFIG_GRPC_XDS_", "CONFIG_TYPE is not GRPC_XDS_SOTW"},
	{"XDS_CLIENT_", "CONFIG_TYPE is not GRPC_XDS_SOTW"},
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

// port reads a port number, 0 to 65535.
func (e *envReader) port(name string, def int) int {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 65535 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a port: a whole number from 0 to 65535", name, v))
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
	listen := net.JoinHostPort(e.str("HOST", "0.0.0.0"), strconv.Itoa(e.port("PORT", 8080)))
	grpcListen := net.JoinHostPort(e.str("GRPC_HOST", "0.0.0.0"), strconv.Itoa(e.port("GRPC_PORT", 8081)))
	c.grpc.uds = e.str("GRPC_UDS", "")
	// 0 is no age limit, for the peer (gRPC's default) as here. Below
	// 10ns gRPC's ±10% jitter panics at the first connection, the peer's too.
	c.grpc.maxConnAge = e.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	if d := c.grpc.maxConnAge; d < 0 || d > 0 && d < 10*time.Nanosecond {
		what := "negative"
		if d > 0 {
			what = "under 10ns"
		}
		e.fail("GRPC_MAX_CONNECTION_AGE=%q is %s: gRPC cannot add its jitter to it, and envoyproxy/ratelimit crashes at its first gRPC connection; "+
			"set a duration such as 24h (the default), or 0 for no age limit", e.str("GRPC_MAX_CONNECTION_AGE", ""), what)
	}
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
	// RUNTIME_WATCH_ROOT=true (the peer's default): the files of root/sub
	// whose path there, / turned into dots, starts with "app."; false: every
	// file of root/sub/app. floodgate watches the files read either way.
	dir := filepath.Join(root, sub, app)
	switch watchRoot := e.bool("RUNTIME_WATCH_ROOT", true); {
	case app == "":
		e.fail("RUNTIME_APPDIRECTORY is empty: envoyproxy/ratelimit then reads no rule file; leave it unset (config) or name the rules' folder")
	case watchRoot && sub == "":
		e.fail("RUNTIME_WATCH_ROOT=true (the default) needs RUNTIME_SUBDIRECTORY: without it envoyproxy/ratelimit reads no rule file at all; set RUNTIME_SUBDIRECTORY, or RUNTIME_WATCH_ROOT=false to read %s", dir)
	case watchRoot:
		dir, c.load.Prefix = filepath.Join(root, sub), app
	}
	files := "the files under " + dir
	if c.load.Prefix != "" {
		files += " whose path there, / as dots, starts with " + c.load.Prefix + "."
	}
	c.rulesWhere = showVars([]string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT"}, e.lookup) + " (" + files + ")"
	c.load.DotFiles = !e.bool("RUNTIME_IGNOREDOTFILES", false)
	c.load.MergeDomains = e.bool("MERGE_DOMAIN_CONFIG", false)
	c.force = e.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	c.health = e.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	c.grpc.requireRulesHealth = c.health

	// Store.
	switch b := strings.ToLower(e.str("BACKEND_TYPE", "redis")); b {
	case "redis":
	default:
		e.fail("BACKEND_TYPE=%q is not supported: floodgate's shared store is Redis (standalone, Sentinel or Cluster)", b)
	}
	// The peer reads one set of TLS files, for both of its Redis, when
	// either has TLS; floodgate too (store.tls_* and store.per_second.tls_*).
	perSecond := e.bool("REDIS_PERSECOND", false)
	var tf redisTLSFiles
	if e.bool("REDIS_TLS", false) || e.bool("REDIS_PERSECOND_TLS", false) {
		tf = redisTLSFiles{cert: e.str("REDIS_TLS_CLIENT_CERT", ""), key: e.str("REDIS_TLS_CLIENT_KEY", ""), ca: e.str("REDIS_TLS_CACERT", ""),
			skipHostname: e.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)}
		if (tf.cert == "") != (tf.key == "") {
			e.fail("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together: set both for a client certificate, or neither")
		}
	} else {
		for _, v := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"} {
			if e.str(v, "") != "" {
				note("%s: ignored, as by the peer, because neither REDIS_TLS nor REDIS_PERSECOND_TLS is true", v)
			}
		}
	}
	store := redisFromEnv(e, note, "REDIS_", "/var/run/nutcracker/ratelimit.sock", tf)
	if perSecond {
		ps := redisFromEnv(e, note, "REDIS_PERSECOND_", "/var/run/nutcracker/ratelimitpersecond.sock", tf)
		store.PerSecond = &ps
	} else {
		for _, v := range []string{"REDIS_PERSECOND_URL", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_PIPELINE_WINDOW"} {
			if e.set(v) {
				note("%s: ignored, as by the peer, because REDIS_PERSECOND is not true", v)
			}
		}
	}
	store.KeyPrefix = e.str("CACHE_KEY_PREFIX", "")
	if store.PerSecond != nil {
		store.PerSecond.KeyPrefix = store.KeyPrefix
	}
	if e.set("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION") {
		note("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: not needed (health always asks the store, each Redis)")
	}
	if e.set("EXPIRATION_JITTER_MAX_SECONDS") {
		note("EXPIRATION_JITTER_MAX_SECONDS: not needed (floodgate's keys expire when their window ends)")
	}
	if e.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false) {
		note("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: always so in floodgate: a request over the limit counts nowhere")
	}
	// 0 is no cache, for the peer as here; the peer's freecache takes a
	// negative size for its smallest, 512 KiB. The reference's freecache
	// holds a key until its unit ends; floodgate's until the denial's own
	// retry delay has passed. decide checks the bound.
	if n := e.int("LOCAL_CACHE_SIZE_IN_BYTES", 0); n != 0 {
		cache := decide.CacheOptions{MaxBytes: int64(n)}
		var fe *fielderr.Error
		if err := cache.Validate(); errors.As(err, &fe) {
			e.fail("LOCAL_CACHE_SIZE_IN_BYTES=%q %s (envoyproxy/ratelimit would run its smallest over-limit cache, 512 KiB, with it); "+
				"set 0 (the default) for no over-limit cache, or its size in bytes, such as 1048576", e.str("LOCAL_CACHE_SIZE_IN_BYTES", ""), fe.Reason)
		} else if err != nil {
			e.fail("LOCAL_CACHE_SIZE_IN_BYTES=%q: %v", e.str("LOCAL_CACHE_SIZE_IN_BYTES", ""), err)
		} else {
			c.opts.OverLimitCache = cache
		}
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
	// The peer's levels are logrus's; floodgate's nearest take the others.
	rawLevel := e.str("LOG_LEVEL", "warn")
	level := strings.ToLower(rawLevel)
	switch level {
	case "debug", "info", "warn", "error":
	case "warning":
		level = "warn"
	case "trace":
		note("LOG_LEVEL=%s: floodgate's most detailed level is debug; logging at debug", rawLevel)
		level = "debug"
	case "fatal", "panic":
		note("LOG_LEVEL=%s: floodgate's least detailed level is error; logging at error (its errors, which the peer would not log)", rawLevel)
		level = "error"
	default:
		e.fail("LOG_LEVEL=%q is not a level of envoyproxy/ratelimit (trace, debug, info, warn, error, fatal or panic), which refuses to start with it too", rawLevel)
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
		if slices.Contains(envoyVars, name) {
			for _, u := range envoyUnused {
				if strings.HasPrefix(name, u.prefix) {
					note("%s: ignored, as by the peer, because %s", name, u.why)
				}
			}
			continue
		}
		if slices.ContainsFunc(notEnvoy, func(p string) bool { return strings.HasPrefix(name, p) }) {
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
		var errs []string // each once: a variable read twice (REDIS_TLS) fails once
		for _, m := range e.errs {
			if !slices.Contains(errs, m) {
				errs = append(errs, m)
			}
		}
		return nil, fmt.Errorf("envoyproxy/ratelimit environment: %s", strings.Join(errs, "; "))
	}

	// floodgate's config, validated as a file would be.
	st := storeYAML(store)
	if store.PerSecond != nil {
		st["per_second"] = storeYAML(*store.PerSecond)
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
		return nil, envoyConfigError(err, lookup)
	}
	c.cfg = cfg
	return c, nil
}

// redisTLSFiles are the peer's TLS settings for its Redis, shared by the
// main and the per-second one (REDIS_TLS_*).
type redisTLSFiles struct {
	cert, key, ca string
	skipHostname  bool
}

// redisFromEnv reads one of the peer's Redis settings, those of the
// variables starting with prefix (REDIS_, or REDIS_PERSECOND_ for the
// per-second Redis), into a store section; defURL is the peer's default
// address. Errors and notes go to e and note.
func redisFromEnv(e *envReader, note func(string, ...any), prefix, defURL string, tf redisTLSFiles) config.Store {
	store := config.Store{}
	var creds, sentinelCreds redisURLCreds // of redis:// URLs
	v := func(name string) string { return prefix + name }
	url := e.str(v("URL"), defURL)
	socketType := strings.ToLower(e.str(v("SOCKET_TYPE"), "unix"))
	switch t := strings.ToLower(e.str(v("TYPE"), "single")); t {
	case "single":
		store.Type = config.StoreRedis
		switch socketType {
		case "tcp":
			// redisstore (through config.Parse) checks the address; a
			// path is a unix socket there, but not with the peer's tcp.
			if strings.HasPrefix(url, "/") {
				e.fail("%s=%q: with %s=tcp it is host:port, such as redis:6379; for a unix socket set %s=unix", v("URL"), url, v("SOCKET_TYPE"), v("SOCKET_TYPE"))
			}
			store.Addrs, creds = parseRedisAddrs(e, v("URL"), url, []string{url})
		case "unix":
			// The peer's default: a socket, often a twemproxy sidecar's,
			// which cannot run floodgate's scripts (docs/ENVOY.md).
			if !strings.HasPrefix(url, "/") {
				e.fail("%s=%q: with %s=unix (the peer's default) it is the absolute path of Redis's unix socket; for host:port set %s=tcp", v("URL"), maskRedisURL(url), v("SOCKET_TYPE"), v("SOCKET_TYPE"))
			}
			store.Addrs = []string{url}
		default:
			e.fail("%s=%q is not unix or tcp", v("SOCKET_TYPE"), socketType)
		}
	case "cluster", "sentinel":
		// The peer dials the nodes of a cluster and the sentinels over TCP,
		// whatever the socket type.
		if e.set(v("SOCKET_TYPE")) && socketType != "tcp" {
			note("%s=%s: ignored, as by the peer, with %s=%s (its nodes are reached over TCP)", v("SOCKET_TYPE"), socketType, v("TYPE"), t)
		}
		parts := strings.Split(url, ",")
		if t == "cluster" {
			store.Type = config.StoreRedisCluster
			store.Addrs, creds = parseRedisAddrs(e, v("URL"), url, parts)
		} else if len(parts) < 2 || strings.TrimSpace(parts[0]) == "" || strings.Contains(parts[0], "://") {
			e.fail("%s=%q: with %s=sentinel it is <master name>,<sentinel1>,...", v("URL"), maskRedisURL(url), v("TYPE"))
		} else {
			// The URLs are the sentinels': for the peer their credentials
			// authenticate to the sentinels (radix's sentinel dialer).
			store.Type, store.MasterName = config.StoreRedisSentinel, parts[0]
			store.Addrs, sentinelCreds = parseRedisAddrs(e, v("URL"), url, parts[1:])
		}
	default:
		e.fail("%s=%q is not single, sentinel or cluster", v("TYPE"), t)
	}
	// As radix does, the AUTH variables win over the URLs' credentials,
	// the user and the password each.
	if auth := e.str(v("AUTH"), ""); auth != "" {
		store.Username, store.Password = splitAuth(auth)
	}
	store.Username, store.Password = cmp.Or(store.Username, creds.user), cmp.Or(store.Password, creds.pass)
	switch {
	case creds.db == 0:
	case store.Type == config.StoreRedisCluster:
		e.fail("%s=%q: a cluster has only database 0, not %d: remove the /%d", v("URL"), maskRedisURL(url), creds.db, creds.db)
	default:
		store.DB = creds.db
	}
	if sentinelCreds.db != 0 {
		e.fail("%s=%q: the database %d of a sentinel's URL is not the primary's: the peer sends its SELECT to the sentinel, which has none; remove the /%d",
			v("URL"), maskRedisURL(url), sentinelCreds.db, sentinelCreds.db)
	}
	store.TLS = e.bool(v("TLS"), false)
	if store.TLS {
		store.TLSCertFile, store.TLSKeyFile, store.TLSCAFile = tf.cert, tf.key, tf.ca
		store.TLSSkipHostnameVerification = tf.skipHostname
	}
	if auth := e.str(v("SENTINEL_AUTH"), ""); auth != "" {
		if store.Type != config.StoreRedisSentinel {
			note("%s: ignored, as by the peer, because %s is not sentinel", v("SENTINEL_AUTH"), v("TYPE"))
		} else {
			store.SentinelUsername, store.SentinelPassword = splitAuth(auth)
		}
	}
	if store.Type == config.StoreRedisSentinel {
		store.SentinelUsername = cmp.Or(store.SentinelUsername, sentinelCreds.user)
		store.SentinelPassword = cmp.Or(store.SentinelPassword, sentinelCreds.pass)
	}
	// The peer's timeout bounds connecting to Redis (radix's dialer); 0 or
	// less means none, and its calls have no deadline of their own. Each
	// floodgate store call always has one, the timeout.
	if raw, ok := e.lookup(v("TIMEOUT")); ok {
		store.Timeout = e.duration(v("TIMEOUT"), 0)
		if _, err := time.ParseDuration(raw); err == nil && store.Timeout <= 0 {
			note("%s=%s: for the peer no timeout at all (it connects and waits for Redis without a deadline); every floodgate store call has one, "+
				"so floodgate's own %s applies: a Redis slower than that is an outage, answered by the rules' failure mode. Set %s to a duration "+
				"from 1ms to 1m to choose it", v("TIMEOUT"), raw, redisstore.DefaultTimeout, v("TIMEOUT"))
			store.Timeout = 0
		}
	} else {
		note("%s: unset, so floodgate's own store timeout applies (%s), not the peer's 10s", v("TIMEOUT"), redisstore.DefaultTimeout)
	}
	if w := e.duration(v("PIPELINE_WINDOW"), 0); w > 0 {
		store.FlushDelay = min(w, time.Millisecond)
		if w > time.Millisecond {
			note("%s=%s: floodgate gathers calls for at most 1ms", v("PIPELINE_WINDOW"), w)
		}
	}
	for _, name := range []string{v("POOL_SIZE"), v("PIPELINE_LIMIT"), v("POOL_ON_EMPTY_BEHAVIOR")} {
		if e.set(name) {
			note("%s: not needed (floodgate multiplexes every call on one pipelined connection per node)", name)
		}
	}
	return store
}

// splitAuth splits the peer's "user:password" (or "password") credentials.
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// storeYAML is a store section as floodgate's YAML writes it, for
// config.Parse to validate as it validates a file.
func storeYAML(store config.Store) map[string]any {
	st := map[string]any{"type": store.Type, "addrs": store.Addrs, "tls": store.TLS}
	for k, v := range map[string]string{"master_name": store.MasterName, "username": store.Username, "password": store.Password,
		"sentinel_username": store.SentinelUsername, "sentinel_password": store.SentinelPassword, "key_prefix": store.KeyPrefix,
		"tls_cert_file": store.TLSCertFile, "tls_key_file": store.TLSKeyFile, "tls_ca_file": store.TLSCAFile} {
		if v != "" {
			st[k] = v
		}
	}
	if store.TLSSkipHostnameVerification {
		st["tls_skip_hostname_verification"] = true
	}
	if store.Timeout != 0 {
		st["timeout"] = store.Timeout.String()
	}
	if store.FlushDelay != 0 {
		st["flush_delay"] = store.FlushDelay.String()
	}
	if store.DB != 0 {
		st["db"] = store.DB
	}
	return st
}

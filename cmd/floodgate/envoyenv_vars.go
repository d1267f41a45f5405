package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

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

// noteUnknown notes each variable of environ that the peer reads only for
// a backend or rule source floodgate refuses, and each of the peer's
// families that the peer does not define (a typo?).
func noteUnknown(e *envReader, environ []string) {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(envoyVars, name) {
			for _, u := range envoyUnused {
				if strings.HasPrefix(name, u.prefix) {
					e.note("%s: ignored, as by the peer, because %s", name, u.why)
				}
			}
			continue
		}
		if slices.ContainsFunc(notEnvoy, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		for _, p := range envoyFamilies {
			if strings.HasPrefix(name, p) && !strings.HasPrefix(name, "FLOODGATE_") {
				e.note("%s is not a variable of envoyproxy/ratelimit: ignored (a typo?)", name)
				break
			}
		}
	}
}

// envReader reads variables, collecting the errors, each naming its
// variable, its value and what it must be, and the notes for the
// start-up log.
type envReader struct {
	lookup func(string) (string, bool)
	errs   []string
	notes  []string
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
		e.fail("%s=%q is not a boolean (true or false)", name, v)
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
		e.fail("%s=%q is not a whole number", name, v)
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
		e.fail("%s=%q is not a port: a whole number from 0 to 65535", name, v)
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
		e.fail("%s=%q is not a duration (such as 10s or 1h)", name, v)
	}
	return d
}

// fail reports an error; one already reported (a variable read twice,
// such as REDIS_TLS) is not repeated.
func (e *envReader) fail(format string, args ...any) {
	if m := fmt.Sprintf(format, args...); !slices.Contains(e.errs, m) {
		e.errs = append(e.errs, m)
	}
}

// refuse reports a value a typed validator refused: the variables that
// set it with their values (showVars), the value as the validator shows
// it (if any), and why.
func (e *envReader) refuse(vars []string, value, reason string) {
	if value != "" {
		reason = value + " " + reason
	}
	e.fail("%s: %s", showVars(vars, e.lookup), reason)
}

// note records a setting floodgate honours otherwise than the peer.
func (e *envReader) note(format string, args ...any) {
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

// err returns the errors reported, nil if none.
func (e *envReader) err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("envoyproxy/ratelimit environment: %s", strings.Join(e.errs, "; "))
}

// secretVars are the variables whose values are never shown; urlVars those
// whose values are shown with their credentials masked (maskRedisURL).
var (
	secretVars = []string{"REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH"}
	urlVars    = []string{"REDIS_URL", "REDIS_PERSECOND_URL"}
)

// showVars writes the variables as NAME="value" (those set), or, when none
// is, names the first one unset, its default applying.
func showVars(vars []string, lookup func(string) (string, bool)) string {
	var set []string
	for _, v := range vars {
		if val, ok := lookup(v); ok {
			set = append(set, showVar(v, val))
		}
	}
	if len(set) == 0 {
		return vars[0] + " (unset, the peer's default)"
	}
	return strings.Join(set, ", ")
}

// showVar is one variable and its value as errors show it: credentials
// never.
func showVar(name, val string) string {
	switch {
	case slices.Contains(secretVars, name):
		return name + " (its value not shown)"
	case slices.Contains(urlVars, name):
		return name + "=" + strconv.Quote(maskRedisURL(val))
	}
	return name + "=" + strconv.Quote(val)
}

// envoyListeners are serve's listeners under --envoy-env, named by the
// peer's variables that set them, with fixes that work there: the
// environment has no setting for tokens, so requiring them means running
// with a config file instead.
func envoyListeners(listen, grpcListen string) ([]exposable, string) {
	listeners := []exposable{
		{"HOST/PORT", listen, "set HOST=127.0.0.1"},
		{"GRPC_HOST/GRPC_PORT", grpcListen, "set GRPC_HOST=127.0.0.1, or GRPC_UDS to a unix socket's path for an Envoy on this machine"},
	}
	return listeners, "run floodgate serve --config FILE with auth.tokens_file instead of --envoy-env, which has no setting for tokens " +
		"(and give Envoy the decide token in its gRPC service's initial_metadata)"
}

package main

import (
	"cmp"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
)

// envoyCompat is what envoyproxy/ratelimit's environment variables configure,
// mapped onto floodgate's types: `floodgate serve --envoy-env` (or the binary
// run as "ratelimit", the peer's name) reads them instead of a config file,
// so the peer's Kubernetes manifest runs floodgate with only the image
// changed. These envoyenv files are the one place that knows the peer's
// variables.
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

// envoyEnvSource is the config's Source under --envoy-env.
const envoyEnvSource = "envoyproxy/ratelimit environment"

// readEnvoyEnv maps the peer's environment (lookup, and environ to find
// unknown variables) onto floodgate's settings. Defaults are the peer's.
// Settings floodgate cannot honour in a way that changes decisions are
// errors (the process must not start pretending); the others are notes.
// Every error names the variables behind it.
func readEnvoyEnv(lookup func(string) (string, bool), environ []string) (*envoyCompat, error) {
	e := &envReader{lookup: lookup}
	c := &envoyCompat{cfg: &config.Config{Source: envoyEnvSource}}
	c.readListeners(e)
	c.readRules(e)
	c.cfg.Store = readStore(e)
	c.readOptions(e)
	c.cfg.TLS = readGRPCTLS(e)
	c.readLogs(e)
	c.statsd = readStatsdEnv(e, e.note) // USE_STATSD, STATSD_*, STATS_FLUSH_INTERVAL, EXTRA_TAGS, DISABLE_STATS
	c.readMetrics(e)
	noteUnknown(e, environ)
	if err := e.err(); err != nil {
		return nil, err
	}
	// The rules of floodgate's own config, on values each read cleanly (a
	// value refused above is not refused twice).
	checkListeners(e, c.cfg.Listen, c.cfg.GRPCListen)
	checkStore(e, "REDIS_", c.cfg.Store)
	if ps := c.cfg.Store.PerSecond; ps != nil {
		checkStore(e, "REDIS_PERSECOND_", *ps)
	}
	checkGRPCTLS(e, c.cfg.TLS)
	if err := e.err(); err != nil {
		return nil, err
	}
	c.notes = e.notes
	return c, nil
}

// readListeners reads the addresses: the peer's HTTP port serves /json,
// /healthcheck (and, here, floodgate's API and /metrics); its gRPC port
// the RLS service.
func (c *envoyCompat) readListeners(e *envReader) {
	c.cfg.Listen = net.JoinHostPort(e.str("HOST", "0.0.0.0"), strconv.Itoa(e.port("PORT", 8080)))
	c.cfg.GRPCListen = net.JoinHostPort(e.str("GRPC_HOST", "0.0.0.0"), strconv.Itoa(e.port("GRPC_PORT", 8081)))
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
		e.note("DEBUG_HOST/DEBUG_PORT: there is no debug listener; floodgate's /metrics and health are on the HTTP listener %s", c.cfg.Listen)
	}
}

// readRules reads where the rule files are: the peer's runtime folder.
func (c *envoyCompat) readRules(e *envReader) {
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
	c.cfg.EnvoyConfig = dir
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
}

// readOptions reads the service's behaviour: the modes, the headers, the
// near-limit ratio and the over-limit cache.
func (c *envoyCompat) readOptions(e *envReader) {
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
	if v, ok := e.lookup("NEAR_LIMIT_RATIO"); ok {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 1 {
			e.fail("NEAR_LIMIT_RATIO=%q is not a number in (0, 1]", v)
		}
		c.opts.NearLimitRatio = r
	}
	c.opts.OverLimitCache = readLocalCache(e)
}

// readLocalCache reads LOCAL_CACHE_SIZE_IN_BYTES, checked by decide. 0 is
// no cache, for the peer as here; the peer's freecache takes a negative
// size for its smallest, 512 KiB. The peer's cache holds a key until its
// unit ends; floodgate's until the denial's own retry delay has passed.
func readLocalCache(e *envReader) decide.CacheOptions {
	const name = "LOCAL_CACHE_SIZE_IN_BYTES"
	n := e.int(name, 0)
	if n == 0 {
		return decide.CacheOptions{}
	}
	cache := decide.CacheOptions{MaxBytes: int64(n)}
	var fe *fielderr.Error
	switch err := cache.Validate(); {
	case errors.As(err, &fe):
		e.fail("%s=%q %s (envoyproxy/ratelimit would run its smallest over-limit cache, 512 KiB, with it); "+
			"set 0 (the default) for no over-limit cache, or its size in bytes, such as 1048576", name, e.str(name, ""), fe.Reason)
	case err != nil:
		e.fail("%s=%q: %v", name, e.str(name, ""), err)
	default:
		return cache
	}
	return decide.CacheOptions{}
}

// readGRPCTLS reads the gRPC listener's TLS (GRPC_SERVER_USE_TLS); the
// peer's HTTP port stays plain.
func readGRPCTLS(e *envReader) config.TLS {
	var tls config.TLS
	if !e.bool("GRPC_SERVER_USE_TLS", false) {
		return tls
	}
	tls.CertFile, tls.KeyFile = e.str("GRPC_SERVER_TLS_CERT", ""), e.str("GRPC_SERVER_TLS_KEY", "")
	tls.ClientCAFile = e.str("GRPC_CLIENT_TLS_CACERT", "")
	if tls.CertFile == "" || tls.KeyFile == "" {
		e.fail("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	if e.str("GRPC_CLIENT_TLS_SAN", "") != "" {
		e.fail("GRPC_CLIENT_TLS_SAN is not supported yet: floodgate checks that client certificates chain to GRPC_CLIENT_TLS_CACERT, not their SAN")
	}
	return tls
}

// readLogs reads the log's level and format. The peer's levels are
// logrus's; floodgate's nearest take the others.
func (c *envoyCompat) readLogs(e *envReader) {
	raw := e.str("LOG_LEVEL", "warn")
	level := strings.ToLower(raw)
	switch level {
	case "debug", "info", "warn", "error":
	case "warning":
		level = "warn"
	case "trace":
		e.note("LOG_LEVEL=%s: floodgate's most detailed level is debug; logging at debug", raw)
		level = "debug"
	case "fatal", "panic":
		e.note("LOG_LEVEL=%s: floodgate's least detailed level is error; logging at error (its errors, which the peer would not log)", raw)
		level = "error"
	default:
		e.fail("LOG_LEVEL=%q is not a level of envoyproxy/ratelimit (trace, debug, info, warn, error, fatal or panic), which refuses to start with it too", raw)
	}
	format := strings.ToLower(e.str("LOG_FORMAT", "text"))
	if format != "json" {
		format = "text"
	}
	c.cfg.Log = config.Log{Format: format, Level: level}
}

// readMetrics reads USE_PROMETHEUS's listener, and notes tracing.
func (c *envoyCompat) readMetrics(e *envReader) {
	if e.bool("USE_PROMETHEUS", false) {
		c.metrics = e.str("PROMETHEUS_ADDR", ":9090")
		c.metricsP = e.str("PROMETHEUS_PATH", "/metrics")
		if e.str("PROMETHEUS_MAPPER_YAML", "") != "" {
			e.note("PROMETHEUS_MAPPER_YAML: not supported; the series are named as the peer's default mapping names them")
		}
	}
	if e.bool("TRACING_ENABLED", false) {
		e.note("TRACING_ENABLED: floodgate does not export traces")
	}
}

// checkListeners checks the HTTP and gRPC addresses as serve will listen
// on them (config.CheckListen), and that they do not take one port.
func checkListeners(e *envReader, listen, grpcListen string) {
	httpVars, grpcVars := []string{"HOST", "PORT"}, []string{"GRPC_HOST", "GRPC_PORT"}
	if err := config.CheckListen(listen); err != nil {
		e.refuse(httpVars, listen, err.Error())
	}
	if err := config.CheckListen(grpcListen); err != nil {
		e.refuse(grpcVars, grpcListen, err.Error())
	}
	if why := config.ListenClash(listen, grpcListen); why != "" {
		e.refuse(append(httpVars, grpcVars...), "GRPC_HOST/GRPC_PORT's "+grpcListen,
			why+" as HOST/PORT's "+listen+"; give GRPC_PORT (default 8081) and PORT (default 8080) different ports")
	}
}

// grpcTLSVars are the variables of the gRPC listener's TLS files, by the
// keys tlsfiles names them with.
var grpcTLSVars = map[string]string{
	"tls.cert_file": "GRPC_SERVER_TLS_CERT", "tls.key_file": "GRPC_SERVER_TLS_KEY", "tls.client_ca_file": "GRPC_CLIENT_TLS_CACERT",
}

// checkGRPCTLS reads the gRPC listener's TLS files now (config.TLS.Server),
// as for a config file, naming the variable of a file that cannot be used.
func checkGRPCTLS(e *envReader, t config.TLS) {
	if !t.Enabled() {
		return
	}
	_, err := t.Server()
	var fe *tlsfiles.FileError
	switch {
	case errors.As(err, &fe):
		e.refuse([]string{cmp.Or(grpcTLSVars[fe.Key], "GRPC_SERVER_USE_TLS")}, fe.File, fe.Err.Error())
	case err != nil:
		e.fail("GRPC_SERVER_USE_TLS=true: %v", err)
	}
}

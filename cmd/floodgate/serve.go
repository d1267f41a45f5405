package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// shutdownGrace bounds how long SIGTERM waits for requests in flight.
const shutdownGrace = 10 * time.Second

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [--config FILE] [--listen ADDR] [--grpc-listen ADDR] [--envoy-config DIR] [--store-api] [--log-format text|json]", stderr)
	cfgPath := fs.String("config", "", "YAML config `file`; none runs the built-in example policy on the memory store")
	listen := fs.String("listen", "", "HTTP listen `address`, overriding the config's listen (default "+config.DefaultListen+")")
	logFormat := fs.String("log-format", "", "log format, text or json, overriding the config's log.format")
	grpcListen := fs.String("grpc-listen", "", "Envoy rate-limit gRPC listen `address`, overriding the config's grpc_listen (default "+config.DefaultGRPCListen+"); given alone, serves with no rules")
	storeAPI := fs.Bool("store-api", false, "serve the store API (POST /v1/store/...) for remote stores (package remotestore); off by default: whoever can call it can spend or reset any key in its namespace")
	storeAPIClientClock := fs.Bool("store-api-client-clock", false, "with --store-api: decide store API calls at the time each client sends, one call at a time (for tests and simulations only)")
	envoyConfig := fs.String("envoy-config", "", "`folder` of envoyproxy/ratelimit rule files, overriding the config's envoy_config; starts the gRPC service")
	pprofListen := fs.String("pprof-listen", "", "serve Go's runtime profiles (/debug/pprof/) on this loopback `address`, for profiling; off by default")
	envoyEnv := fs.Bool("envoy-env", false, "configure from envoyproxy/ratelimit's environment variables (REDIS_URL, RUNTIME_ROOT, ...) instead of --config: a drop-in for its image")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	starting.Store(true)
	defer starting.Store(false)
	over := serveOverrides{listen: *listen, grpcListen: *grpcListen, envoyConfig: *envoyConfig, logFormat: *logFormat, storeAPI: *storeAPI}
	var (
		plan   *servePlan
		compat *envoyCompat
		err    error
	)
	if *envoyEnv {
		if *cfgPath != "" {
			return fmt.Errorf("--envoy-env and --config exclude each other: the environment is the configuration")
		}
		if compat, err = readEnvoyEnv(os.LookupEnv, os.Environ()); err != nil {
			return err
		}
		plan, err = planConfig(compat.cfg, over, compat)
	} else {
		plan, err = planServe(*cfgPath, over)
	}
	if err != nil {
		return err
	}
	cfg, policy := plan.cfg, plan.policy
	logger, level, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	for _, w := range plan.warnings {
		logger.Warn(w)
	}
	tracer, stopTracing, err := newTracing(ctx, os.Getenv)
	if err != nil {
		return err
	}
	if tracer != nil {
		logOtelErrors(logger)
		logger.Info("tracing on", "exporter", os.Getenv(tracesExporterVar))
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownGrace)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			logger.Warn("flushing the last spans failed", "err", err)
		}
	}()
	if *pprofListen != "" {
		_, stop, err := startPprof(*pprofListen, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	var storeOpts *server.StoreAPI
	var clock floodgate.Clock
	switch {
	case *storeAPIClientClock && !*storeAPI:
		return errors.New("--store-api-client-clock needs --store-api")
	case *storeAPIClientClock:
		manual := clocktest.NewManual(time.Now())
		storeOpts, clock = &server.StoreAPI{Clock: manual}, manual
	case *storeAPI:
		storeOpts = &server.StoreAPI{}
	}
	tokens, err := cfg.Auth.Tokens()
	if err != nil {
		return err
	}
	tlsSrv, err := cfg.TLS.Server()
	if err != nil {
		return err
	}
	// The HTTP API shares the listeners' TLS, but under --envoy-env the
	// peer's GRPC_SERVER_USE_TLS covers its gRPC listener alone: its HTTP
	// port (/healthcheck, /json) stays plain, as probes copied from a peer
	// deployment expect.
	httpTLS := tlsSrv
	if compat != nil {
		httpTLS = nil
	}
	store, closeStore, err := openStoreFor(cfg.Store, clock, logger)
	if err != nil {
		return err
	}
	defer closeStore()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go keepHeapFloor(ctx, os.Getenv, heapFloor, time.Second)
	for _, n := range compatNotes(compat) {
		logger.Warn("envoyproxy/ratelimit environment: " + n)
	}
	reg := prometheus.NewRegistry()
	// The process's own series, as every Prometheus-instrumented Go server
	// has them (go_*, process_*): read at each scrape, never per request.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if m, ok := store.(*memory.Store); ok {
		if err := serveMemory(ctx, m, reg); err != nil {
			return err
		}
	}
	connErr, err := newConnErrors(reg, logger)
	if err != nil {
		return err
	}
	sec := newSecrets(cfg.Auth, tlsSrv, tokens, logger)
	rls, err := startRLS(plan, store, logger, reg, compat, rlsNet{tls: tlsSrv, tokens: sec.current, maxConns: cfg.MaxConnectionsValue(), connErr: connErr, maxInFlight: cfg.MaxInFlight, tracer: tracer})
	if err != nil {
		return err
	}
	defer rls.stop()
	srv, err := server.New(store, policy, server.Options{Logger: logger, Registry: reg, Routes: rls.routes(), Probes: rls.probes(),
		MaxInFlight: cfg.MaxInFlight, Tokens: tokens, OverLimitCache: cfg.OverLimitCache(), StoreAPI: storeOpts, TracerProvider: tracer})
	if err != nil {
		return err
	}
	sec.serve(srv)
	go sec.watch(ctx)
	ln, err := listenCapped("listen", cfg.Listen, cfg.MaxConnectionsValue(), reg)
	if err != nil {
		return err
	}
	api := srv.Handler()
	var ops *http.Server
	var opsLn net.Listener
	if cfg.MetricsListen != "" {
		api = srv.APIHandler()
		cl, err := listenCapped("metrics_listen", cfg.MetricsListen, cfg.MaxConnectionsValue(), reg)
		if err != nil {
			_ = ln.Close()
			return err
		}
		opsLn, ops = cl, newHTTPServer(srv.OpsHandler(), cl, nil, connErr.httpLog("metrics_listen"))
	}
	httpServer := newHTTPServer(api, ln, httpTLS, connErr.httpLog("listen"))
	// Catch SIGHUP before the banner says we are up, so a reload signalled
	// right after it is never lost (or fatal).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	exposed, authFix := configListeners(ln.Addr().String(), rls.address())
	if compat != nil {
		exposed, authFix = envoyListeners(ln.Addr().String(), rls.address())
	}
	warnExposed(stderr, logger, tokens != nil, exposed, authFix)
	printBanner(stdout, cfg, policy, scheme(httpTLS)+"://"+ln.Addr().String(), func(w io.Writer) {
		rls.banner(w)
		if ops != nil {
			fmt.Fprintf(w, "metrics and probes on http://%s (/metrics, /healthz, /readyz; no token)\n", opsLn.Addr())
		}
		if storeOpts != nil {
			fmt.Fprintf(w, "store API on POST /v1/store/{allow,batch,refund,reset}, keys under %q\n", server.DefaultStoreNamespace)
		}
		if tokens != nil {
			fmt.Fprintf(w, "authentication on: %d tokens (%s); send Authorization: Bearer TOKEN\n", tokens.Len(), strings.Join(tokens.Names(), ", "))
		}
	})
	logger.Info("serving", "listen", ln.Addr().String(), "tls", httpTLS != nil, "mtls", httpTLS != nil && httpTLS.MutualTLS(),
		"auth", tokens != nil, "store", cfg.Store.String(), "rules", len(policy.Rules), "config", cfg.Source)

	starting.Store(false) // from here a signal shuts down gracefully
	served := make(chan error, 2)
	go func() { served <- serveHTTP(httpServer, ln) }()
	if ops != nil {
		go func() { served <- ops.Serve(opsLn) }()
	}

	for {
		select {
		case err := <-served:
			return fmt.Errorf("http server: %w", err)
		case <-hup:
			if next := reload(srv, rls, *cfgPath, cfg, over, logger, level); next != nil {
				cfg = next
			}
			sec.reload(cfg.Auth)
		case <-ctx.Done():
			logger.Info("shutting down: finishing requests in flight", "grace", shutdownGrace)
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if ops != nil {
				_ = ops.Shutdown(sctx)
			}
			if err := httpServer.Shutdown(sctx); err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			if err := srv.Close(sctx); err != nil {
				logger.Warn("giving back the leases' unspent quota did not finish", "err", err)
			}
			logger.Info("stopped")
			return nil
		}
	}
}

// reload re-reads the config file (and the Envoy rule folder, if the
// Envoy service runs with one) on SIGHUP, and returns the config as in
// force once the server runs its policy. A bad file keeps the running
// config, logs why and returns nil. Each attempt is counted once in
// floodgate_config_reloads_total, as ok only if every part reloaded. The
// log level applies at once; what a reload cannot apply is logged as
// taking effect on restart only.
func reload(srv *server.Server, rls *rlsServer, path string, running *config.Config, over serveOverrides, logger *slog.Logger, level *slog.LevelVar) *config.Config {
	rulesOK := rls.reload()
	if path == "" {
		logger.Warn("SIGHUP: no --config file to reload; running the built-in policy")
		srv.CountReload(rulesOK)
		return nil
	}
	cfg, err := config.Load(path)
	var policy server.Policy
	if err == nil {
		policy, err = cfg.Policy()
	}
	if err == nil {
		err = srv.Reload(policy)
	}
	if err != nil {
		srv.CountReload(false)
		logger.Error("reload failed; keeping the running config", "config", path, "err", err)
		return nil
	}
	srv.CountReload(rulesOK)
	over.apply(cfg)
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}
	if cfg.Log.Level != running.Log.Level {
		// Said before it applies, so that it shows when the level rises.
		logger.Info("log level changed", "from", running.Log.Level, "to", cfg.Log.Level)
		_ = level.UnmarshalText([]byte(cfg.Log.Level)) // validated by config.Load
	}
	logger.Info("config reloaded", "config", path, "rules", len(policy.Rules))
	if changed := restartSettings(running, cfg); len(changed) > 0 {
		logger.Warn("settings changed that take effect on restart only", "changed", strings.Join(changed, ","))
	}
	return cfg
}

// storeChanged reports whether any store setting differs, every key of the
// section (and of store.per_second) and the passwords that environment
// variables hold: the store is opened once, at start.
func storeChanged(a, b config.Store) bool {
	if !reflect.DeepEqual(a, b) || a.PasswordValue() != b.PasswordValue() || a.SentinelPasswordValue() != b.SentinelPasswordValue() {
		return true
	}
	if a.PerSecond != nil && b.PerSecond != nil {
		return storeChanged(*a.PerSecond, *b.PerSecond)
	}
	return false
}

// restartSettings lists the settings a reload cannot apply that differ
// between the config in force and the next one (both with serve's flags
// applied, so a flag never counts as a change).
func restartSettings(running, next *config.Config) []string {
	var changed []string
	if storeChanged(running.Store, next.Store) {
		changed = append(changed, "store")
	}
	if running.TLS != next.TLS {
		changed = append(changed, "tls")
	}
	if running.MaxConnections != next.MaxConnections || running.MaxInFlight != next.MaxInFlight {
		changed = append(changed, "max_connections/max_in_flight")
	}
	for _, f := range []struct {
		name string
		a, b string
	}{
		{"listen", running.Listen, next.Listen},
		{"metrics_listen", running.MetricsListen, next.MetricsListen},
		{"grpc_listen", running.GRPCListen, next.GRPCListen},
		{"envoy_config", running.EnvoyConfig, next.EnvoyConfig},
		{"log.format", running.Log.Format, next.Log.Format},
	} {
		if f.a != f.b {
			changed = append(changed, f.name)
		}
	}
	return changed
}

// compatNotes returns what the environment asked that floodgate does
// otherwise, for the start-up log.
func compatNotes(c *envoyCompat) []string {
	if c == nil {
		return nil
	}
	return c.notes
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

// newLogger returns the logger c describes, with the level variable a
// reload sets.
func newLogger(c config.Log, w io.Writer) (*slog.Logger, *slog.LevelVar, error) {
	level := new(slog.LevelVar)
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.Format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), level, nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), level, nil
	}
	return nil, nil, fmt.Errorf("log.format: %q is not text or json", c.Format)
}

// printBanner prints what serve serves; extra prints more lines before the
// last, the "try:" line.
func printBanner(w io.Writer, cfg *config.Config, policy server.Policy, url string, extra func(io.Writer)) {
	fmt.Fprintf(w, "floodgate listening on %s (store: %s; config: %s)\n", url, cfg.Store.String(), cfg.Source)
	fmt.Fprintln(w, "active rules:")
	first := "RULE"
	for i, r := range policy.Rules {
		if i == 0 {
			first = r.Name
		}
		mode := "fail-" + r.Failure.String()
		if r.Shadow {
			mode += ", shadow"
		}
		fmt.Fprintf(w, "  %-16s %s [%s]\n", r.Name, r.Limit, mode)
	}
	extra(w)
	auth := ""
	if cfg.Auth.Enabled() {
		auth = " -H 'Authorization: Bearer TOKEN'"
	}
	fmt.Fprintf(w, "try: curl -s -X POST %s/v1/check%s -H 'Content-Type: application/json' -d '{\"rule\":\"%s\",\"key\":\"user-42\"}'\n", url, auth, first)
}

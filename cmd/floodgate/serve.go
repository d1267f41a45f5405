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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/config"
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
	envoyEnv := fs.Bool("envoy-env", false, "configure from envoyproxy/ratelimit's environment variables (REDIS_URL, RUNTIME_ROOT, ...) instead of --config: a drop-in for its image")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	over := serveOverrides{listen: *listen, grpcListen: *grpcListen, envoyConfig: *envoyConfig, logFormat: *logFormat}
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
	store, closeStore, err := openStoreFor(cfg.Store, clock, logger)
	if err != nil {
		return err
	}
	defer closeStore()

	for _, n := range compatNotes(compat) {
		logger.Warn("envoyproxy/ratelimit environment: " + n)
	}
	reg := prometheus.NewRegistry()
	for _, n := range compatNotes(compat) {
		logger.Warn("envoyproxy/ratelimit environment: " + n)
	}
	rls, err := startRLS(plan, store, logger, reg, compat)
	if err != nil {
		return err
	}
	defer rls.stop()
	srv, err := server.New(store, policy, server.Options{Logger: logger, Registry: reg, Routes: rls.routes(),
		OverLimitCache: cfg.OverLimitCache(), StoreAPI: storeOpts})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	httpServer := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	// Catch SIGHUP before the banner says we are up, so a reload signalled
	// right after it is never lost (or fatal).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	printBanner(stdout, cfg, policy, ln.Addr().String())
	if storeOpts != nil {
		fmt.Fprintf(stdout, "store API on POST /v1/store/{allow,batch,refund,reset}, keys under %q\n", server.DefaultStoreNamespace)
	}
	rls.banner(stdout)
	logger.Info("serving", "listen", ln.Addr().String(), "store", cfg.Store.String(), "rules", len(policy.Rules), "config", cfg.Source)

	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(ln) }()

	for {
		select {
		case err := <-served:
			return fmt.Errorf("http server: %w", err)
		case <-hup:
			if next := reload(srv, rls, *cfgPath, cfg, over, logger, level); next != nil {
				cfg = next
			}
		case <-ctx.Done():
			logger.Info("shutting down: finishing requests in flight", "grace", shutdownGrace)
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if err := httpServer.Shutdown(sctx); err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
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

// restartSettings lists the settings a reload cannot apply that differ
// between the config in force and the next one (both with serve's flags
// applied, so a flag never counts as a change).
func restartSettings(running, next *config.Config) []string {
	var changed []string
	a, b := running.Store, next.Store
	if a.Type != b.Type || !slices.Equal(a.Addrs, b.Addrs) || a.MasterName != b.MasterName || a.Username != b.Username ||
		a.PasswordValue() != b.PasswordValue() || a.TLS != b.TLS || a.DB != b.DB || a.Timeout != b.Timeout ||
		a.KeyPrefix != b.KeyPrefix || a.FlushDelay != b.FlushDelay || a.OverLimitCache != b.OverLimitCache {
		changed = append(changed, "store")
	}
	for _, f := range []struct {
		name string
		a, b string
	}{
		{"listen", running.Listen, next.Listen},
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

func printBanner(w io.Writer, cfg *config.Config, policy server.Policy, addr string) {
	fmt.Fprintf(w, "floodgate listening on http://%s (store: %s; config: %s)\n", addr, cfg.Store.String(), cfg.Source)
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
	fmt.Fprintf(w, "try: curl -s -X POST http://%s/v1/check -d '{\"rule\":\"%s\",\"key\":\"user-42\"}'\n", addr, first)
}

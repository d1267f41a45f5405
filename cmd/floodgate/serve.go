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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// shutdownGrace bounds how long SIGTERM waits for requests in flight.
const shutdownGrace = 10 * time.Second

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [--config FILE] [--listen ADDR] [--grpc-listen ADDR] [--envoy-config DIR] [--log-format text|json]", stderr)
	cfgPath := fs.String("config", "", "YAML config `file`; none runs the built-in example policy on the memory store")
	listen := fs.String("listen", "", "HTTP listen `address`, overriding the config's listen (default "+config.DefaultListen+")")
	logFormat := fs.String("log-format", "", "log format, text or json, overriding the config's log.format")
	grpcListen := fs.String("grpc-listen", "", "Envoy rate-limit gRPC listen `address`, overriding the config's grpc_listen (default "+config.DefaultGRPCListen+"); given alone, serves with no rules")
	envoyConfig := fs.String("envoy-config", "", "`folder` of envoyproxy/ratelimit rule files, overriding the config's envoy_config; starts the gRPC service")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	logger, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	store, closeStore, err := openStore(ctx, cfg.Store)
	if err != nil {
		return err
	}
	defer closeStore()

	reg := prometheus.NewRegistry()
	rls, err := startRLS(cfg, store, logger, reg, *envoyConfig, *grpcListen)
	if err != nil {
		return err
	}
	defer rls.stop()
	srv, err := server.New(cfg, store, server.Options{Logger: logger, Registry: reg, Routes: rls.routes()})
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
	printBanner(stdout, cfg, ln.Addr().String())
	rls.banner(stdout)
	logger.Info("serving", "listen", ln.Addr().String(), "store", cfg.Store.String(), "rules", len(cfg.Rules), "config", cfg.Source)

	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(ln) }()

	for {
		select {
		case err := <-served:
			return fmt.Errorf("http server: %w", err)
		case <-hup:
			reload(srv, *cfgPath, logger)
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

// reload re-reads the config file on SIGHUP. A bad file keeps the running
// config and logs why.
func reload(srv *server.Server, path string, logger *slog.Logger) {
	if path == "" {
		logger.Warn("SIGHUP ignored: running the built-in policy, no --config file to reload")
		return
	}
	cfg, err := config.Load(path)
	if err != nil {
		logger.Error("reload failed; keeping the running config", "config", path, "err", err)
		return
	}
	needsRestart, err := srv.Reload(cfg)
	if err != nil {
		logger.Error("reload failed; keeping the running config", "config", path, "err", err)
		return
	}
	logger.Info("config reloaded", "config", path, "rules", len(cfg.Rules))
	if needsRestart {
		logger.Warn("store or listen settings changed; they take effect on restart")
	}
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

func newLogger(c config.Log, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.Format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log.format: %q is not text or json", c.Format)
}

func printBanner(w io.Writer, cfg *config.Config, addr string) {
	fmt.Fprintf(w, "floodgate listening on http://%s (store: %s; config: %s)\n", addr, cfg.Store.String(), cfg.Source)
	fmt.Fprintln(w, "active rules:")
	for _, r := range cfg.Rules {
		mode := "fail-" + r.FailureMode
		if r.Shadow {
			mode += ", shadow"
		}
		fmt.Fprintf(w, "  %-16s %s [%s]\n", r.Name, r.RateLimit(), mode)
	}
	fmt.Fprintf(w, "try: curl -s -X POST http://%s/v1/check -d '{\"rule\":\"%s\",\"key\":\"user-42\"}'\n", addr, firstRule(cfg))
}

func firstRule(cfg *config.Config) string {
	if len(cfg.Rules) == 0 {
		return "RULE"
	}
	return cfg.Rules[0].Name
}

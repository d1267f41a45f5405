package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
	"github.com/floodgate-rl/floodgate/server"
)

// rlsServer is the Envoy rate-limit service of floodgate serve: RLS v3 over
// gRPC (with health and reflection) on its own address, and POST /json on
// the HTTP API. A nil *rlsServer is a disabled one: its methods do nothing.
type rlsServer struct {
	addr   string
	dir    string
	svc    *envoy.Service
	grpc   *grpc.Server
	health *health.Server
	logger *slog.Logger
	hup    chan os.Signal
	done   chan struct{}
	once   sync.Once
}

// startRLS starts the Envoy rate-limit service when there is something to
// serve: an envoy_config folder (the config key, or --envoy-config, which
// overrides it), or an explicit --grpc-listen, which serves with no rules
// (every answer OK, as for unknown domains) so a gateway can be wired up
// before its rules are written. Otherwise it returns nil and no error. The
// rules are read from the folder now and again on SIGHUP; a bad folder at
// start is an error, and on SIGHUP keeps the rules in force.
func startRLS(cfg *config.Config, store floodgate.Store, logger *slog.Logger, reg prometheus.Registerer, envoyDir, grpcListen string, nw rlsNet) (*rlsServer, error) {
	dir, addr := cfg.EnvoyConfig, cfg.GRPCListen
	if envoyDir != "" {
		dir = envoyDir
	}
	if grpcListen != "" {
		addr = grpcListen
	}
	if dir == "" && grpcListen == "" {
		return nil, nil
	}
	var rules *envoy.Rules
	if dir != "" {
		var err error
		if rules, err = envoy.LoadDir(dir); err != nil {
			return nil, err
		}
	}
	svc, err := envoy.New(store, rules, envoy.Options{Logger: logger, Registerer: reg})
	if err != nil {
		return nil, err
	}
	ln, err := listenCapped("grpc_listen", addr, nw.maxConns, reg)
	if err != nil {
		return nil, err
	}
	g, h := envoy.NewGRPCServer(svc, grpcOptions(nw.tls, nw.tokens)...)
	r := &rlsServer{addr: ln.Addr().String(), dir: dir, svc: svc, grpc: g, health: h, logger: logger, done: make(chan struct{})}
	go func() {
		if err := g.Serve(ln); err != nil {
			logger.Error("envoy rate-limit gRPC server stopped", "err", err)
		}
	}()
	if r.dir != "" {
		r.hup = make(chan os.Signal, 1)
		signal.Notify(r.hup, syscall.SIGHUP)
		go r.reloadOnHUP()
	}
	logger.Info("serving envoy rate-limit service", "grpc_listen", r.addr, "envoy_config", r.dir, "domains", strings.Join(svc.Rules().Domains(), ","))
	return r, nil
}

// rlsNet is how the gRPC listener is guarded: TLS (nil: none), the tokens
// in force (nil: none needed) and the connection cap.
type rlsNet struct {
	tls      *tlsfiles.Server
	tokens   func() *server.Tokens
	maxConns int
}

// address is the gRPC listener's address, or "" when disabled.
func (r *rlsServer) address() string {
	if r == nil {
		return ""
	}
	return r.addr
}

// reloadOnHUP re-reads the rule folder on each SIGHUP until stop.
func (r *rlsServer) reloadOnHUP() {
	for {
		select {
		case <-r.done:
			return
		case <-r.hup:
			rules, err := envoy.LoadDir(r.dir)
			if err != nil {
				r.logger.Error("envoy rules reload failed; keeping the rules in force", "envoy_config", r.dir, "err", err)
				continue
			}
			r.svc.SetRules(rules)
			r.logger.Info("envoy rules reloaded", "envoy_config", r.dir, "domains", strings.Join(rules.Domains(), ","))
		}
	}
}

// routes returns the HTTP routes the Envoy service adds to the API: /json.
func (r *rlsServer) routes() map[string]http.Handler {
	if r == nil {
		return nil
	}
	return map[string]http.Handler{"/json": r.svc.JSONHandler()}
}

// banner prints the gRPC address under serve's banner.
func (r *rlsServer) banner(w io.Writer) {
	if r == nil {
		return
	}
	src := "no rules: every answer is OK"
	if r.dir != "" {
		src = "rules: " + r.dir
	}
	fmt.Fprintf(w, "envoy rate-limit service (RLS v3) on grpc://%s, POST /json on the HTTP API (%s; domains: %s)\n",
		r.addr, src, strings.Join(r.svc.Rules().Domains(), ", "))
}

// stop reports NOT_SERVING to health checkers, then stops gracefully: calls
// in flight finish, for at most shutdownGrace. It is safe to call more than
// once.
func (r *rlsServer) stop() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		close(r.done)
		if r.hup != nil {
			signal.Stop(r.hup)
		}
		r.health.Shutdown()
		stopped := make(chan struct{})
		go func() { r.grpc.GracefulStop(); close(stopped) }()
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		select {
		case <-stopped:
		case <-ctx.Done():
			r.logger.Warn("envoy rate-limit calls still in flight after the grace period; closing them")
			r.grpc.Stop()
			<-stopped
		}
	})
}

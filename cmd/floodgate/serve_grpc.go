package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/floodgate-rl/floodgate"
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
	once   sync.Once
}

// startRLS starts the Envoy rate-limit service when the plan has it (an
// envoy_config folder, or an explicit --grpc-listen, which serves with no
// rules: every answer OK, as for unknown domains, so a gateway can be wired
// up before its rules are written), with the rules the plan read.
// Otherwise it returns nil and no error.
func startRLS(plan *servePlan, store floodgate.Store, logger *slog.Logger, reg prometheus.Registerer, nw rlsNet) (*rlsServer, error) {
	if !plan.rls {
		return nil, nil
	}
	svc, err := envoy.New(store, plan.rules, envoy.Options{Logger: logger, Registerer: reg})
	if err != nil {
		return nil, err
	}
	ln, err := listenCapped("grpc_listen", plan.cfg.GRPCListen, nw.maxConns, reg)
	if err != nil {
		return nil, err
	}
	g, h := envoy.NewGRPCServer(svc, grpcOptions(nw.tls, nw.tokens)...)
	r := &rlsServer{addr: ln.Addr().String(), dir: plan.cfg.EnvoyConfig, svc: svc, grpc: g, health: h, logger: logger}
	go func() {
		if err := g.Serve(ln); err != nil {
			logger.Error("envoy rate-limit gRPC server stopped", "err", err)
		}
	}()
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

// reload re-reads the rule folder, keeping the rules in force if it is
// bad, and reports whether it reloaded (true too when there is no folder
// to reload).
func (r *rlsServer) reload() bool {
	if r == nil || r.dir == "" {
		return true
	}
	rules, err := envoy.LoadDir(r.dir)
	if err != nil {
		r.logger.Error("envoy rules reload failed; keeping the rules in force", "envoy_config", r.dir, "err", err)
		return false
	}
	r.svc.SetRules(rules)
	r.logger.Info("envoy rules reloaded", "envoy_config", r.dir, "domains", strings.Join(rules.Domains(), ","))
	return true
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

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/connlimit"
	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
	"github.com/floodgate-rl/floodgate/server"
)

// rlsServer is the Envoy rate-limit service of floodgate serve: RLS v3 over
// gRPC (with health and reflection) on its own address, and POST /json and
// GET /healthcheck on the HTTP API. A nil *rlsServer is a disabled one: its
// methods do nothing.
type rlsServer struct {
	addr    string
	dir     string
	load    envoy.LoadOptions
	svc     *envoy.Service
	grpc    *grpc.Server
	health  *health.Server
	logger  *slog.Logger
	cancel  context.CancelFunc // ends the health and folder watches
	metrics *http.Server       // USE_PROMETHEUS's listener, if any
	statsd  func()             // USE_STATSD's push: its last flush, if any
	rules   bool               // health requires loaded rules
	tls     bool               // the listener serves TLS: grpcs:// in the banner
	once    sync.Once
}

// healthInterval is how often the gRPC health status is refreshed from
// readiness.
const healthInterval = 2 * time.Second

// startRLS starts the Envoy rate-limit service with the rules the plan
// read, when the plan has it: an envoy_config folder, or an explicit
// --grpc-listen, which serves with no rules (every answer OK) so a gateway
// can be wired up first. Otherwise it returns nil and no error. The rules
// are read again when the folder changes and on SIGHUP; a bad folder keeps
// the rules in force. compat, when set, is envoyproxy/ratelimit's
// environment (serve --envoy-env).
func startRLS(plan *servePlan, store floodgate.Store, logger *slog.Logger, reg *prometheus.Registry, compat *envoyCompat, nw rlsNet) (*rlsServer, error) {
	if !plan.rls {
		return nil, nil
	}
	dir, addr, rules := plan.cfg.EnvoyConfig, plan.cfg.GRPCListen, plan.rules
	var (
		opts envoy.Options
		gs   grpcSettings
	)
	if compat != nil {
		opts, gs = compat.opts, compat.grpc
		// Started without rules (FORCE_START_WITHOUT_INITIAL_CONFIG): every
		// call fails as the peer's does until the folder first loads.
		opts.RequireRules = compat.force
	}
	opts.Logger, opts.Registerer, opts.TracerProvider = logger, reg, nw.tracer
	q := plan.cfg.EnvoyQuota
	opts.Quota = envoy.QuotaOptions{Interval: q.Interval, TTL: q.TTL, Idle: q.Idle, Unmatched: q.Unmatched,
		MaxBuckets: q.MaxBuckets, MaxBucketIDBytes: q.MaxBucketIDBytes}
	if rules != nil && len(rules.Skipped()) > 0 {
		logger.Info("envoy rules: not read: names starting with a dot, links to folders, files outside the RUNTIME_APPDIRECTORY prefix", "skipped", strings.Join(rules.Skipped(), ","))
	}
	svc, err := envoy.New(store, rules, opts)
	if err != nil {
		return nil, err
	}
	gopts := grpcOptions(nw.tls, nw.tokens, nw.connErr, nw.maxInFlight)
	if gs.maxConnAge > 0 { // replaces grpcOptions' keepalive parameters
		gopts = append(gopts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleTimeout, Time: grpcPingAfter, Timeout: grpcPingTimeout,
			MaxConnectionAge: gs.maxConnAge, MaxConnectionAgeGrace: gs.maxConnAgeGrace}))
	}
	var ln net.Listener
	if gs.uds != "" {
		_ = os.Remove(gs.uds) // a socket left by a previous run
		uln, err := net.Listen("unix", gs.uds)
		if err != nil {
			return nil, fmt.Errorf("grpc listen: %w", err)
		}
		ln = connlimit.New(uln, nw.maxConns)
	} else {
		cl, err := listenCapped("grpc_listen", addr, nw.maxConns, reg)
		if err != nil {
			return nil, err
		}
		// A connection with no call in progress is idle: the first a new
		// one at the cap evicts.
		cl.TrackCalls()
		gopts = append(gopts, grpc.StatsHandler(callTracker{cl}))
		ln = cl
	}
	g, h := envoy.NewGRPCServer(svc, gopts...)
	ctx, cancel := context.WithCancel(context.Background())
	r := &rlsServer{addr: ln.Addr().String(), dir: dir, load: plan.load, svc: svc, grpc: g, health: h, logger: logger,
		cancel: cancel, rules: gs.requireRulesHealth, tls: nw.tls != nil}
	go func() {
		if err := g.Serve(ln); err != nil {
			logger.Error("envoy rate-limit gRPC server stopped", "err", err)
		}
	}()
	go svc.WatchHealth(ctx, h, r.rules, healthInterval)
	if r.dir != "" {
		go svc.Watch(ctx, r.dir, plan.load, 0, func(rules *envoy.Rules) {
			logger.Info("envoy rules reloaded: the folder changed", "envoy_config", r.dir, "domains", strings.Join(rules.Domains(), ","))
		}, func(err error) {
			logger.Error(r.reloadFailed(), "envoy_config", r.dir, "err", err)
		})
	}
	if compat != nil && compat.statsd != nil {
		if r.statsd, err = startStatsd(compat.statsd, svc, logger); err != nil {
			r.stop()
			return nil, err
		}
	}
	if compat != nil && compat.metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("GET "+compat.metricsP, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
		mln, err := net.Listen("tcp", compat.metrics)
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("PROMETHEUS_ADDR: %w", err)
		}
		r.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = r.metrics.Serve(mln) }()
		logger.Info("serving metrics (USE_PROMETHEUS)", "addr", mln.Addr().String(), "path", compat.metricsP)
	}
	logger.Info("serving envoy rate-limit service", "grpc_listen", r.addr, "envoy_config", r.dir, "domains", strings.Join(svc.Rules().Domains(), ","))
	return r, nil
}

// rlsNet is how the gRPC listener is guarded: TLS (nil: none), the tokens
// in force (nil: none needed), the connection cap, where its connections'
// errors go, and the bound on calls in progress.
type rlsNet struct {
	tls      *tlsfiles.Server
	tokens   func() *server.Tokens
	maxConns int
	connErr  *connErrors
	// maxInFlight bounds the calls in progress over every connection.
	maxInFlight int
	// tracer traces the service's decisions; nil: off.
	tracer trace.TracerProvider
}

// address is the gRPC listener's address, or "" when disabled.
func (r *rlsServer) address() string {
	if r == nil {
		return ""
	}
	return r.addr
}

// reloadFailed is the log message of a reload that failed: the rules in
// force stay, or, started without any (FORCE_START_WITHOUT_INITIAL_CONFIG),
// calls keep failing until a load succeeds.
func (r *rlsServer) reloadFailed() string {
	if r.svc.AwaitingRules() {
		return "envoy rules reload failed; no rules have loaded yet, so calls keep failing until one does"
	}
	return "envoy rules reload failed; keeping the rules in force"
}

// reload re-reads the rule folder on SIGHUP, keeping the rules in force
// (and counting a config_load_error) if it is bad, and reports whether it
// reloaded (true too when there is no folder to reload).
func (r *rlsServer) reload() bool {
	if r == nil || r.dir == "" {
		return true
	}
	rules, err := envoy.Load(r.dir, r.load)
	if err != nil {
		r.svc.LoadFailed()
		r.logger.Error(r.reloadFailed(), "envoy_config", r.dir, "err", err)
		return false
	}
	r.svc.SetRules(rules)
	r.logger.Info("envoy rules reloaded", "envoy_config", r.dir, "domains", strings.Join(rules.Domains(), ","))
	return true
}

// routes returns the HTTP routes the Envoy service adds to the API: /json,
// a decision, under the API's tokens and in-flight bound.
func (r *rlsServer) routes() map[string]http.Handler {
	if r == nil {
		return nil
	}
	return map[string]http.Handler{"/json": r.svc.JSONHandler()}
}

// probes returns the probe the Envoy service adds to the API:
// /healthcheck as envoyproxy/ratelimit serves it, following readiness,
// open and never shed, as /healthz and /readyz.
func (r *rlsServer) probes() map[string]http.Handler {
	if r == nil {
		return nil
	}
	return map[string]http.Handler{"GET /healthcheck": r.svc.HealthHandler(r.rules, time.Second)}
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
	scheme := "grpc"
	if r.tls {
		scheme = "grpcs"
	}
	fmt.Fprintf(w, "envoy rate-limit service (RLS v3) and quota service (rate_limit_quota) on %s://%s, POST /json on the HTTP API (%s; domains: %s)\n",
		scheme, r.addr, src, strings.Join(r.svc.Rules().Domains(), ", "))
}

// stop reports NOT_SERVING to health checkers, then stops gracefully: calls
// in flight finish, for at most shutdownGrace. It is safe to call more than
// once.
func (r *rlsServer) stop() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		r.cancel()
		if r.metrics != nil {
			_ = r.metrics.Close()
		}
		r.health.Shutdown()
		r.svc.DrainQuota() // quota streams get TTL 0 and end: GracefulStop waits for streams
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
		if r.statsd != nil {
			r.statsd() // after the last call, so that it is counted
		}
		lctx, lcancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer lcancel()
		_ = r.svc.Close(lctx) // the leases' unspent quota goes back
	})
}

// callTracker is the gRPC stats handler that tells the listener which
// connections have calls in progress.
type callTracker struct{ l *connlimit.Listener }

func (t callTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (t callTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	switch s.(type) {
	case *stats.Begin:
		t.l.Begin(p.Addr)
	case *stats.End:
		t.l.End(p.Addr)
	}
}

func (t callTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (t callTracker) HandleConn(context.Context, stats.ConnStats) {}

package envoy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate"
)

// HealthNames are the service names the gRPC health service answers for:
// the server as a whole (""), "ratelimit" (the name envoyproxy/ratelimit
// registers, which Envoy health checks copied from its deployments ask
// for) and the RLS service's full name.
var HealthNames = []string{"", "ratelimit", ServiceName}

// readyKey and readyLimit are what a readiness probe resets in the store: a
// Reset is one round trip that touches no decision's key.
const readyKey = "\x00floodgate-envoy-ready"

var readyLimit = floodgate.PerSecond(1)

// Ready reports whether the service can answer as configured: its store
// answers (a Reset of a key of its own), and, when requireRules is set,
// rules with at least one domain are loaded (envoyproxy/ratelimit's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
func (s *Service) Ready(ctx context.Context, requireRules bool) error {
	if requireRules && len(s.Rules().Domains()) == 0 {
		return fmt.Errorf("no rules loaded")
	}
	if err := s.store.Reset(ctx, readyKey, readyLimit); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// HealthHandler answers GET /healthcheck as envoyproxy/ratelimit does: 200
// "OK" while ready (see Ready), 500 with the reason otherwise. Each probe
// asks the store, within timeout.
func (s *Service) HealthHandler(requireRules bool, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if err := s.Ready(ctx, requireRules); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "OK")
	})
}

// WatchHealth sets h's status for every name of HealthNames from Ready,
// now and then every interval, until ctx ends: SERVING while ready,
// NOT_SERVING otherwise. Each check waits at most interval.
func (s *Service) WatchHealth(ctx context.Context, h *health.Server, requireRules bool, interval time.Duration) {
	check := func() {
		cctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		st := healthpb.HealthCheckResponse_SERVING
		if s.Ready(cctx, requireRules) != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if ctx.Err() != nil {
			return // shutting down: Shutdown has the last word
		}
		for _, n := range HealthNames {
			h.SetServingStatus(n, st)
		}
	}
	check()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

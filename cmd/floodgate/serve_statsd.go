package main

import (
	"context"
	"log/slog"

	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/statsd"
)

// startStatsd pushes what envoyproxy/ratelimit pushes under USE_STATSD: the
// Envoy service's statistics with the peer's names (envoy.Service.PeerStats,
// the counts behind its ratelimit_service_* Prometheus series) and the Go
// runtime's under ratelimit.go, every interval, tagged with EXTRA_TAGS. The
// returned stop sends what is pending and closes the connection: call it
// once the service has answered its last call.
func startStatsd(s *statsdSettings, svc *envoy.Service, logger *slog.Logger) (stop func(), err error) {
	peer := func(emit func(string, statsd.Kind, uint64)) {
		svc.PeerStats(func(name string, total uint64) { emit(name, statsd.Counter, total) })
	}
	c, err := statsd.New(statsd.Config{Network: s.network, Addr: s.addr, Interval: s.interval, Tags: s.tags, Logger: logger},
		peer, statsd.RuntimeStats("ratelimit.go"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	logger.Info("pushing stats to statsd (USE_STATSD)", "addr", s.addr, "protocol", s.network, "interval", s.interval)
	return func() { cancel(); <-done }, nil
}

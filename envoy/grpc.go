package envoy

import (
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ServiceName is the RLS v3 service's full name, as gRPC health checks and
// reflection name it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Register registers s as the RateLimitService of a gRPC server. Build
// that server with [ServerCodec] (as [NewGRPCServer] does): without it, a
// descriptor value holding invalid UTF-8 fails the call with INTERNAL
// before s sees it, and Envoy's default failure_mode_deny=false admits.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// RegisterQuota registers s's Rate Limit Quota Service
// (StreamRateLimitQuotas, for Envoy's rate_limit_quota filter) on g. It
// decides with the same rules and store as RLS; see docs/ENVOY.md.
func (s *Service) RegisterQuota(g grpc.ServiceRegistrar) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, s.quotaSv)
}

// RegisterHealth registers the standard gRPC health service
// (grpc.health.v1.Health) on g, reporting SERVING for every name of
// HealthNames: the server as a whole (""), "ratelimit" and ServiceName.
// [Service.WatchHealth] makes it follow readiness. Call Shutdown on the
// result before a graceful stop, so health checkers move traffic away
// first.
func RegisterHealth(g grpc.ServiceRegistrar) *health.Server {
	h := health.NewServer()
	for _, n := range HealthNames {
		h.SetServingStatus(n, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(g, h)
	return h
}

// StreamWorkers is the number of long-lived goroutines NewGRPCServer's
// server runs calls on (grpc.NumStreamWorkers; a call that finds them all
// busy gets a goroutine of its own). Workers keep their grown stacks, which
// a call on a fresh goroutine would grow again; calls wait on the store, so
// there are more workers than cores. The count suits every store and
// GOMAXPROCS (docs/PERFORMANCE.md, "Envoy RLS"); a caller's own
// grpc.NumStreamWorkers, passed to NewGRPCServer, replaces it.
const StreamWorkers = 128

// NewGRPCServer returns a gRPC server with s, the health service and the
// reflection service (v1 and v1alpha, for grpcurl and grpc_cli)
// registered, and the health server to shut down before stopping. It
// decodes requests with [ServerCodec] and runs calls on [StreamWorkers]
// stream workers; opts are passed to grpc.NewServer after those two, so
// they win.
func NewGRPCServer(s *Service, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.NumStreamWorkers(StreamWorkers), ServerCodec()}, opts...)...)
	s.Register(g)
	s.RegisterQuota(g)
	h := RegisterHealth(g)
	reflection.Register(g)
	return g, h
}

package grpclimit_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// transportStream is the least grpc.ServerTransportStream, so that
// grpc.SetHeader and SetTrailer work on a call that no server runs.
type transportStream struct{ header, trailer metadata.MD }

func (s *transportStream) Method() string                  { return "/grpc.testing.TestService/UnaryCall" }
func (s *transportStream) SetHeader(md metadata.MD) error  { s.header = md; return nil }
func (s *transportStream) SendHeader(md metadata.MD) error { s.header = md; return nil }
func (s *transportStream) SetTrailer(md metadata.MD) error { s.trailer = md; return nil }

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUnary measures the interceptor's own cost per call, with the
// memory store, against the same handler bare: the interceptor is called
// as grpc calls it, with a peer and metadata in the context, so the
// figures leave out the transport. cpu-ns/op is the process's CPU time per
// call. Run it with:
//
//	go test -run '^$' -bench Unary -benchmem ./grpclimit/
func BenchmarkUnary(b *testing.B) {
	bucket := floodgate.NewTokenBucket(1_000_000, 1_000_000, time.Second) // never runs out in a run
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	cases := []struct {
		name  string
		rules []grpclimit.Rule
		skip  bool
	}{
		{"bare", nil, false},
		{"skipped", []grpclimit.Rule{{Name: "per-peer", Limit: bucket}}, true},
		{"1-rule-peer", []grpclimit.Rule{{Name: "per-peer", Limit: bucket}}, false},
		{"1-rule-metadata", []grpclimit.Rule{{Name: "per-tenant", Limit: bucket, Key: grpclimit.Metadata("x-tenant")}}, false},
		{"3-rules", []grpclimit.Rule{
			{Name: "per-peer", Limit: bucket},
			{Name: "per-tenant", Limit: bucket, Key: grpclimit.Metadata("x-tenant")},
			{Name: "unary", Limit: bucket, Methods: []string{"/grpc.testing.TestService/UnaryCall"}, Key: grpclimit.Method()},
		}, false},
		{"denied", []grpclimit.Rule{{Name: "per-peer", Limit: floodgate.PerHour(1)}}, false},
	}
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}}
	md := metadata.Pairs("x-tenant", "acme", "user-agent", "grpc-go/1.85.0")
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			call := handler
			if c.rules != nil {
				cfg := grpclimit.Config{Store: memory.New(), Rules: c.rules, Logger: discard}
				if c.skip {
					cfg.Skip = func(context.Context, string) bool { return true }
				}
				lim := newLimiter(b, cfg)
				call = func(ctx context.Context, req any) (any, error) { return lim.Unary(ctx, req, info, handler) }
			}
			ts := &transportStream{}
			ctx := grpc.NewContextWithServerTransportStream(peer.NewContext(metadata.NewIncomingContext(context.Background(), md), p), ts)
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				_, _ = call(ctx, nil)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkRPC measures whole unary calls over loopback TCP, client and
// server in this process, with and without the interceptor (one rule keyed
// by the peer, memory store): what the interceptor adds to a real call.
//
//	go test -run '^$' -bench RPC -benchmem ./grpclimit/
func BenchmarkRPC(b *testing.B) {
	bucket := floodgate.NewTokenBucket(1_000_000, 1_000_000, time.Second)
	for _, limited := range []bool{false, true} {
		name := "bare"
		rules := []grpclimit.Rule{{Name: "unused", Limit: bucket, Methods: []string{"/other.Service/*"}}}
		if limited {
			name, rules = "1-rule-peer", []grpclimit.Rule{{Name: "per-peer", Limit: bucket}}
		}
		b.Run(name, func(b *testing.B) {
			lim := newLimiter(b, grpclimit.Config{Store: memory.New(), Rules: rules, Logger: discard})
			client := testpb.NewTestServiceClient(serve(b, lim, serveOpts{}))
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestShortClientDeadlines: a client that sends a deadline shorter than a
// round trip to Redis never passes a fail-open rule by it: the interceptor
// runs the handler no more often than the limit allows (5 a minute, the
// connecting call included), and the store's breaker stays closed.
func TestShortClientDeadlines(t *testing.T) {
	server := redistest.Spawn(t)
	for _, dl := range []time.Duration{150 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		s, err := redisstore.New(redisstore.Config{Addrs: []string{server.Addr}, Mode: redisstore.ModeStandalone, Timeout: 100 * time.Millisecond, KeyPrefix: dl.String()})
		if err != nil {
			t.Fatal(err)
		}
		lim := newLimiter(t, grpclimit.Config{Store: s, Logger: discard,
			Rules: []grpclimit.Rule{{Name: "per-peer", Limit: floodgate.PerMinute(5), Failure: decide.FailOpen}}})
		var ran atomic.Int64
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ran.Add(1)
			return h(ctx, req)
		}))
		testpb.RegisterTestServiceServer(srv, testService{})
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go func() { _ = srv.Serve(ln) }()
		cc, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		client := testpb.NewTestServiceClient(cc)
		_, _ = client.EmptyCall(context.Background(), &testpb.Empty{}) // connect (counts 1)
		ok := 0
		for range 200 {
			ctx, cancel := context.WithTimeout(context.Background(), dl)
			if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err == nil {
				ok++
			}
			cancel()
		}
		cc.Close()
		srv.GracefulStop() // waits for every handler the timed-out calls left running
		if ran.Load() > 5 || s.Health().Nodes[0].Opens > 0 {
			t.Errorf("client deadline %s: the handler ran %d times against 5 a minute (%d answered OK); %+v; breaker opened %d times", dl, ran.Load(), ok, lim.Stats(), s.Health().Nodes[0].Opens)
		}
		s.Close()
	}
}

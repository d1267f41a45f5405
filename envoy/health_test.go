package envoy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestHealthFollowsReadiness: gRPC health (for "", "ratelimit" and the
// full service name) and GET /healthcheck report SERVING / 200 while the
// store answers and rules are loaded, and NOT_SERVING / 500 while a real
// Redis server is stopped, or no rules are loaded when rules are required.
func TestHealthFollowsReadiness(t *testing.T) {
	srv := redistest.Spawn(t)
	store, err := redisstore.New(redisstore.Config{Addrs: []string{srv.Addr}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rules, err := Parse(Source{Name: "f.yaml", Data: []byte("domain: d\n")})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(store, rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, h := NewGRPCServer(svc)
	ln := listen(t)
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go svc.WatchHealth(ctx, h, true, 50*time.Millisecond)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	web := httptest.NewServer(svc.HealthHandler(true, time.Second))
	defer web.Close()

	// wait polls until every health name and /healthcheck say want, for
	// at most ten seconds (generous: the watch checks every 50ms).
	wait := func(what string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		wantHTTP := http.StatusOK
		if want != healthpb.HealthCheckResponse_SERVING {
			wantHTTP = http.StatusInternalServerError
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			good := true
			for _, name := range []string{"", "ratelimit", rlsv3.RateLimitService_ServiceDesc.ServiceName} {
				resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
				good = good && err == nil && resp.GetStatus() == want
			}
			res, err := http.Get(web.URL + "/healthcheck")
			if err == nil {
				good = good && res.StatusCode == wantHTTP
				res.Body.Close()
			}
			if good {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: health never became %s (and /healthcheck %d)", what, want, wantHTTP)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("store up", healthpb.HealthCheckResponse_SERVING)
	srv.Stop(t)
	wait("store stopped", healthpb.HealthCheckResponse_NOT_SERVING)
	srv.Cont(t)
	wait("store back", healthpb.HealthCheckResponse_SERVING)
	svc.SetRules(nil)
	wait("no rules", healthpb.HealthCheckResponse_NOT_SERVING)
	svc.SetRules(rules)
	wait("rules back", healthpb.HealthCheckResponse_SERVING)
}

// listen opens a loopback listener for a test server.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

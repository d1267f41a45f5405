package docstest

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestGRPCRetryExample builds docs/GRPC.md's retry client as written and
// runs it against a real gRPC server whose health service a limiter
// guards (Skip: SkipNone): under a short window each denied call is
// retried once, after its delay, and admitted; under an hour's window the
// delay is above the client's cap, so it gives up at once, retrying
// nothing.
func TestGRPCRetryExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	bin := buildProgram(t, taggedBlock(t, readDoc(t, "docs/GRPC.md"), "docs/GRPC.md", "retry client"))
	for _, tc := range []struct {
		name       string
		limit      floodgate.Limit
		wantOut    string
		wantErr    string // in the standard error; "" for success
		wantDenied uint64
	}{
		{"retried after the delay", floodgate.NewLimit(floodgate.SlidingWindowLog, 1, 200*time.Millisecond), "SERVING\nSERVING\nSERVING\n", "", 2},
		{"a delay above the cap", floodgate.PerHour(1), "SERVING\n", "ResourceExhausted", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := grpclimit.New(grpclimit.Config{Store: memory.New(), Skip: grpclimit.SkipNone,
				Rules: []grpclimit.Rule{{Name: "per-peer", Limit: tc.limit}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary))
			healthpb.RegisterHealthServer(srv, healthgrpc.NewServer())
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(srv.Stop)

			out, err := exec.Command(bin, "-addr", ln.Addr().String()).Output()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(string(stderrOf(err)), tc.wantErr)) {
				t.Fatalf("the client ended with %v\n%s\nwant an error with %q", err, stderrOf(err), tc.wantErr)
			}
			if string(out) != tc.wantOut {
				t.Errorf("the client printed %q, want %q", out, tc.wantOut)
			}
			if got := lim.Stats().Denied; got != tc.wantDenied {
				t.Errorf("the server denied %d calls, want %d", got, tc.wantDenied)
			}
		})
	}
}

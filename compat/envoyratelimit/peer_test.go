package envoyratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// peerModule is the peer's module path; its version is go.mod's.
const peerModule = "github.com/envoyproxy/ratelimit"

// peerDir returns the folder of the peer's module source at the pinned
// version, downloading it through the Go module proxy if needed.
func peerDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", peerModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", peerModule, err)
	}
	var m struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %s %v", peerModule, m.Error, err)
	}
	t.Logf("envoyproxy/ratelimit %s", m.Version)
	return m.Dir
}

// buildPeer builds the peer's service command at the pinned version.
func buildPeer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	cmd := exec.Command("go", "build", "-o", bin, peerModule+"/src/service_cmd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", peerModule, err, out)
	}
	return bin
}

// freePort returns a free loopback TCP port.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// peer is a running envoyproxy/ratelimit.
type peer struct {
	client rlsv3.RateLimitServiceClient
	http   string // its HTTP address (POST /json, GET /healthcheck)
	log    *bytes.Buffer
}

// startPeer runs the peer binary on loopback with the rule files of
// runtimeRoot/ratelimit/config and the Redis at redisAddr, configured by
// its own environment variables, and waits until its gRPC health check
// answers SERVING.
func startPeer(t *testing.T, bin, runtimeRoot, redisAddr string, extraEnv ...string) *peer {
	t.Helper()
	grpcPort, httpPort, debugPort := freePort(t), freePort(t), freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort),
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+runtimeRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true",
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			l := log.String()
			t.Logf("envoyproxy/ratelimit's log (its end):\n%s", l[max(0, len(l)-4000):])
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	waitServing(t, conn, "ratelimit", "envoyproxy/ratelimit")
	return &peer{client: rlsv3.NewRateLimitServiceClient(conn), http: "127.0.0.1:" + strconv.Itoa(httpPort), log: &log}
}

// waitServing waits, for at most a minute, until conn's health service
// answers SERVING for service.
func waitServing(t *testing.T, conn *grpc.ClientConn, service, what string) {
	t.Helper()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became SERVING for %q: %v %v", what, service, resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// copyRules copies the peer's rule files into dir/ratelimit/config, the
// folder both services read: the integration test's and the example's.
func copyRules(t *testing.T, src, dir string) string {
	t.Helper()
	cfg := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"test/integration/runtime/current/ratelimit/config/basic.yaml",
		"test/integration/runtime/current/ratelimit/config/another.yaml",
		"test/integration/runtime/current/ratelimit/config/share_threshold.yaml",
		"examples/ratelimit/config/config.yaml",
		"examples/ratelimit/config/example.yaml",
	} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg, fmt.Sprintf("%s-%s", filepath.Base(filepath.Dir(filepath.Dir(f))), filepath.Base(f))), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

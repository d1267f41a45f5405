package envoyratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// PeerModule is envoyproxy/ratelimit's module path; its version is the one
// go.mod pins.
const PeerModule = "github.com/envoyproxy/ratelimit"

// PeerSource returns the folder of the peer's module source at the pinned
// version (downloading it through the Go module proxy if needed) and the
// version.
func PeerSource() (dir, version string, err error) {
	out, err := exec.Command("go", "mod", "download", "-json", PeerModule).Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s: %w", PeerModule, err)
	}
	var m struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s: %s %v", PeerModule, m.Error, err)
	}
	return m.Dir, m.Version, nil
}

// Build builds the peer's service command (peer true) or floodgate's, at
// the versions this module pins, into the binary out.
//
// floodgate is built in its own module (this one's replace points at it),
// so the binary is the one floodgate's go.mod makes.
func Build(out string, peer bool) error {
	cmd := exec.Command("go", "build", "-o", out, PeerModule+"/src/service_cmd")
	pkg := PeerModule
	if !peer {
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/floodgate-rl/floodgate").Output()
		if err != nil {
			return fmt.Errorf("finding floodgate's module: %w", err)
		}
		pkg = "floodgate"
		cmd = exec.Command("go", "build", "-o", out, "./cmd/floodgate")
		cmd.Dir = strings.TrimSpace(string(root))
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Ports are a service's loopback ports.
type Ports struct {
	GRPC  int // GRPC_PORT: the RLS service
	HTTP  int // PORT: POST /json, GET /healthcheck
	Debug int // DEBUG_PORT (the peer's only)
}

// FreePorts returns three free loopback ports, for a process to bind
// after they are released. They come from below Linux's ephemeral range
// (32768 and up by default), which the kernel gives to outgoing
// connections: a port taken from it can be a client's before the service
// binds it, when other tests run beside (as make test runs them). Ports
// are never handed out twice in one process, so parallel sets never share
// one.
func FreePorts() (Ports, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var p [3]int
	for i := range p {
		port, err := freePort()
		if err != nil {
			return Ports{}, err
		}
		p[i] = port
	}
	return Ports{GRPC: p[0], HTTP: p[1], Debug: p[2]}, nil
}

// The range FreePorts picks from: below the ephemeral range, above the
// Redis harness's ports (16379-17005 and 26380-27005).
const portLow, portHigh = 28000, 32700

var (
	portsMu     sync.Mutex
	portsGiven  = map[int]bool{}
	portsCursor = portLow + os.Getpid()%(portHigh-portLow) // processes start apart
)

// freePort returns a port of the range that nothing listens on and that
// this process has not handed out. The caller holds portsMu.
func freePort() (int, error) {
	for range portHigh - portLow {
		port := portsCursor
		portsCursor++
		if portsCursor >= portHigh {
			portsCursor = portLow
		}
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken
		}
		ln.Close()
		portsGiven[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d", portLow, portHigh-1)
}

// Env is the environment of a deployment of envoyproxy/ratelimit on
// loopback: its rule files in runtimeRoot/ratelimit/config, its Redis at
// redisAddr, its ports, no statsd. Both services run with it: the peer, and
// floodgate as its drop-in (serve --envoy-env).
func Env(runtimeRoot, redisAddr string, p Ports) []string {
	return append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(p.HTTP),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(p.GRPC),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(p.Debug),
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+runtimeRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true",
		// The peer watches the folder itself only so; by default it waits for
		// RUNTIME_ROOT's symlink to be swapped. floodgate watches either way.
		"RUNTIME_WATCH_ROOT=false",
	)
}

// WaitServing waits, for at most timeout, until the gRPC health service at
// addr answers SERVING for "ratelimit" (the name the peer registers), and
// returns a connection to addr.
func WaitServing(addr string, timeout time.Duration) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return conn, nil
		}
		if time.Now().After(deadline) {
			conn.Close()
			return nil, fmt.Errorf("%s never became SERVING for \"ratelimit\": %v %v", addr, resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RuleFiles are the peer's own rule files the side-by-side test loads:
// its integration test's and its example's.
var RuleFiles = []string{
	"test/integration/runtime/current/ratelimit/config/basic.yaml",
	"test/integration/runtime/current/ratelimit/config/another.yaml",
	"test/integration/runtime/current/ratelimit/config/share_threshold.yaml",
	"examples/ratelimit/config/config.yaml",
	"examples/ratelimit/config/example.yaml",
}

// CopyRules copies files (paths under the peer's source src) into
// root/ratelimit/config, the folder both services read, and returns it.
func CopyRules(src, root string, files []string) (string, error) {
	cfg := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return "", err
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		name := filepath.Base(filepath.Dir(filepath.Dir(f))) + "-" + filepath.Base(f)
		if err := os.WriteFile(filepath.Join(cfg, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return cfg, nil
}

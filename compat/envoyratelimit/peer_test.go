package envoyratelimit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// service is a running RLS service process: the peer, or floodgate as its
// drop-in.
type service struct {
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	http   string // its HTTP address (POST /json, GET /healthcheck, /metrics)
}

// binDir holds the binaries the tests build, for the whole run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "floodgate-envoy-compat-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaries builds the peer and floodgate once per test binary.
var binaries = sync.OnceValues(func() ([2]string, error) {
	dir := binDir
	peer, fg := filepath.Join(dir, "ratelimit"), filepath.Join(dir, "floodgate")
	if err := Build(peer, true); err != nil {
		return [2]string{}, err
	}
	return [2]string{peer, fg}, Build(fg, false)
})

// start runs bin with env, args, and waits until its gRPC health check
// answers SERVING.
func start(t *testing.T, what, bin string, env []string, p Ports, args ...string) *service {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			l := log.String()
			t.Logf("%s's log (its end):\n%s", what, l[max(0, len(l)-4000):])
		}
	})
	conn, err := WaitServing("127.0.0.1:"+strconv.Itoa(p.GRPC), time.Minute)
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, log.String())
	}
	t.Cleanup(func() { conn.Close() })
	return &service{client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, http: "127.0.0.1:" + strconv.Itoa(p.HTTP)}
}

package remotestore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// binary is the floodgate program, built once for the package's tests.
var binary struct {
	once sync.Once
	path string
	err  error
}

// floodgateBinary builds cmd/floodgate into a temporary folder.
func floodgateBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "floodgate-remotestore-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "floodgate")
		out, err := exec.Command("go", "build", "-o", binary.path, "github.com/floodgate-rl/floodgate/cmd/floodgate").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary.path != "" {
		_ = os.RemoveAll(filepath.Dir(binary.path))
	}
	os.Exit(code)
}

var listening = regexp.MustCompile(`floodgate listening on (http://[^ ]+) `)

// serve starts `floodgate serve` on a loopback port with args, and returns
// its base URL; the process is stopped when t ends.
func serve(t *testing.T, config string, args ...string) string {
	t.Helper()
	bin := floodgateBinary(t)
	argv := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)
	if config != "" {
		path := filepath.Join(t.TempDir(), "floodgate.yaml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		argv = append(argv, "--config", path)
	}
	cmd := exec.Command(bin, argv...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(30 * time.Second):
		t.Fatalf("floodgate serve %v did not start; stderr:\n%s", argv, stderr.String())
	}
	return ""
}

func newStore(t *testing.T, cfg remotestore.Config) *remotestore.Store {
	t.Helper()
	s, err := remotestore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestConformance runs the store conformance suite against a real
// `floodgate serve`, on its memory store and on the harness's Redis: the
// server decides at the suite's clock (--store-api-client-clock).
func TestConformance(t *testing.T) {
	backends := []struct {
		name   string
		config func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "" }},
		{"redis", func(t *testing.T) string {
			addr := redistest.StandaloneAddr(t)
			return fmt.Sprintf("store:\n  type: redis\n  addrs: [%q]\n  key_prefix: %q\n  timeout: 5s\n", addr, fmt.Sprintf("fg-remotestore-%d:", time.Now().UnixNano()))
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := serve(t, b.config(t), "--store-api", "--store-api-client-clock")
			storetest.Run(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
				return newStore(t, remotestore.Config{URL: url, Clock: clock, Timeout: 10 * time.Second})
			})
		})
	}
}

// TestServeRealClock decides through a server that reads its own clock: a
// call that carries a time is refused there, as a store error that never
// admits.
func TestServeRealClock(t *testing.T) {
	url := serve(t, "", "--store-api")
	ctx := t.Context()
	s := newStore(t, remotestore.Config{URL: url})
	l := floodgate.PerMinute(3)
	for i := range 4 {
		d, err := s.Allow(ctx, "user-1", l)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; d.Allowed != want {
			t.Fatalf("call %d: allowed %v, want %v", i+1, d.Allowed, want)
		}
		if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > time.Minute) {
			t.Fatalf("denied with RetryAfter %s, want within the minute", d.RetryAfter)
		}
	}
	timed := newStore(t, remotestore.Config{URL: url, Clock: clocktest.NewManual(storetest.Epoch)})
	d, err := timed.Allow(ctx, "user-2", l)
	if err == nil || d.Allowed || isKind(err) {
		t.Fatalf("a timed call to a server on its own clock = %+v, %v; want a store error of no sentinel kind", d, err)
	}
	if !strings.Contains(err.Error(), "now_us") {
		t.Errorf("error %q does not say why", err)
	}
}

// TestServeOff: a server without --store-api answers 404, which is a store
// error (a misconfiguration), never an outage that could fail open.
func TestServeOff(t *testing.T) {
	url := serve(t, "")
	s := newStore(t, remotestore.Config{URL: url})
	d, err := s.Allow(t.Context(), "k", floodgate.PerMinute(1))
	if err == nil || d.Allowed || isKind(err) || !strings.Contains(err.Error(), "--store-api") {
		t.Fatalf("Allow against a server without the store API = %+v, %v; want a store error naming --store-api", d, err)
	}
}

// TestServeClientClockNeedsStoreAPI: the test-only flag alone is refused.
func TestServeClientClockNeedsStoreAPI(t *testing.T) {
	out, err := exec.CommandContext(context.Background(), floodgateBinary(t), "serve", "--listen", "127.0.0.1:0", "--store-api-client-clock").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--store-api-client-clock needs --store-api") {
		t.Fatalf("serve --store-api-client-clock alone: %v\n%s", err, out)
	}
}

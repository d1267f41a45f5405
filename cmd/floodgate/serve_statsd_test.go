package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// statsdListener sums the counters and keeps the last gauges that reach a
// real UDP socket, as a statsd server would.
type statsdListener struct {
	conn     *net.UDPConn
	mu       sync.Mutex
	counters map[string]uint64
	gauges   map[string]uint64
	bad      []string
}

func listenStatsd(t *testing.T) *statsdListener {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	l := &statsdListener{conn: conn, counters: map[string]uint64{}, gauges: map[string]uint64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 65536)
		for {
			n, err := conn.Read(b)
			if err != nil {
				return
			}
			l.mu.Lock()
			for _, line := range strings.Split(strings.TrimSuffix(string(b[:n]), "\n"), "\n") {
				name, rest, ok1 := strings.Cut(line, ":")
				v, typ, ok2 := strings.Cut(rest, "|")
				n, err := strconv.ParseUint(v, 10, 64)
				switch {
				case !ok1 || !ok2 || err != nil:
					l.bad = append(l.bad, line)
				case typ == "c":
					l.counters[name] += n
				case typ == "g":
					l.gauges[name] = n
				default:
					l.bad = append(l.bad, line)
				}
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return l
}

func (l *statsdListener) port() string { return strconv.Itoa(l.conn.LocalAddr().(*net.UDPAddr).Port) }

// await waits (within a generous bound) until every counter of want has
// reached its total, and fails if one goes past it.
func (l *statsdListener) await(t *testing.T, want map[string]uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l.mu.Lock()
		done, over := true, ""
		for name, n := range want {
			got := l.counters[name]
			if got < n {
				done = false
			}
			if got > n {
				over = name + "=" + strconv.FormatUint(got, 10)
			}
		}
		snapshot := make(map[string]uint64, len(l.counters))
		for k, v := range l.counters {
			snapshot[k] = v
		}
		l.mu.Unlock()
		if over != "" {
			t.Fatalf("counter past its total: %s (want %v)", over, want)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("statsd counters %v, want %v", snapshot, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeEnvoyStatsd: `serve --envoy-env` with the peer's statistics
// variables pushes the peer's names over UDP, tagged with EXTRA_TAGS, every
// STATS_FLUSH_INTERVAL, and what the last calls counted on shutdown.
func TestServeEnvoyStatsd(t *testing.T) {
	srv := redistest.Spawn(t)
	l := listenStatsd(t)
	root := t.TempDir()
	cfgDir := filepath.Join(root, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := "domain: env\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(cfgDir, "rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"USE_STATSD": "true", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": l.port(), "STATSD_PROTOCOL": "udp",
		"STATS_FLUSH_INTERVAL": "100ms", "EXTRA_TAGS": "release:v1.2", "LOG_LEVEL": "info",
	} {
		t.Setenv(k, v)
	}
	_, grpcAddr, logs, stop := startServeRLS(t, true, "--envoy-env")
	c, _ := rlsClient(t, grpcAddr)
	for range 3 {
		rlsCall(t, c, "env", "k", "a")
	}
	const tag = ".__release=v1_2"
	want := map[string]uint64{
		"ratelimit.service.rate_limit.env.k.total_hits" + tag:   3,
		"ratelimit.service.rate_limit.env.k.within_limit" + tag: 2,
		"ratelimit.service.rate_limit.env.k.near_limit" + tag:   1,
		"ratelimit.service.rate_limit.env.k.over_limit" + tag:   1,
		"ratelimit.service.config_load_success" + tag:           1,
		"ratelimit_server.ShouldRateLimit.total_requests" + tag: 3,
	}
	l.await(t, want) // pushed by the periodic flush
	// A call just before shutdown is pushed by the last flush.
	rlsCall(t, c, "env", "k", "b")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want["ratelimit.service.rate_limit.env.k.total_hits"+tag] = 4
	want["ratelimit.service.rate_limit.env.k.within_limit"+tag] = 3
	want["ratelimit_server.ShouldRateLimit.total_requests"+tag] = 4
	l.await(t, want)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bad) > 0 {
		t.Errorf("lines not in statsd form: %q", l.bad)
	}
	if _, ok := l.gauges["ratelimit.go.numGoroutine"+tag]; !ok {
		t.Errorf("no runtime gauge ratelimit.go.numGoroutine%s among %v", tag, l.gauges)
	}
	for name := range l.counters {
		if !strings.HasSuffix(name, tag) {
			t.Errorf("%s lacks EXTRA_TAGS", name)
		}
	}
	if !strings.Contains(logs.String(), "pushing stats to statsd") {
		t.Errorf("no statsd line in the log:\n%s", logs)
	}
}

package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/statsd/statsdtest"
)

// awaitCounters waits (within a generous bound) until every counter of
// want has reached its total at sink, and fails if one goes past it.
func awaitCounters(t *testing.T, sink *statsdtest.Sink, want map[string]uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := sink.Counters()
		done := true
		for name, n := range want {
			if got[name] > n {
				t.Fatalf("counter past its total: %s=%d (want %v)", name, got[name], want)
			}
			done = done && got[name] == n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("statsd counters %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeEnvoyStatsd: `serve --envoy-env` with the peer's statistics
// variables pushes the peer's names over UDP, tagged with EXTRA_TAGS, every
// STATS_FLUSH_INTERVAL, and what the last calls counted on shutdown.
func TestServeEnvoyStatsd(t *testing.T) {
	srv := redistest.Spawn(t)
	l := statsdtest.Listen(t)
	root := t.TempDir()
	writeFile(t, root, "ratelimit/config/rules.yaml", "domain: env\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	for k, v := range map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"USE_STATSD": "true", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": strconv.Itoa(l.Port()), "STATSD_PROTOCOL": "udp",
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
	awaitCounters(t, l, want) // pushed by the periodic flush
	// A call just before shutdown is pushed by the last flush.
	rlsCall(t, c, "env", "k", "b")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want["ratelimit.service.rate_limit.env.k.total_hits"+tag] = 4
	want["ratelimit.service.rate_limit.env.k.within_limit"+tag] = 3
	want["ratelimit_server.ShouldRateLimit.total_requests"+tag] = 4
	awaitCounters(t, l, want)
	if bad := l.Bad(); len(bad) > 0 {
		t.Errorf("lines not in statsd form: %q", bad)
	}
	if g := l.Gauges(); g["ratelimit.go.numGoroutine"+tag] == 0 {
		t.Errorf("no runtime gauge ratelimit.go.numGoroutine%s among %v", tag, g)
	}
	for name := range l.Counters() {
		if !strings.HasSuffix(name, tag) {
			t.Errorf("%s lacks EXTRA_TAGS", name)
		}
	}
	if !strings.Contains(logs.String(), "pushing stats to statsd") {
		t.Errorf("no statsd line in the log:\n%s", logs)
	}
}

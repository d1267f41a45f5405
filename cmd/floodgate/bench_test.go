package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// runBenchJSON runs `floodgate bench args... --json --quiet` and decodes its
// summary.
func runBenchJSON(t *testing.T, args ...string) benchResult {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append(append([]string{"bench"}, args...), "--json", "--quiet"), &out, &errOut)
	if err != nil {
		t.Fatalf("bench %v: %v\nstderr:\n%s", args, err, errOut.String())
	}
	var res benchResult
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("summary is not the expected JSON: %v\n%s", err, out.String())
	}
	return res
}

// checkAccounting checks that every request issued is counted exactly once.
func checkAccounting(t *testing.T, res benchResult, requests, allowed int64) {
	t.Helper()
	if got := res.Allowed + res.Denied + res.Errors; got != res.Requests {
		t.Errorf("allowed %d + denied %d + errors %d = %d, want requests %d", res.Allowed, res.Denied, res.Errors, got, res.Requests)
	}
	if requests >= 0 && res.Requests != requests {
		t.Errorf("requests = %d, want %d", res.Requests, requests)
	}
	if allowed >= 0 && res.Allowed != allowed {
		t.Errorf("allowed = %d, want %d (denied %d, errors %d: %s)", res.Allowed, allowed, res.Denied, res.Errors, res.FirstError)
	}
	if res.Errors != 0 {
		t.Errorf("errors = %d (%s), want 0", res.Errors, res.FirstError)
	}
	if res.Requests > 0 && (res.LatencyMs.P50 <= 0 || res.LatencyMs.P50 > res.LatencyMs.P99 || res.LatencyMs.P99 > res.LatencyMs.Max*1.04) {
		t.Errorf("latency percentiles out of order: %+v", res.LatencyMs)
	}
}

func TestBenchMemory(t *testing.T) {
	t.Run("hot key, exact count", func(t *testing.T) {
		// A minute-long log of 50 on one key: exactly 50 of 2,000 admitted.
		res := runBenchJSON(t, "--algorithm", "sliding_window_log", "--limit", "50", "--window", "1m",
			"--keys", "1", "--concurrency", "8", "--requests", "2000", "--duration", "1m")
		checkAccounting(t, res, 2000, 50)
		if res.Concurrency != 8 || res.Keys != 1 || !strings.HasPrefix(res.Target, "store memory") || !strings.Contains(res.Limit, "sliding_window_log") {
			t.Errorf("summary describes the run wrongly: %+v", res)
		}
	})
	t.Run("spread keys, for a duration", func(t *testing.T) {
		res := runBenchJSON(t, "--algorithm", "token_bucket", "--limit", "1000", "--window", "1m",
			"--keys", "100", "--concurrency", "4", "--duration", "200ms")
		checkAccounting(t, res, -1, -1)
		if res.Requests == 0 || res.Allowed < min(res.Requests, 100*1000) {
			t.Errorf("requests %d, allowed %d: want requests, all admitted up to 1,000 per key", res.Requests, res.Allowed)
		}
		if res.DurationS < 0.2 || res.DurationS > 5 {
			t.Errorf("duration_s = %v, want about 0.2", res.DurationS)
		}
	})
	t.Run("a rule from the config, cost 2", func(t *testing.T) {
		path := benchWriteFile(t, "floodgate.yaml", "store:\n  type: memory\nrules:\n  - name: api\n    algorithm: fixed_window\n    limit: 10\n    window: 1h\n")
		res := runBenchJSON(t, "--config", path, "--rule", "api", "--cost", "2", "--keys", "1", "--requests", "50", "--concurrency", "3")
		checkAccounting(t, res, 50, 5)
		if !strings.Contains(res.Target, "rule api (engine, as serve decides)") {
			t.Errorf("target %q: want the rule, decided by the engine", res.Target)
		}
	})
	t.Run("a shadow rule never denies, as serve decides it", func(t *testing.T) {
		// Through the store alone, 5 of 40 would be admitted; through the
		// engine, as serve decides, a shadow rule admits every request.
		path := benchWriteFile(t, "floodgate.yaml", "store:\n  type: memory\nrules:\n  - name: watch\n    algorithm: fixed_window\n    limit: 5\n    window: 1h\n    shadow: true\n")
		res := runBenchJSON(t, "--config", path, "--rule", "watch", "--keys", "1", "--requests", "40", "--concurrency", "3")
		checkAccounting(t, res, 40, 40)
	})
	t.Run("without a rule: the store's AllowN, labelled", func(t *testing.T) {
		res := runBenchJSON(t, "--algorithm", "fixed_window", "--limit", "5", "--window", "1h", "--keys", "1", "--requests", "20", "--concurrency", "2")
		checkAccounting(t, res, 20, 5)
		if !strings.Contains(res.Target, "raw AllowN (no engine)") {
			t.Errorf("target %q: want it labelled as the raw store", res.Target)
		}
	})
}

func benchWriteFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBenchTable(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"bench", "--keys", "1", "--limit", "5", "--window", "1h", "--algorithm", "fixed_window", "--concurrency", "2", "--duration", "1100ms"}, &out, &errOut)
	if err != nil {
		t.Fatal(err, errOut.String())
	}
	for _, want := range []string{"target", "store memory", "limit", "5 per 1h0m0s (fixed_window)", "load", "2 callers, 1 keys, cost 1", "requests", "allowed     5 (", "denied", "errors      0 (0.0%)", "throughput", "latency", "p99.9"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	// A non-terminal stderr gets one progress line per second.
	if !strings.Contains(errOut.String(), "req/s  p99") || !strings.Contains(errOut.String(), "admitted") {
		t.Errorf("no progress line on stderr:\n%s", errOut.String())
	}
}

func TestBenchHTTP(t *testing.T) {
	cfg, err := config.Parse([]byte("rules:\n  - name: first\n    algorithm: token_bucket\n    capacity: 1000\n    refill: 1000/s\n  - name: log\n    algorithm: sliding_window_log\n    limit: 30\n    window: 1m\n"), "bench.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(memory.New(), policy, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	res := runBenchJSON(t, "--target", "http", "--url", ts.URL, "--rule", "log", "--keys", "1", "--concurrency", "8", "--requests", "400", "--duration", "1m")
	checkAccounting(t, res, 400, 30)
	if !strings.Contains(res.Target, "rule log") || !strings.Contains(res.Limit, "sliding_window_log") {
		t.Errorf("target %q, limit %q: want the rule and its description", res.Target, res.Limit)
	}
	// Without --rule: the server's first rule, admitting everything here.
	res = runBenchJSON(t, "--target", "http", "--url", ts.URL, "--keys", "50", "--concurrency", "4", "--requests", "300")
	checkAccounting(t, res, 300, 300)
	if !strings.Contains(res.Target, "rule first") {
		t.Errorf("target %q: want the first rule", res.Target)
	}

	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"bench", "--target", "http", "--url", ts.URL, "--rule", "nope", "--quiet"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `no rule "nope"`) {
		t.Errorf("unknown rule: err = %v, want one naming it", err)
	}
}

func TestBenchGRPC(t *testing.T) {
	rules, err := envoy.Parse(envoy.Source{Name: "bench.yaml", Data: []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 20, algorithm: sliding_window_log}\n")})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoy.New(memory.New(), rules, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := envoy.NewGRPCServer(svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()

	res := runBenchJSON(t, "--target", "grpc", "--grpc-addr", ln.Addr().String(), "--domain", "edge", "--descriptor", "user",
		"--keys", "1", "--concurrency", "8", "--requests", "300", "--duration", "1m")
	checkAccounting(t, res, 300, 20)
	res = runBenchJSON(t, "--target", "grpc", "--grpc-addr", ln.Addr().String(), "--domain", "edge", "--descriptor", "user",
		"--keys", "1000", "--concurrency", "4", "--requests", "200")
	checkAccounting(t, res, 200, -1)
	if res.Allowed < 180 {
		t.Errorf("allowed %d of 200 over 1,000 keys of 20 per minute, want nearly all", res.Allowed)
	}
}

func TestBenchRedis(t *testing.T) {
	stores := []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"standalone", func(t *testing.T) []string {
			return []string{"--store", "redis", "--redis-addr", redistest.StandaloneAddr(t)}
		}},
		{"cluster", func(t *testing.T) []string {
			return []string{"--store", "redis-cluster", "--redis-addrs", strings.Join(redistest.ClusterAddrs(t), ",")}
		}},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			args := append(s.args(t), "--algorithm", "sliding_window_log", "--limit", "40", "--window", "1m", "--keys", "1", "--concurrency", "16", "--requests", "300", "--duration", "1m")
			res := runBenchJSON(t, args...)
			checkAccounting(t, res, 300, 40)
			if !strings.Contains(res.Target, "redis") {
				t.Errorf("target %q: want the Redis store", res.Target)
			}
		})
	}
}

func TestBenchEveryRequestFails(t *testing.T) {
	// Nothing listens on the port: every call fails, and the command says so
	// after its summary.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"bench", "--target", "grpc", "--grpc-addr", addr, "--domain", "d", "--descriptor", "k", "--requests", "5", "--concurrency", "1", "--timeout", "2s", "--json", "--quiet"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "every request failed") {
		t.Fatalf("err = %v, want every request failed", err)
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("no JSON summary before the error: %v\n%s", err, out.String())
	}
	if res.Requests != 5 || res.Errors != 5 || res.FirstError == "" {
		t.Errorf("requests %d, errors %d, first error %q: want 5, 5 and a message", res.Requests, res.Errors, res.FirstError)
	}
}

func TestBenchInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	var out, errOut bytes.Buffer
	start := time.Now()
	if err := run(ctx, []string{"bench", "--duration", "1m", "--concurrency", "4", "--json", "--quiet"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("an interrupted run took %s", time.Since(start))
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted {
		t.Error("interrupted = false, want true")
	}
	checkAccounting(t, res, -1, -1)
}

func TestBenchUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--target", "grpc"}, "needs --domain and --descriptor"},
		{[]string{"--target", "udp"}, `--target "udp" is not store, http or grpc`},
		{[]string{"--target", "http", "--algorithm", "fixed_window"}, "--algorithm does not apply to --target http"},
		{[]string{"--target", "grpc", "--domain", "d", "--descriptor", "k", "--rule", "r"}, "--url and --rule apply to --target http"},
		{[]string{"--url", "http://x"}, "--url applies to --target http or grpc"},
		{[]string{"--rule", "api"}, "--rule needs --config"},
		{[]string{"--concurrency", "0"}, "--concurrency 0 must be at least 1"},
		{[]string{"--keys", "0"}, "--keys 0 must be at least 1"},
		{[]string{"--duration", "0s"}, "--duration 0s must be positive"},
		{[]string{"--cost", "0"}, "--cost 0 must be at least 1"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"bench"}, tt.args...), &out, &errOut)
		if !errors.Is(err, errUsage) {
			t.Errorf("bench %v: err = %v, want a usage error", tt.args, err)
		}
		if !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("bench %v: stderr lacks %q:\n%s", tt.args, tt.want, errOut.String())
		}
	}
	// A limit the store rejects is an error before any request.
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"bench", "--limit", "5", "--cost", "6", "--quiet"}, &out, &errOut); err == nil {
		t.Error("cost above the limit: no error")
	}
}

func TestFmtLatency(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{45, "45ns"}, {1500, "1.5µs"}, {250 * time.Microsecond, "250µs"}, {1234 * time.Microsecond, "1.23ms"},
		{25 * time.Millisecond, "25.0ms"}, {2500 * time.Millisecond, "2.50s"},
	} {
		if got := fmtLatency(tt.d); got != tt.want {
			t.Errorf("fmtLatency(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := fmtCount(1234567.4); got != "1,234,567" {
		t.Errorf("fmtCount = %q", got)
	}
}

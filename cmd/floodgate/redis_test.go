package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/storekey"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// serveConfig writes a config for store type typ at addrs with a key prefix
// unique to this test, so runs never share keys on the shared servers.
func serveConfig(t *testing.T, typ string, addrs []string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = `"` + a + `"`
	}
	cfg := fmt.Sprintf(`store:
  type: %s
  addrs: [%s]
  timeout: 200ms
  key_prefix: "fgtest-%s:"
rules:
  - name: login
    algorithm: sliding_window_log
    limit: 3
    window: 1m
    failure_mode: closed
  - name: api
    algorithm: token_bucket
    capacity: 5
    refill: 1/m
    failure_mode: open
  - name: counter
    algorithm: sliding_window_counter
    limit: 2
    window: 1h
  - name: fixed
    algorithm: fixed_window
    limit: 2
    window: 1h
`, typ, strings.Join(quoted, ", "), hex.EncodeToString(b[:]))
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type checkReply struct {
	Allowed          bool  `json:"allowed"`
	Remaining        int64 `json:"remaining"`
	RetryAfterMs     int64 `json:"retry_after_ms"`
	StoreUnavailable bool  `json:"store_unavailable"`
}

func check(t *testing.T, base, rule, key string) (int, checkReply, http.Header) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"rule": rule, "key": key})
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r checkReply
	if resp.StatusCode == 200 || resp.StatusCode == 429 {
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, r, resp.Header
}

// TestServeOnRedis drives `floodgate serve` end to end on standalone Redis
// and the 3-primary/3-replica cluster: every algorithm's decisions, headers,
// hostile keys, reset and readiness.
func TestServeOnRedis(t *testing.T) {
	stores := []struct {
		typ   string
		addrs func(*testing.T) []string
	}{
		{"redis", func(t *testing.T) []string { return []string{redistest.StandaloneAddr(t)} }},
		{"redis-cluster", func(t *testing.T) []string { return redistest.ClusterAddrs(t) }},
	}
	for _, s := range stores {
		t.Run(s.typ, func(t *testing.T) {
			path := serveConfig(t, s.typ, s.addrs(t))
			base, _, stop := startServe(t, "--config", path)
			waitReady(t, base) // as a readiness probe would: the store connected
			for _, c := range []struct {
				rule  string
				quota int
			}{{"login", 3}, {"api", 5}, {"counter", 2}, {"fixed", 2}} {
				for i := range c.quota {
					code, r, h := check(t, base, c.rule, "user-42")
					if code != 200 || r.Remaining != int64(c.quota-i-1) {
						t.Fatalf("%s request %d: %d %+v", c.rule, i+1, code, r)
					}
					if h.Get("RateLimit-Policy") == "" || h.Get("X-RateLimit-Limit") != fmt.Sprint(c.quota) {
						t.Fatalf("%s: headers %v", c.rule, h)
					}
				}
				code, r, h := check(t, base, c.rule, "user-42")
				if code != 429 || r.RetryAfterMs <= 0 || h.Get("Retry-After") == "" {
					t.Fatalf("%s over the limit: %d %+v %v", c.rule, code, r, h)
				}
			}
			// floodgate check reads the keys the server wrote.
			var out bytes.Buffer
			if err := run(context.Background(), []string{"check", "--config", path, "--rule", "login", "--key", "user-42"}, &out, io.Discard); !errors.Is(err, errDenied) {
				t.Fatalf("check after the server's denial: %v %s, want denied", err, out.String())
			}
			// Hostile keys work and stay apart, on the cluster too; the
			// empty key, one counter every such caller would share, is
			// refused.
			if code, _, _ := check(t, base, "login", ""); code != 400 {
				t.Fatalf("the empty key: %d, want 400", code)
			}
			for i, k := range []string{"{", "}", "{}", "}{", "\x00", "a\nb", strings.Repeat("x", 4096)} {
				for j := range 3 {
					if code, _, _ := check(t, base, "login", k); code != 200 {
						t.Fatalf("hostile key #%d request %d: %d", i, j+1, code)
					}
				}
			}
			resp, err := http.Post(base+"/v1/reset", "application/json", strings.NewReader(`{"rule":"login","key":"user-42"}`))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("reset: %v %v", resp, err)
			}
			resp.Body.Close()
			if code, _, _ := check(t, base, "login", "user-42"); code != 200 {
				t.Fatalf("after reset: %d", code)
			}
			resp, err = http.Get(base + "/readyz")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("readyz: %v %v", resp, err)
			}
			resp.Body.Close()
			if err := stop(); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		})
	}
}

// TestServeRedisDown: with Redis stopped, fail-open rules admit (saying the
// store was unavailable), fail-closed rules answer 503, and readiness fails.
func TestServeRedisDown(t *testing.T) {
	srv := redistest.Spawn(t)
	path := serveConfig(t, "redis", []string{srv.Addr})
	base, logs, _ := startServe(t, "--config", path)
	if code, _, _ := check(t, base, "login", "k"); code != 200 {
		t.Fatalf("with Redis up: %d", code)
	}
	srv.Kill()
	code, r, _ := check(t, base, "api", "k")
	if code != 200 || !r.Allowed || !r.StoreUnavailable {
		t.Fatalf("fail-open rule with Redis down: %d %+v", code, r)
	}
	code, _, h := check(t, base, "login", "k")
	if code != 503 || h.Get("Retry-After") == "" {
		t.Fatalf("fail-closed rule with Redis down: %d %v", code, h)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz with Redis down: %d", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), "store unavailable") {
		t.Errorf("no log line about the unavailable store:\n%s", logs)
	}
}

// TestServeStartsWithRedisDown: serve starts while Redis is down, answers
// every rule by its failure mode, says degraded in /readyz and why in the
// log, and decides once Redis is up. With store.require_at_start it
// refuses to start instead.
func TestServeStartsWithRedisDown(t *testing.T) {
	srv := redistest.Spawn(t)
	srv.Kill()
	path := serveConfig(t, "redis", []string{srv.Addr})
	base, logs, stop := startServe(t, "--config", path)
	if code, r, _ := check(t, base, "api", "k"); code != 200 || !r.Allowed || !r.StoreUnavailable {
		t.Fatalf("fail-open rule before Redis is up: %d %+v", code, r)
	}
	if code, _, _ := check(t, base, "login", "k"); code != 503 {
		t.Fatalf("fail-closed rule before Redis is up: %d", code)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"state":"degraded"`) || !strings.Contains(string(body), "connection refused") {
		t.Fatalf("readyz before Redis is up: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(logs.String(), "cannot connect to Redis") {
		t.Errorf("the log does not say Redis is unreachable:\n%s", logs)
	}
	srv.Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, r, _ := check(t, base, "login", "k")
		if code == 200 && !r.StoreUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fail-closed rule 5s after Redis came up: %d %+v", code, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	srv.Kill()
	cfg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	strict := strings.Replace(string(cfg), "  timeout: 200ms\n", "  timeout: 200ms\n  require_at_start: true\n", 1)
	if err := os.WriteFile(path, []byte(strict), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = run(t.Context(), []string{"serve", "--listen", "127.0.0.1:0", "--config", path}, &out, &errOut)
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("serve with require_at_start and Redis down: %v; want it to fail, connection refused", err)
	}
}

// TestCheckStoreErrorNeverAdmits: a key that holds the wrong type of value
// makes the Redis script fail (not an outage), and `floodgate check` reports
// a store error, never an admission, even for a fail-open rule.
func TestCheckStoreErrorNeverAdmits(t *testing.T) {
	addr := redistest.StandaloneAddr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "fgtest-" + hex.EncodeToString(b[:]) + ":"
	cfg := fmt.Sprintf("store:\n  type: redis\n  addrs: [%q]\n  key_prefix: %q\nrules:\n  - name: api\n    algorithm: sliding_window_log\n    limit: 1\n    window: 1m\n    failure_mode: open\n", addr, prefix)
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	key := redisstore.Key(prefix, storekey.Of("", "api", "victim"), floodgate.SlidingWindowLog)
	ctx := context.Background()
	if err := client.Do(ctx, client.B().Set().Key(key).Value("not a sorted set").Ex(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var out bytes.Buffer
		err := run(ctx, []string{"check", "--config", path, "--rule", "api", "--key", "victim"}, &out, io.Discard)
		if err == nil || errors.Is(err, errDenied) || !strings.Contains(err.Error(), "store error") {
			t.Fatalf("check on a broken key: err %v, output %q; want a store error", err, out.String())
		}
	}
}

// TestConfigValidateConnect: --connect connects to the store as serve does
// at start, so an unreachable Redis fails validate too; without it,
// validate checks the file alone.
func TestConfigValidateConnect(t *testing.T) {
	up := serveConfig(t, "redis", []string{redistest.StandaloneAddr(t)})
	if out, stderr, code := cli(t, "config", "validate", "--connect", up); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("a reachable Redis: exit %d %s %s", code, out, stderr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	down := serveConfig(t, "redis", []string{closed})
	if _, stderr, code := cli(t, "config", "validate", "--connect", down); code != 1 || !strings.Contains(stderr, closed) {
		t.Errorf("an unreachable Redis with --connect: exit %d %s", code, stderr)
	}
	if out, stderr, code := cli(t, "config", "validate", down); code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("an unreachable Redis without --connect: exit %d %s %s", code, out, stderr)
	}
}

// waitReady polls base's /readyz until it answers 200, within a generous
// bound: serve listens before its store has connected.
func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 30s: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

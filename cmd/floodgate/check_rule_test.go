package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/storekey"

	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// TestCheckDecidesAsServer: `floodgate check` (decideRule, with the
// server's Rule.Check) and the server's POST /v1/check build the same
// check: the same steps answered alternately by the two on one store give,
// byte for byte, the answers the server alone gives on another, so they
// read and write the same keys with the same limit, cost and shadow.
func TestCheckDecidesAsServer(t *testing.T) {
	cfg, err := config.Parse([]byte(`store:
  type: memory
rules:
  - name: api
    algorithm: sliding_window_log
    limit: 3
    window: 1m
  - name: rls
    algorithm: fixed_window
    limit: 4
    window: 1h
  - name: watch
    algorithm: token_bucket
    capacity: 2
    refill: 1/s
    shadow: true
    local_cache: false
`), "check.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		rule, key string
		cost      int64
		advance   time.Duration
	}
	long := strings.Repeat("k", storekey.MaxLen+10) // hashed into the store key
	var steps []step
	for _, rule := range []string{"api", "rls", "watch"} {
		for _, key := range []string{"a", "a|b", long} {
			for i := range 5 {
				steps = append(steps, step{rule: rule, key: key, cost: int64(1 + i%2), advance: time.Duration(i) * 700 * time.Millisecond})
			}
		}
	}
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	newServer := func(t *testing.T) (*server.Server, *memory.Store, *clocktest.Manual) {
		clock := clocktest.NewManual(start)
		store := memory.New(memory.WithClock(clock))
		srv, err := server.New(store, policy, server.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return srv, store, clock
	}
	ask := func(t *testing.T, srv *server.Server, s step) string {
		body, _ := json.Marshal(map[string]any{"rule": s.rule, "key": s.key, "cost": s.cost})
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && rec.Code != http.StatusTooManyRequests {
			t.Fatalf("%+v: HTTP %d: %s", s, rec.Code, rec.Body)
		}
		return strings.TrimSpace(rec.Body.String())
	}

	// The server alone.
	srvA, _, clockA := newServer(t)
	var want []string
	denied, shadowDenied := 0, 0
	for _, s := range steps {
		clockA.Advance(s.advance)
		a := ask(t, srvA, s)
		want = append(want, a)
		if strings.Contains(a, `"allowed":false`) {
			denied++
		}
		if strings.Contains(a, `"shadow_denied":true`) {
			shadowDenied++
		}
	}
	if denied == 0 || shadowDenied == 0 {
		t.Fatalf("the steps deny %d and shadow-deny %d: too few to compare", denied, shadowDenied)
	}

	// The server and the CLI's decision, taking turns on one store.
	srvB, storeB, clockB := newServer(t)
	engine, err := decide.New(storeB, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clockB.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		clockB.Advance(s.advance)
		var got string
		if i%2 == 0 {
			got = ask(t, srvB, s)
		} else {
			rule, err := configRule(cfg, s.rule)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := decideRule(context.Background(), engine, rule, s.key, s.cost)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(resp)
			got = string(b)
		}
		if got != want[i] {
			t.Errorf("step %d %s key %.10q cost %d (by the %s): got %s, want the server's %s",
				i, s.rule, s.key, s.cost, map[bool]string{true: "server", false: "CLI"}[i%2 == 0], got, want[i])
		}
	}
}

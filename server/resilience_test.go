package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

const resilienceConfig = `
rules:
  - name: login
    algorithm: sliding_window_log
    limit: 4
    window: 1m
    failure_mode: local
    instances: 2
  - name: uncached
    algorithm: fixed_window
    limit: 1
    window: 1m
    local_cache: false
`

// outageStore is a memory store that is unavailable while down is set.
type outageStore struct {
	*memory.Store
	down  atomic.Bool
	calls atomic.Int64
}

// InProcess reports false: the store stands for one that can fail, which
// decides elsewhere, so the engine keeps its over-limit cache in front.
func (s *outageStore) InProcess() bool { return false }

func (s *outageStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return failingStore{}.AllowN(ctx, key, l, n)
	}
	return s.Store.AllowN(ctx, key, l, n)
}

func (s *outageStore) Reset(ctx context.Context, key string, l floodgate.Limit) error {
	if s.down.Load() {
		return failingStore{}.Reset(ctx, key, l)
	}
	return s.Store.Reset(ctx, key, l)
}

// TestLocalFallbackAnswers: during an outage a failure_mode local rule
// answers at its share, says so in the body, a header and the metrics;
// afterwards it is shared again.
func TestLocalFallbackAnswers(t *testing.T) {
	var s *outageStore
	f := newFixture(t, resilienceConfig, func(c floodgate.Clock) floodgate.Store {
		s = &outageStore{Store: memory.New(memory.WithClock(c))}
		return s
	})
	s.down.Store(true)
	for i, want := range []int{200, 200, 429} {
		rec := f.do("POST", "/v1/check", `{"rule":"login","key":"alice"}`)
		got := decode[server.CheckResponse](t, rec)
		if rec.Code != want || !got.LocalFallback || got.Limit != 2 || rec.Header().Get("Floodgate-Fallback") != "local" {
			t.Fatalf("request %d during the outage: %d %+v %v, want %d decided locally under 2", i, rec.Code, got, rec.Header(), want)
		}
	}
	if rec := f.do("GET", "/v1/forward-auth?rule=login", "", "X-Forwarded-For", "198.51.100.1"); rec.Code != 200 || rec.Header().Get("Floodgate-Fallback") != "local" {
		t.Fatalf("forward auth during the outage: %d %v", rec.Code, rec.Header())
	}
	body := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`floodgate_failure_mode_activations_total{mode="local",rule="login"} 4`,
		`floodgate_store_errors_total{rule="login"} 4`,
		`floodgate_decisions_total{outcome="allowed",rule="login"} 3`,
		`floodgate_decisions_total{outcome="denied",rule="login"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Forward auth's denial names the local limit it counted against.
	var rec *httptest.ResponseRecorder
	for range 2 {
		rec = f.do("GET", "/v1/forward-auth?rule=login", "", "X-Forwarded-For", "198.51.100.1")
	}
	if want := `policy \"login\": 2 per`; rec.Code != 429 || !strings.Contains(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), "this instance's share") {
		t.Errorf("forward auth's local denial: %d %s, want 429 naming the local 2", rec.Code, rec.Body)
	}
	s.down.Store(false)
	rec = f.do("POST", "/v1/check", `{"rule":"login","key":"alice"}`)
	if got := decode[server.CheckResponse](t, rec); rec.Code != 200 || got.LocalFallback || got.Limit != 4 || got.Remaining != 3 || rec.Header().Get("Floodgate-Fallback") != "" {
		t.Fatalf("after the outage: %d %+v, want the shared limit", rec.Code, got)
	}
	rules := f.do("GET", "/v1/rules", "").Body.String()
	if !strings.Contains(rules, `"failure_mode":"local","local_share":0.5`) {
		t.Errorf("rules listing lacks the local share: %s", rules)
	}
}

// TestOverLimitCacheAnswers: a key over its limit is answered without the
// store until /v1/reset, which clears it; local_cache: false opts out.
func TestOverLimitCacheAnswers(t *testing.T) {
	var s *outageStore
	f := newFixture(t, resilienceConfig, func(c floodgate.Clock) floodgate.Store {
		s = &outageStore{Store: memory.New(memory.WithClock(c))}
		return s
	})
	for range 4 {
		f.do("POST", "/v1/check", `{"rule":"login","key":"bob"}`)
	}
	calls := s.calls.Load()
	for range 5 {
		if rec := f.do("POST", "/v1/check", `{"rule":"login","key":"bob"}`); rec.Code != 429 || rec.Header().Get("Retry-After") != "60" {
			t.Fatalf("over the limit: %d %v", rec.Code, rec.Header())
		}
	}
	if got := s.calls.Load() - calls; got != 1 {
		t.Errorf("5 requests over the limit made %d store calls, want 1", got)
	}
	if rec := f.do("POST", "/v1/reset", `{"rule":"login","key":"bob"}`); rec.Code != 200 {
		t.Fatalf("reset: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", "/v1/check", `{"rule":"login","key":"bob"}`); rec.Code != 200 {
		t.Fatalf("after the reset: %d, want admitted", rec.Code)
	}
	calls = s.calls.Load()
	for range 3 {
		f.do("POST", "/v1/check", `{"rule":"uncached","key":"bob"}`)
	}
	if got := s.calls.Load() - calls; got != 3 {
		t.Errorf("local_cache: false made %d store calls for 3 requests, want 3", got)
	}
	body := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`floodgate_overlimit_cache_hits_total{rule="login"} 4`,
		`floodgate_overlimit_cache_entries 0`,
		`floodgate_overlimit_cache_evictions_total 0`,
		`floodgate_overlimit_cache_waits_total 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestLeasedRuleMetrics: a rule with a lease decides through it (a store
// call per block, not per request) and counts those decisions in
// floodgate_leased_decisions_total; its fetches are the store latency's
// "lease" operation.
func TestLeasedRuleMetrics(t *testing.T) {
	var s *outageStore
	f := newFixture(t, `
rules:
  - name: tenant
    algorithm: fixed_window
    limit: 100
    window: 1m
    lease: {max_share: 0.5}
`, func(c floodgate.Clock) floodgate.Store {
		s = &outageStore{Store: memory.New(memory.WithClock(c))}
		return s
	})
	t.Cleanup(func() { _ = f.srv.Close(context.Background()) })
	admitted := 0
	for range 120 {
		if rec := f.do("POST", "/v1/check", `{"rule":"tenant","key":"acme"}`); rec.Code == 200 {
			admitted++
		}
	}
	if admitted != 100 {
		t.Errorf("admitted %d of 120 under a limit of 100", admitted)
	}
	if calls := s.calls.Load(); calls > 20 {
		t.Errorf("%d store calls for 120 requests, want a block per many", calls)
	}
	metrics := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{`floodgate_leased_decisions_total{rule="tenant"} 120`, `floodgate_store_latency_seconds_count{op="lease"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

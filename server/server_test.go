package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

const testConfig = `
rules:
  - name: login
    algorithm: sliding_window_log
    limit: 3
    window: 1m
    failure_mode: closed
  - name: api
    algorithm: token_bucket
    capacity: 10
    refill: 1/s
    failure_mode: open
  - name: shadowed
    algorithm: fixed_window
    limit: 1
    window: 1m
    shadow: true
client_ip:
  trusted_proxies: [10.0.0.0/8]
forward_auth:
  deny_status: 403
`

type fixture struct {
	t     testing.TB
	srv   *server.Server
	h     http.Handler
	clock *clocktest.Manual
}

func newFixture(t testing.TB, yaml string, store func(floodgate.Clock) floodgate.Store) *fixture {
	t.Helper()
	return newPolicyFixture(t, policyOf(t, yaml), store)
}

func policyOf(t testing.TB, yaml string) server.Policy {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newPolicyFixture(t testing.TB, p server.Policy, store func(floodgate.Clock) floodgate.Store) *fixture {
	t.Helper()
	clock := clocktest.NewManual(time.Date(2030, 1, 7, 0, 0, 30, 0, time.UTC))
	if store == nil {
		store = func(c floodgate.Clock) floodgate.Store { return memory.New(memory.WithClock(c)) }
	}
	srv, err := server.New(store(clock), p, server.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, srv: srv, h: srv.Handler(), clock: clock}
}

func (f *fixture) do(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return v
}

func TestCheckDecisions(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	for i, want := range []struct {
		status    int
		remaining int64
	}{{200, 2}, {200, 1}, {200, 0}, {429, 0}} {
		rec := f.do("POST", "/v1/check", `{"rule":"login","key":"user-42"}`)
		if rec.Code != want.status {
			t.Fatalf("request %d: status %d, want %d: %s", i+1, rec.Code, want.status, rec.Body)
		}
		got := decode[server.CheckResponse](t, rec)
		if got.Remaining != want.remaining || got.Limit != 3 || got.Allowed != (want.status == 200) {
			t.Fatalf("request %d: %+v", i+1, got)
		}
		if want.status == 429 {
			if got.RetryAfterMs != 60000 || rec.Header().Get("Retry-After") != "60" {
				t.Fatalf("denied: retry_after_ms %d, Retry-After %q", got.RetryAfterMs, rec.Header().Get("Retry-After"))
			}
		} else if got.ResetAfterMs != 60000 {
			t.Fatalf("reset_after_ms = %d, want 60000", got.ResetAfterMs)
		}
	}
	// Another key is untouched; a cost of 3 fits it exactly.
	rec := f.do("POST", "/v1/check", `{"rule":"login","key":"user-43","cost":3}`)
	if got := decode[server.CheckResponse](t, rec); rec.Code != 200 || got.Remaining != 0 {
		t.Fatalf("cost 3 on a fresh key: %d %+v", rec.Code, got)
	}
	// The retry time is honoured.
	f.clock.Advance(time.Minute)
	if rec := f.do("POST", "/v1/check", `{"rule":"login","key":"user-42"}`); rec.Code != 200 {
		t.Fatalf("after retry_after: status %d", rec.Code)
	}
}

func TestCheckErrors(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	cases := []struct {
		name, body string
		status     int
		detail     string
	}{
		{"unknown rule", `{"rule":"nope","key":"k"}`, 404, "nope"},
		{"missing rule", `{"key":"k"}`, 400, "rule"},
		{"missing key", `{"rule":"login"}`, 400, "key"},
		{"empty key", `{"rule":"login","key":""}`, 400, `"key" is empty`},
		{"long unknown rule", `{"rule":"` + strings.Repeat("r", 10<<10) + `","key":"k"}`, 404, `"` + strings.Repeat("r", 64) + `…"`},
		{"malformed json", `{"rule":"login",`, 400, "JSON"},
		{"not an object", `[1,2]`, 400, "JSON"},
		{"unknown field", `{"rule":"login","key":"k","kost":1}`, 400, "kost"},
		{"trailing data", `{"rule":"login","key":"k"} {}`, 400, "after"},
		{"zero cost", `{"rule":"login","key":"k","cost":0}`, 400, "cost 0"},
		{"negative cost", `{"rule":"login","key":"k","cost":-5}`, 400, "cost -5"},
		{"cost above limit", `{"rule":"login","key":"k","cost":4}`, 400, "cost 4"},
		{"absurd cost", `{"rule":"login","key":"k","cost":1e30}`, 400, "JSON"},
		{"fractional cost", `{"rule":"login","key":"k","cost":1.5}`, 400, "JSON"},
		{"key not a string", `{"rule":"login","key":42}`, 400, "JSON"},
		{"huge body", `{"rule":"login","key":"` + strings.Repeat("x", server.MaxBodyBytes) + `"}`, 413, "bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := f.do("POST", "/v1/check", c.body)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q", ct)
			}
			p := decode[map[string]any](t, rec)
			if p["status"] != float64(c.status) || !strings.Contains(fmt.Sprint(p["detail"]), c.detail) {
				t.Fatalf("problem %v, want status %d and detail mentioning %q", p, c.status, c.detail)
			}
			if n := len(fmt.Sprint(p["detail"])); n > 256 {
				t.Fatalf("detail of %d bytes: the caller's input echoed whole?", n)
			}
		})
	}
	// Wrong method and unknown path are problems too.
	if rec := f.do("GET", "/v1/check", ""); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /v1/check: %d %v", rec.Code, rec.Header())
	}
	// Forward auth takes the rule's name from a query parameter or a
	// header, with no body bound: 60 KB of it are not repeated.
	rec := f.do("GET", "/v1/forward-auth?rule="+strings.Repeat("é", 30<<10), "")
	if p := decode[map[string]any](t, rec); rec.Code != 404 || fmt.Sprint(p["detail"]) != `no rule named "`+strings.Repeat("é", 32)+`…"; GET /v1/rules lists them` {
		t.Errorf("forward auth with a 60 KB rule name: %d %v", rec.Code, p)
	}
	if rec := f.do("GET", "/v2/nothing", ""); rec.Code != 404 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("unknown path: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

// reset_after_ms never passes the window of an hour, whatever the burst in
// one instant; retry_after_ms is still a wait after which the retry is
// admitted, never one earlier.
func TestResetAfterWithinWindow(t *testing.T) {
	cases := []struct{ name, rule string }{
		{"sliding_window_log", "algorithm: sliding_window_log\n    limit: 5\n    window: 1h"},
		{"fixed_window", "algorithm: fixed_window\n    limit: 5\n    window: 1h"},
		{"token_bucket", "algorithm: token_bucket\n    capacity: 5\n    refill: 5/h"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, "rules:\n  - name: hour\n    "+c.rule+"\n", nil)
			for i, cost := range []int{1, 3, 1} { // one instant: entries at consecutive microseconds
				rec := f.do("POST", "/v1/check", fmt.Sprintf(`{"rule":"hour","key":"k","cost":%d}`, cost))
				got := decode[server.CheckResponse](t, rec)
				if rec.Code != 200 || got.ResetAfterMs > 3_600_000 || got.ResetAfterMs <= 0 {
					t.Fatalf("request %d of cost %d: status %d, reset_after_ms %d, want at most 3600000", i+1, cost, rec.Code, got.ResetAfterMs)
				}
				// The headers too: RateLimit's t and X-RateLimit-Reset.
				h := rec.Header()
				rl, reset := h.Get("RateLimit"), h.Get("X-RateLimit-Reset")
				_, tp, _ := strings.Cut(rl, ";t=")
				secs, err1 := strconv.ParseInt(tp, 10, 64)
				at, err2 := strconv.ParseInt(reset, 10, 64)
				if err1 != nil || err2 != nil || secs <= 0 || secs > 3600 || at > f.clock.Now().Unix()+3600 {
					t.Fatalf("request %d of cost %d: RateLimit %q, X-RateLimit-Reset %s (now %d): past the hour", i+1, cost, rl, reset, f.clock.Now().Unix())
				}
			}
			rec := f.do("POST", "/v1/check", `{"rule":"hour","key":"k"}`)
			got := decode[server.CheckResponse](t, rec)
			if rec.Code != 429 || got.ResetAfterMs > 3_600_000 {
				t.Fatalf("over the limit: status %d, reset_after_ms %d", rec.Code, got.ResetAfterMs)
			}
			wait := time.Duration(got.RetryAfterMs) * time.Millisecond
			f.clock.Advance(wait - time.Millisecond)
			if rec := f.do("POST", "/v1/check", `{"rule":"hour","key":"k"}`); rec.Code != 429 {
				t.Fatalf("a millisecond before retry_after_ms (%d): status %d", got.RetryAfterMs, rec.Code)
			}
			f.clock.Advance(time.Millisecond)
			if rec := f.do("POST", "/v1/check", `{"rule":"hour","key":"k"}`); rec.Code != 200 {
				t.Fatalf("at retry_after_ms (%d): status %d %s", got.RetryAfterMs, rec.Code, rec.Body)
			}
		})
	}
}

func TestHostileKeysAreDistinct(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	keys := []string{"{", "}", "{}", "}{", "\x00", "a\nb", "\xff", strings.Repeat("k", 8<<10)}
	for i, k := range keys {
		body, _ := json.Marshal(map[string]any{"rule": "login", "key": k, "cost": 3})
		if rec := f.do("POST", "/v1/check", string(body)); rec.Code != 200 {
			t.Errorf("key #%d: status %d (shares state with another key?): %s", i, rec.Code, rec.Body)
		}
	}
}

func TestShadowRuleNeverDenies(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	f.do("POST", "/v1/check", `{"rule":"shadowed","key":"k"}`)
	rec := f.do("POST", "/v1/check", `{"rule":"shadowed","key":"k"}`)
	got := decode[server.CheckResponse](t, rec)
	if rec.Code != 200 || !got.Allowed || !got.Shadow || !got.ShadowDenied {
		t.Fatalf("shadow rule over its limit: %d %+v", rec.Code, got)
	}
}

func TestResetAndRules(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	f.do("POST", "/v1/check", `{"rule":"login","key":"k","cost":3}`)
	if rec := f.do("POST", "/v1/reset", `{"rule":"login","key":"k"}`); rec.Code != 200 {
		t.Fatalf("reset: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", "/v1/check", `{"rule":"login","key":"k","cost":3}`); rec.Code != 200 {
		t.Fatalf("after reset: %d", rec.Code)
	}
	if rec := f.do("POST", "/v1/reset", `{"rule":"nope","key":"k"}`); rec.Code != 404 {
		t.Fatalf("reset of unknown rule: %d", rec.Code)
	}
	if rec := f.do("POST", "/v1/reset", `{"rule":"login","key":""}`); rec.Code != 400 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("reset of the empty key: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	rules := decode[struct{ Rules []server.RuleInfo }](t, f.do("GET", "/v1/rules", ""))
	if len(rules.Rules) != 3 || rules.Rules[0].Name != "api" || rules.Rules[0].Refill != 1 || rules.Rules[1].FailureMode != "closed" {
		t.Fatalf("rules: %+v", rules)
	}
}

func TestForwardAuth(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	fa := func(remote, xff string) int {
		req := httptest.NewRequest("GET", "/v1/forward-auth?rule=login", nil)
		req.RemoteAddr = remote
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		return rec.Code
	}
	// Through a trusted proxy, the client is the address the proxy saw.
	for range 3 {
		if got := fa("10.1.2.3:5555", "198.51.100.7"); got != 200 {
			t.Fatalf("forward auth: %d", got)
		}
	}
	if got := fa("10.1.2.3:5555", "198.51.100.7"); got != 403 {
		t.Fatalf("4th request: %d, want the configured 403", got)
	}
	// The denial's body is the middleware's problem, at the deny status.
	req := httptest.NewRequest("GET", "/v1/forward-auth?rule=login", nil)
	req.RemoteAddr, req.Header["X-Forwarded-For"] = "10.1.2.3:5555", []string{"198.51.100.7"}
	denied := httptest.NewRecorder()
	f.h.ServeHTTP(denied, req)
	var got problem.Details
	if err := json.Unmarshal(denied.Body.Bytes(), &got); err != nil || denied.Header().Get("Content-Type") != problem.ContentType {
		t.Fatalf("denial body %q (%v), Content-Type %q", denied.Body, err, denied.Header().Get("Content-Type"))
	}
	if want := problem.Quota(403, "login", floodgate.NewLimit(floodgate.SlidingWindowLog, 3, time.Minute).String(), false); !reflect.DeepEqual(got, want) {
		t.Errorf("denial body %+v, want %+v", got, want)
	}
	// A client spoofing the victim's address directly is keyed on its own.
	if got := fa("203.0.113.9:1234", "198.51.100.7"); got != 200 {
		t.Fatalf("spoofed X-Forwarded-For from an untrusted peer: %d", got)
	}
	// Spoofing through the proxy: the rightmost untrusted entry is the client.
	if got := fa("10.1.2.3:5555", "198.51.100.7, 203.0.113.10"); got != 200 {
		t.Fatalf("spoofed leftmost entry: %d", got)
	}
	// The rule may come from a header.
	rec := f.do("GET", "/v1/forward-auth", "", "X-Floodgate-Rule", "api")
	if rec.Code != 200 {
		t.Fatalf("rule from header: %d", rec.Code)
	}
	if rec := f.do("POST", "/v1/forward-auth?rule=api", `{"ignored":true}`); rec.Code != 200 {
		t.Fatalf("forward auth with the original request's method: %d", rec.Code)
	}
	if rec := f.do("GET", "/v1/forward-auth", ""); rec.Code != 400 {
		t.Fatalf("no rule: %d", rec.Code)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	if rec := f.do("GET", "/healthz", ""); rec.Code != 200 {
		t.Fatalf("healthz %d", rec.Code)
	}
	if rec := f.do("GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("readyz %d", rec.Code)
	}
	for range 4 {
		f.do("POST", "/v1/check", `{"rule":"login","key":"m"}`)
	}
	body := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`floodgate_decisions_total{outcome="allowed",rule="login"} 3`,
		`floodgate_decisions_total{outcome="denied",rule="login"} 1`,
		`floodgate_store_latency_seconds_count{op="allow"} 4`,
		`floodgate_decision_duration_seconds_count 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// failingStore answers every call with ErrStoreUnavailable, as a store does
// when Redis is down (the end-to-end tests use a real stopped Redis).
type failingStore struct{ floodgate.Store }

func (failingStore) AllowN(context.Context, string, floodgate.Limit, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("dial: %w", floodgate.ErrStoreUnavailable)
}

func (failingStore) Reset(context.Context, string, floodgate.Limit) error {
	return fmt.Errorf("dial: %w", floodgate.ErrStoreUnavailable)
}

func TestFailureModes(t *testing.T) {
	f := newFixture(t, testConfig, func(floodgate.Clock) floodgate.Store { return failingStore{} })
	rec := f.do("POST", "/v1/check", `{"rule":"api","key":"k"}`)
	got := decode[server.CheckResponse](t, rec)
	if rec.Code != 200 || !got.Allowed || !got.StoreUnavailable || got.Limit != 10 {
		t.Fatalf("fail-open rule: %d %+v", rec.Code, got)
	}
	if rec.Header().Get("RateLimit") != "" || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("fail-open rule, undecided: headers %v, want no RateLimit or Retry-After", rec.Header())
	}
	rec = f.do("POST", "/v1/check", `{"rule":"login","key":"k"}`)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "5" || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("fail-closed rule: %d %v, want 503 with Retry-After 5 (decide.DefaultUnavailableRetryAfter)", rec.Code, rec.Header())
	}
	if rec := f.do("GET", "/v1/forward-auth?rule=login", ""); rec.Code != 503 || rec.Header().Get("Retry-After") != "5" {
		t.Fatalf("forward auth, fail-closed rule: %d %v", rec.Code, rec.Header())
	}
	if rec := f.do("GET", "/v1/forward-auth?rule=api", ""); rec.Code != 200 {
		t.Fatalf("forward auth, fail-open rule: %d", rec.Code)
	}
	if rec := f.do("GET", "/readyz", ""); rec.Code != 503 {
		t.Fatalf("readyz with the store down: %d", rec.Code)
	}
	body := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`floodgate_failure_mode_activations_total{mode="open",rule="api"} 2`,
		`floodgate_failure_mode_activations_total{mode="closed",rule="login"} 2`,
		`floodgate_store_errors_total{rule="login"} 2`,
		`floodgate_decisions_total{outcome="fail_open",rule="api"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// deadlineStore's resets end on the caller's deadline, as a store call
// under a short deadline does.
type deadlineStore struct{ floodgate.Store }

func (deadlineStore) Reset(context.Context, string, floodgate.Limit) error {
	return fmt.Errorf("reset: %w", context.DeadlineExceeded)
}

// TestResetOutage: a reset the store could not make in time is an outage
// (503 with Retry-After), whether the store says ErrStoreUnavailable or the
// deadline ended; any other error is 500.
func TestResetOutage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		want  int
	}{
		{"unavailable", failingStore{}, 503},
		{"deadline", deadlineStore{}, 503},
		{"store error", scriptErrorStore{}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, testConfig, func(floodgate.Clock) floodgate.Store { return tc.store })
			rec := f.do("POST", "/v1/reset", `{"rule":"login","key":"k"}`)
			if rec.Code != tc.want || (tc.want == 503) != (rec.Header().Get("Retry-After") == "5") {
				t.Errorf("reset: %d, Retry-After %q; want %d", rec.Code, rec.Header().Get("Retry-After"), tc.want)
			}
		})
	}
}

func TestReload(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	if err := f.srv.Reload(policyOf(t, strings.Replace(testConfig, "limit: 3", "limit: 1", 1))); err != nil {
		t.Fatal(err)
	}
	f.do("POST", "/v1/check", `{"rule":"login","key":"r"}`)
	if rec := f.do("POST", "/v1/check", `{"rule":"login","key":"r"}`); rec.Code != 429 {
		t.Fatalf("after reload to limit 1, second request: %d", rec.Code)
	}
}

func TestMaxInFlight(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	p := server.Policy{Rules: []server.Rule{
		{Name: "api", Limit: floodgate.NewTokenBucket(100, 10, time.Second), Failure: decide.FailOpen},
		{Name: "login", Limit: floodgate.PerMinute(5), Failure: decide.FailClosed},
		{Name: "search", Limit: floodgate.PerMinute(4), Failure: decide.FailLocal, LocalShare: 0.5},
	}}
	srv, err := server.New(blockingStore{Store: memory.New(), block: block, entered: entered}, p,
		server.Options{MaxInFlight: 1, UnavailableRetryAfter: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	done := occupySlot(t, ts.URL, "")
	<-entered
	// The one slot is taken: decisions follow their rule's failure mode
	// without reaching the (blocked) store; probes and metrics still answer.
	cases := []struct {
		name, method, path, body string
		status                   int
		retryAfter, want         string
	}{
		{"fail-open rule admits", "POST", "/v1/check", `{"rule":"api","key":"k"}`, 200, "", `"store_unavailable":true`},
		{"fail-closed rule answers 503 with the engine's delay", "POST", "/v1/check", `{"rule":"login","key":"k"}`, 503, "7", "concurrent requests and rule \\\"login\\\" fails closed"},
		{"forward auth, fail-open", "GET", "/v1/forward-auth?rule=api", "", 200, "", ""},
		{"forward auth, fail-closed", "GET", "/v1/forward-auth?rule=login", "", 503, "7", ""},
		{"reset", "POST", "/v1/reset", `{"rule":"api","key":"k"}`, 503, "7", "concurrent"},
		{"healthz", "GET", "/healthz", "", 200, "", "ok"},
		{"readyz", "GET", "/readyz", "", 200, "", "ready"},
		{"rules", "GET", "/v1/rules", "", 200, "", `"login"`},
		{"local rule, 1st of its share of 2", "POST", "/v1/check", `{"rule":"search","key":"k"}`, 200, "", `"local_fallback":true`},
		{"local rule, 2nd", "POST", "/v1/check", `{"rule":"search","key":"k"}`, 200, "", `"local_fallback":true`},
		{"local rule, over its share", "POST", "/v1/check", `{"rule":"search","key":"k"}`, 429, "60", `search`},
		{"a cost that can never fit is invalid, fail-open", "POST", "/v1/check", `{"rule":"api","key":"k","cost":1000}`, 400, "", `exceeds`},
		{"a cost that can never fit is invalid, fail-closed", "POST", "/v1/check", `{"rule":"login","key":"k","cost":1000}`, 400, "", `exceeds`},
		{"a cost that can never fit is invalid, local", "POST", "/v1/check", `{"rule":"search","key":"k","cost":1000}`, 400, "", `exceeds`},
		{"metrics", "GET", "/metrics", "", 200, "", `floodgate_http_requests_shed_total{route="check"} 8`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || resp.Header.Get("Retry-After") != c.retryAfter || !strings.Contains(string(body), c.want) {
				t.Fatalf("%d Retry-After %q %s; want %d Retry-After %q and %q", resp.StatusCode, resp.Header.Get("Retry-After"), body,
					c.status, c.retryAfter, c.want)
			}
		})
	}
	close(block)
	if got := <-done; got != 200 {
		t.Fatalf("first request: %d", got)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`floodgate_http_requests_shed_total{route="forward-auth"} 2`,
		`floodgate_http_requests_shed_total{route="reset"} 1`,
		`floodgate_failure_mode_activations_total{mode="closed",rule="login"} 2`,
		`floodgate_http_in_flight 0`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(rec.Body.String(), "floodgate_store_errors_total") {
		t.Errorf("requests the store was never asked about count as store errors")
	}
}

// occupySlot sends one check of rule "api" (with token, if any) to the
// server at url, whose store blocks it, and returns where its status
// arrives (0 if it failed): it holds the server's one in-flight slot
// meanwhile.
func occupySlot(t *testing.T, url, token string) <-chan int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", url+"/v1/check", bytes.NewBufferString(`{"rule":"api","key":"k"}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}

type blockingStore struct {
	floodgate.Store
	block   chan struct{}
	entered chan struct{}
}

func (b blockingStore) AllowN(ctx context.Context, _ string, l floodgate.Limit, _ int64) (floodgate.Decision, error) {
	b.entered <- struct{}{}
	select {
	case <-b.block:
		return floodgate.Decision{Allowed: true, Limit: l.Quota}, nil
	case <-ctx.Done():
		return floodgate.Decision{}, errors.New("cancelled")
	}
}

func TestCheckHeaders(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	rec := f.do("POST", "/v1/check", `{"rule":"login","key":"h"}`)
	h := rec.Header()
	policy, err := httpsfv.UnmarshalList(h.Values("RateLimit-Policy"))
	if err != nil || len(policy) != 1 {
		t.Fatalf("RateLimit-Policy %q: %v", h.Values("RateLimit-Policy"), err)
	}
	item := policy[0].(httpsfv.Item)
	if q, _ := item.Params.Get("q"); item.Value != "login" || q != int64(3) {
		t.Fatalf("RateLimit-Policy item %+v", item)
	}
	if w, _ := item.Params.Get("w"); w != int64(60) {
		t.Fatalf("RateLimit-Policy w = %v, want 60", w)
	}
	rl, err := httpsfv.UnmarshalList(h.Values("RateLimit"))
	if err != nil || len(rl) != 1 {
		t.Fatalf("RateLimit %q: %v", h.Values("RateLimit"), err)
	}
	if r, _ := rl[0].(httpsfv.Item).Params.Get("r"); r != int64(2) {
		t.Fatalf("RateLimit r = %v, want 2", r)
	}
	if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != "2" || h.Get("X-RateLimit-Reset") == "" {
		t.Fatalf("X-RateLimit headers: %v", h)
	}
	f.do("POST", "/v1/check", `{"rule":"login","key":"h","cost":2}`)
	rec = f.do("POST", "/v1/check", `{"rule":"login","key":"h"}`)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "60" || rec.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("denied: %d %v", rec.Code, rec.Header())
	}
}

// rateLimitHeaders lists the rate-limit header fields a response carries.
func rateLimitHeaders(h http.Header) []string {
	var got []string
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		if v := h.Values(k); len(v) > 0 {
			got = append(got, k+": "+strings.Join(v, ", "))
		}
	}
	return got
}

// TestShadowRuleHeaders: a shadow rule never appears in a header or in
// Retry-After, even when it would deny, on /v1/check and forward auth.
func TestShadowRuleHeaders(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	for i := range 3 {
		rec := f.do("POST", "/v1/check", `{"rule":"shadowed","key":"k"}`)
		got := decode[server.CheckResponse](t, rec)
		if rec.Code != 200 || !got.Allowed || got.ShadowDenied != (i > 0) {
			t.Fatalf("/v1/check request %d: %d %+v", i+1, rec.Code, got)
		}
		if h := rateLimitHeaders(rec.Header()); len(h) > 0 {
			t.Fatalf("/v1/check request %d on a shadow rule sends %q", i+1, h)
		}
	}
	for i := range 3 {
		req := httptest.NewRequest("GET", "/v1/forward-auth?rule=shadowed", nil)
		req.RemoteAddr = "198.51.100.9:1234"
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("forward auth request %d on a shadow rule: %d", i+1, rec.Code)
		}
		if h := rateLimitHeaders(rec.Header()); len(h) > 0 {
			t.Fatalf("forward auth request %d on a shadow rule sends %q", i+1, h)
		}
	}
	// A cost the shadow rule could never admit: it would refuse the
	// request, so it says so and counts it, and the request goes on.
	rec := f.do("POST", "/v1/check", `{"rule":"shadowed","key":"big","cost":50}`)
	if got := decode[server.CheckResponse](t, rec); rec.Code != 200 || !got.Allowed || !got.ShadowDenied {
		t.Fatalf("/v1/check on a shadow rule with a cost above its limit: %d %+v", rec.Code, got)
	}
	body := f.do("GET", "/metrics", "").Body.String()
	if want := `floodgate_decisions_total{outcome="shadow_denied",rule="shadowed"} 5`; !strings.Contains(body, want) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestForwardAuthHeaders: forward auth sends the headers the middleware
// would: the rule's policy and its state, and Retry-After on a denial.
func TestForwardAuthHeaders(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	var rec *httptest.ResponseRecorder
	for range 4 {
		rec = f.do("GET", "/v1/forward-auth?rule=login", "")
	}
	want := []string{`RateLimit-Policy: "login";q=3;w=60`, `RateLimit: "login";r=0;t=60`, "X-RateLimit-Limit: 3",
		"X-RateLimit-Remaining: 0", "Retry-After: 60"}
	// The log's entries sit at distinct microseconds, yet its reset is its
	// window, not a second more.
	h := rec.Header().Clone()
	if reset, now := h.Get("X-RateLimit-Reset"), f.clock.Now().Unix(); reset != fmt.Sprint(now+60) {
		t.Errorf("X-RateLimit-Reset %s, want %d", reset, now+60)
	}
	h.Del("X-RateLimit-Reset")
	if got := rateLimitHeaders(h); rec.Code != 403 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("denied: %d %q, want 403 %q", rec.Code, got, want)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("denied: Content-Type %q", ct)
	}
}

// errScript is a store error that is not an outage, as redisstore.ErrScript.
var errScript = errors.New("script failed: ERR user_script:1: bad")

type scriptErrorStore struct{ floodgate.Store }

func (scriptErrorStore) AllowN(context.Context, string, floodgate.Limit, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, errScript
}

func (scriptErrorStore) Reset(context.Context, string, floodgate.Limit) error { return errScript }

// TestStoreErrorNeverAdmits: a store error that is not an outage, behind a
// fail-open rule of 1 per minute, answers 500 every time on /v1/check and
// forward auth, never 200.
func TestStoreErrorNeverAdmits(t *testing.T) {
	p := server.Policy{Rules: []server.Rule{{Name: "one", Limit: floodgate.PerMinute(1), Failure: decide.FailOpen}}}
	f := newPolicyFixture(t, p, func(floodgate.Clock) floodgate.Store { return scriptErrorStore{memory.New()} })
	for i := range 3 {
		for _, rec := range []*httptest.ResponseRecorder{
			f.do("POST", "/v1/check", `{"rule":"one","key":"k"}`),
			f.do("GET", "/v1/forward-auth?rule=one", ""),
		} {
			if rec.Code != 500 || rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("request %d: %d %q %s, want a 500 problem", i+1, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
			}
			if h := rateLimitHeaders(rec.Header()); len(h) > 0 {
				t.Fatalf("request %d: a store error sends %q", i+1, h)
			}
		}
	}
	body := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{`floodgate_decisions_total{outcome="error",rule="one"} 6`, `floodgate_store_errors_total{rule="one"} 6`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestLiteralPolicy: a policy written in Go serves exactly as the same
// policy read from YAML.
func TestLiteralPolicy(t *testing.T) {
	ex, err := clientip.New(clientip.Resolver{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	literal := server.Policy{
		Rules: []server.Rule{
			{Name: "login", Limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 3, time.Minute), Failure: decide.FailClosed},
			{Name: "api", Limit: floodgate.NewTokenBucket(10, 1, time.Second)},
			{Name: "shadowed", Limit: floodgate.NewLimit(floodgate.FixedWindow, 1, time.Minute), Shadow: true},
		},
		ClientIP:   ex,
		DenyStatus: 403,
	}
	fromYAML, fromGo := newFixture(t, testConfig, nil), newPolicyFixture(t, literal, nil)
	requests := []struct{ method, target, body string }{
		{"GET", "/v1/rules", ""},
		{"POST", "/v1/check", `{"rule":"login","key":"k","cost":2}`},
		{"POST", "/v1/check", `{"rule":"login","key":"k","cost":2}`},
		{"POST", "/v1/check", `{"rule":"api","key":"k"}`},
		{"POST", "/v1/check", `{"rule":"shadowed","key":"k"}`},
		{"POST", "/v1/check", `{"rule":"shadowed","key":"k"}`},
		{"GET", "/v1/forward-auth?rule=login", ""},
		{"GET", "/v1/forward-auth?rule=login", ""},
		{"GET", "/v1/forward-auth?rule=login", ""},
		{"GET", "/v1/forward-auth?rule=login", ""},
	}
	for _, r := range requests {
		a, b := fromYAML.do(r.method, r.target, r.body), fromGo.do(r.method, r.target, r.body)
		if a.Code != b.Code || a.Body.String() != b.Body.String() || fmt.Sprint(a.Header()) != fmt.Sprint(b.Header()) {
			t.Fatalf("%s %s %s:\nYAML %d %v %s\nGo   %d %v %s", r.method, r.target, r.body, a.Code, a.Header(), a.Body, b.Code, b.Header(), b.Body)
		}
	}
}

func TestPolicyErrors(t *testing.T) {
	ok := server.Rule{Name: "ok", Limit: floodgate.PerMinute(1)}
	cases := []struct {
		name  string
		p     server.Policy
		field string
	}{
		{"bad name", server.Policy{Rules: []server.Rule{{Name: "a/b", Limit: floodgate.PerMinute(1)}}}, "Rules[0].Name"},
		{"duplicate", server.Policy{Rules: []server.Rule{ok, ok}}, "Rules[1].Name"},
		{"zero limit", server.Policy{Rules: []server.Rule{{Name: "z"}}}, "Rules[0].Limit"},
		{"bad failure", server.Policy{Rules: []server.Rule{{Name: "f", Limit: floodgate.PerMinute(1), Failure: 7}}}, "Rules[0].Failure"},
		{"share without FailLocal", server.Policy{Rules: []server.Rule{{Name: "f", Limit: floodgate.PerMinute(1), LocalShare: 0.5}}}, "Rules[0].LocalShare"},
		{"deny status", server.Policy{Rules: []server.Rule{ok}, DenyStatus: 200}, "DenyStatus"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := server.New(memory.New(), c.p, server.Options{})
			var ce *server.ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field {
				t.Fatalf("New: %v, want a ConfigError naming %s", err, c.field)
			}
		})
	}
	_, err := server.New(memory.New(), server.Policy{Rules: []server.Rule{{Name: "z"}}}, server.Options{})
	if !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("an invalid limit's error %v does not match ErrInvalidLimit", err)
	}
}

func TestReloadErrorCounted(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	before := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{`floodgate_config_reloads_total{result="error"} 0`, `floodgate_config_reloads_total{result="ok"} 0`} {
		if !strings.Contains(before, want) {
			t.Errorf("metrics before any reload lack %q", want)
		}
	}
	if err := f.srv.Reload(server.Policy{Rules: []server.Rule{{Name: "bad"}}}); err == nil {
		t.Fatal("Reload accepted a rule with no limit")
	}
	f.srv.CountReload(false)
	f.srv.CountReload(false)
	f.srv.CountReload(true)
	if rec := f.do("POST", "/v1/check", `{"rule":"login","key":"k"}`); rec.Code != 200 {
		t.Fatalf("after a failed reload: %d", rec.Code)
	}
	body := f.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{`floodgate_config_reloads_total{result="error"} 2`, `floodgate_config_reloads_total{result="ok"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

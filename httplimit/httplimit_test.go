package httplimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

func TestSpoofedXFFFromUntrustedPeer(t *testing.T) {
	for _, resolver := range []clientip.Resolver{
		{},                                       // trust nobody
		{TrustedProxies: []string{"10.0.0.0/8"}}, // trust a proxy the attacker is not
	} {
		t.Run(fmt.Sprint(resolver.TrustedProxies), func(t *testing.T) {
			ips, _ := clientip.New(resolver)
			e := newEnv(t, httplimit.Config{
				ClientIP: ips,
				Rules:    []httplimit.Rule{{Name: "per-ip", Limit: floodgate.PerMinute(3)}},
			})
			// A fresh spoofed address every time gets no fresh budget.
			var codes []int
			for i := range 5 {
				w := e.do(req{remote: "198.51.100.66:999", header: []string{"X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i)}})
				codes = append(codes, w.Code)
			}
			want := []int{204, 204, 204, 429, 429}
			if fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Errorf("codes %v, want %v", codes, want)
			}
			// The spoofed addresses' budgets are untouched.
			if got := remainingIn(t, e.store, "per-ip|203.0.113.0", floodgate.PerMinute(3)); got != 3 {
				t.Errorf("spoofed address has %d left, want 3", got)
			}
		})
	}
}

func TestVictimInXFFKeepsBudget(t *testing.T) {
	ips, _ := clientip.New(clientip.Resolver{TrustedProxies: []string{"10.0.0.0/8"}})
	e := newEnv(t, httplimit.Config{
		ClientIP: ips,
		Rules:    []httplimit.Rule{{Name: "per-ip", Limit: floodgate.PerMinute(3)}},
	})
	const victim = "203.0.113.50"
	// The attacker, behind the trusted proxy, writes the victim's address;
	// the proxy appends the attacker's. Directly connected, the attacker's
	// header is not read at all.
	attacks := []req{
		{remote: "10.0.0.1:1", header: []string{"X-Forwarded-For", victim + ", 198.51.100.66"}},
		{remote: "198.51.100.67:1", header: []string{"X-Forwarded-For", victim}},
		{remote: "10.0.0.1:1", header: []string{"X-Forwarded-For", victim, "X-Forwarded-For", "198.51.100.68"}},
	}
	for _, a := range attacks {
		for range 10 {
			e.do(a)
		}
	}
	w := e.do(req{remote: "10.0.0.1:1", header: []string{"X-Forwarded-For", victim}})
	if w.Code != http.StatusNoContent {
		t.Fatalf("victim got %d", w.Code)
	}
	if got := headerInt(t, w.Header(), "X-RateLimit-Remaining"); got != 2 {
		t.Errorf("victim's remaining after its first request = %d, want 2", got)
	}
}

func TestRotatingIPv6SharesBudget(t *testing.T) {
	e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "per-ip", Limit: floodgate.PerMinute(3)}}})
	var codes []int
	for i := range 5 {
		w := e.do(req{remote: fmt.Sprintf("[2001:db8:1:2:%x::%x]:443", i*7919, i+1)})
		codes = append(codes, w.Code)
	}
	if want := []int{204, 204, 204, 429, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("one /64: codes %v, want %v", codes, want)
	}
	if w := e.do(req{remote: "[2001:db8:1:3::1]:443"}); w.Code != http.StatusNoContent {
		t.Errorf("the next /64 got %d", w.Code)
	}
}

func TestHeadersParseAsStructuredFields(t *testing.T) {
	e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{
		{Name: "per-ip", Limit: floodgate.PerMinute(100)},
		{Name: "per-key", Limit: floodgate.PerHour(5), Key: httplimit.Header("X-API-Key")},
		{Name: "bucket", Limit: floodgate.NewTokenBucket(50, 10, time.Second)},
		{Name: "fast", Limit: floodgate.NewLimit(floodgate.FixedWindow, 10, 500*time.Millisecond)},
		{Name: "shadow", Limit: floodgate.PerSecond(1), Shadow: true},
	}})
	w := e.do(req{header: []string{"X-API-Key", "k1"}})
	if w.Code != http.StatusNoContent {
		t.Fatalf("code %d", w.Code)
	}
	h := w.Header()
	policy := parseSF(t, h, "RateLimit-Policy")
	wantPolicy := []rateLimit{
		{"per-ip", map[string]int64{"q": 100, "w": 60}},
		{"per-key", map[string]int64{"q": 5, "w": 3600}},
		{"bucket", map[string]int64{"q": 50, "w": 5}}, // 50 tokens at 10/s: full in 5s
		{"fast", map[string]int64{"q": 10, "w": 1}},   // windows below 1s round up
	}
	if fmt.Sprint(policy) != fmt.Sprint(wantPolicy) {
		t.Errorf("RateLimit-Policy = %v,\nwant %v", policy, wantPolicy)
	}
	// The most restrictive rule is the per-key one: 4 left.
	rl := parseSF(t, h, "RateLimit")
	wantRL := []rateLimit{{"per-key", map[string]int64{"r": 4, "t": 3600}}}
	if fmt.Sprint(rl) != fmt.Sprint(wantRL) {
		t.Errorf("RateLimit = %v, want %v", rl, wantRL)
	}
	if got := headerInt(t, h, "X-RateLimit-Limit"); got != 5 {
		t.Errorf("X-RateLimit-Limit = %d, want 5", got)
	}
	if got := headerInt(t, h, "X-RateLimit-Remaining"); got != 4 {
		t.Errorf("X-RateLimit-Remaining = %d, want 4", got)
	}
	if got, want := headerInt(t, h, "X-RateLimit-Reset"), epoch.Add(time.Hour).Unix(); got != want {
		t.Errorf("X-RateLimit-Reset = %d, want %d", got, want)
	}
	if h.Get("Retry-After") != "" {
		t.Errorf("Retry-After on an admitted request")
	}

	// Without an API key the per-key rule does not apply and is not listed.
	w = e.do(req{})
	policy = parseSF(t, w.Header(), "RateLimit-Policy")
	if len(policy) != 3 || policy[0].name != "per-ip" || policy[1].name != "bucket" || policy[2].name != "fast" {
		t.Errorf("policy without API key = %v", policy)
	}
	if rl := parseSF(t, w.Header(), "RateLimit"); len(rl) != 1 || rl[0].name != "fast" || rl[0].params["r"] != 8 {
		t.Errorf("RateLimit without API key = %v, want fast with r=8", rl)
	}
}

func TestHeaderModes(t *testing.T) {
	tests := []struct {
		mode      httplimit.HeaderMode
		ietf, old bool
	}{
		{httplimit.HeadersBoth, true, true},
		{httplimit.HeadersIETF, true, false},
		{httplimit.HeadersLegacy, false, true},
		{httplimit.HeadersNone, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			e := newEnv(t, httplimit.Config{Headers: tt.mode, Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(1)}}})
			for _, w := range []http.Header{e.do(req{}).Header(), e.do(req{}).Header()} {
				for _, f := range []string{"RateLimit-Policy", "RateLimit"} {
					if got := w.Get(f) != ""; got != tt.ietf {
						t.Errorf("%s present = %v, want %v", f, got, tt.ietf)
					}
				}
				for _, f := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
					if got := w.Get(f) != ""; got != tt.old {
						t.Errorf("%s present = %v, want %v", f, got, tt.old)
					}
				}
			}
			if w := e.do(req{}); w.Header().Get("Retry-After") != "60" {
				t.Errorf("Retry-After = %q, want 60 in every mode", w.Header().Get("Retry-After"))
			}
		})
	}
}

func TestRemainingNeverIncreasesWithinWindow(t *testing.T) {
	for _, alg := range algorithmlist.All() {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{
				{Name: "a", Limit: floodgate.NewLimit(alg, 20, time.Minute)},
				{Name: "b", Limit: floodgate.NewLimit(alg, 12, time.Hour), Key: constKey("all")},
			}})
			// Time moves inside the first minute; a bucket refills as time
			// moves, so its clock stays put.
			step := 2 * time.Second
			if alg == floodgate.TokenBucket {
				step = 0
			}
			prev := int64(1 << 62)
			admitted := 0
			for range 25 {
				w := e.do(req{})
				e.clock.Advance(step)
				if w.Code != http.StatusNoContent {
					continue
				}
				admitted++
				rl := parseSF(t, w.Header(), "RateLimit")
				r := rl[0].params["r"]
				if old := headerInt(t, w.Header(), "X-RateLimit-Remaining"); old != r {
					t.Fatalf("X-RateLimit-Remaining %d != RateLimit r %d", old, r)
				}
				if r > prev {
					t.Fatalf("remaining went from %d to %d", prev, r)
				}
				prev = r
			}
			if admitted != 12 {
				t.Errorf("admitted %d, want 12", admitted)
			}
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	for _, alg := range algorithmlist.All() {
		for _, window := range []time.Duration{1500 * time.Millisecond, time.Minute} {
			t.Run(fmt.Sprint(alg, window), func(t *testing.T) {
				e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.NewLimit(alg, 3, window)}}})
				e.clock.Advance(700 * time.Millisecond) // off the window edges
				for range 3 {
					if w := e.do(req{}); w.Code != http.StatusNoContent {
						t.Fatalf("code %d before the limit", w.Code)
					}
					e.clock.Advance(100 * time.Millisecond)
				}
				w := e.do(req{})
				if w.Code != http.StatusTooManyRequests {
					t.Fatalf("code %d, want 429", w.Code)
				}
				secs := headerInt(t, w.Header(), "Retry-After")
				if secs < 1 {
					t.Fatalf("Retry-After %d", secs)
				}
				// One second less is not enough (Retry-After rounds up)...
				e.clock.Advance(time.Duration(secs-1) * time.Second)
				if w := e.do(req{}); w.Code != http.StatusTooManyRequests {
					t.Errorf("retry after %ds of %d admitted: code %d", secs-1, secs, w.Code)
				}
				// ...and the advertised delay is.
				e.clock.Advance(time.Second)
				if w := e.do(req{}); w.Code != http.StatusNoContent {
					t.Errorf("retry after Retry-After=%d: code %d", secs, w.Code)
				}
			})
		}
	}
}

func TestDeniedResponse(t *testing.T) {
	e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "login", Limit: floodgate.PerMinute(1)}}})
	e.do(req{})
	e.clock.Advance(15*time.Second + time.Millisecond)
	w := e.do(req{})
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("code %d", w.Code)
	}
	h := w.Header()
	if got := h.Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type %q", got)
	}
	if got := h.Get("Retry-After"); got != "45" { // 44.999s rounded up
		t.Errorf("Retry-After %q, want 45", got)
	}
	if got := h.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q", got)
	}
	if rl := parseSF(t, h, "RateLimit"); len(rl) != 1 || rl[0].params["r"] != 0 || rl[0].params["t"] != 45 {
		t.Errorf("RateLimit %v, want r=0;t=45", rl)
	}
	var p struct {
		Type             string   `json:"type"`
		Title            string   `json:"title"`
		Status           int      `json:"status"`
		Detail           string   `json:"detail"`
		ViolatedPolicies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || p.Status != 429 ||
		len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "login" || p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v", p)
	}
	if e.served.Load() != 1 {
		t.Errorf("handler served %d, want 1", e.served.Load())
	}
	if got := e.lim.Stats().Denied; got != 1 {
		t.Errorf("Stats.Denied = %d", got)
	}
}

// TestDeniedEffectiveWindow checks that on a denial RateLimit's t is the
// Retry-After delay, not the later time at which the quota is whole again,
// since Retry-After must not point earlier than the end of t.
func TestDeniedEffectiveWindow(t *testing.T) {
	e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(2)}}})
	e.do(req{})
	e.clock.Advance(30 * time.Second)
	e.do(req{})
	e.clock.Advance(10 * time.Second)
	w := e.do(req{})
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("code %d", w.Code)
	}
	// The first entry leaves in 20s, the second in 50s.
	if got := w.Header().Get("Retry-After"); got != "20" {
		t.Errorf("Retry-After %q, want 20", got)
	}
	if rl := parseSF(t, w.Header(), "RateLimit"); len(rl) != 1 || rl[0].params["r"] != 0 || rl[0].params["t"] != 20 {
		t.Errorf("RateLimit %v, want r=0;t=20", rl)
	}
	if got, want := headerInt(t, w.Header(), "X-RateLimit-Reset"), epoch.Add(90*time.Second).Unix(); got != want {
		t.Errorf("X-RateLimit-Reset %d, want %d (when the quota is whole)", got, want)
	}
}

func TestCustomDenyHandler(t *testing.T) {
	var got []httplimit.Denial
	e := newEnv(t, httplimit.Config{
		Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(2)}},
		DenyHandler: func(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
			got = append(got, d)
			if w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit") == "" {
				t.Error("headers not set before the deny handler")
			}
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprintf(w, "slow down, %d", d.RetryAfterSeconds())
		},
	})
	e.do(req{})
	e.do(req{})
	w := e.do(req{})
	if w.Code != http.StatusTeapot || w.Body.String() != "slow down, 60" {
		t.Errorf("got %d %q", w.Code, w.Body)
	}
	if len(got) != 1 || got[0].Rule != "r" || got[0].Limit != floodgate.PerMinute(2) || got[0].Decision.Allowed || got[0].Decision.RetryAfter != time.Minute {
		t.Errorf("denials %+v", got)
	}
}

func TestMultiRuleRefund(t *testing.T) {
	perIP := floodgate.PerMinute(5)
	perKey := floodgate.PerHour(100)
	e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{
		{Name: "per-key", Limit: perKey, Key: httplimit.Header("X-API-Key")},
		{Name: "per-ip", Limit: perIP},
	}})
	// One client hammers with the shared key: the per-ip rule denies after
	// 5, and the 15 denied requests must not use the key's quota.
	for range 20 {
		e.do(req{header: []string{"X-API-Key", "shared"}})
	}
	if got := e.served.Load(); got != 5 {
		t.Errorf("served %d, want 5", got)
	}
	if got := remainingIn(t, e.store, "per-key|shared", perKey); got != 95 {
		t.Errorf("key has %d left, want 95", got)
	}
	if got := remainingIn(t, e.store, "per-ip|192.0.2.1", perIP); got != 0 {
		t.Errorf("ip has %d left, want 0", got)
	}
}

// TestMultiRuleRefundConcurrent sends many requests at once through a wide
// rule and then a narrow one: exactly the narrow quota passes, and the wide
// rule is charged for exactly those, whatever the interleaving.
func TestMultiRuleRefundConcurrent(t *testing.T) {
	testRefundConcurrent(t, nil)
}

// testRefundConcurrent runs the concurrent refund test on the memory store,
// or on the store newStore returns for the env's clock.
func testRefundConcurrent(t *testing.T, newStore func(t *testing.T, c floodgate.Clock) floodgate.Store) {
	const requests, narrow, wide = 200, 10, 1000
	for _, alg := range algorithmlist.All() {
		t.Run(alg.String(), func(t *testing.T) {
			// Long windows: on Redis a key's TTL runs in real time while
			// the test's clock stands still, and a token bucket of 1000 per
			// minute would expire 60ms per token taken, refilling in the
			// middle of the count.
			wideLimit := floodgate.NewLimit(alg, wide, 24*time.Hour)
			midLimit := floodgate.NewLimit(alg, wide, 48*time.Hour)
			cfg := httplimit.Config{Rules: []httplimit.Rule{
				{Name: "wide", Limit: wideLimit},
				{Name: "mid", Limit: midLimit, Key: httplimit.Header("X-API-Key")},
				{Name: "narrow", Limit: floodgate.NewLimit(alg, narrow, 24*time.Hour), Key: constKey("all")},
			}}
			clock := clocktest.NewManual(epoch)
			var store floodgate.Store
			if newStore != nil {
				store = newStore(t, clock)
				// No Timeout: the store's own (a minute) is the one
				// budget. A call that times out may have counted the
				// request without the middleware knowing; this test is
				// about refunds, not timeouts.
				cfg.Store, cfg.Clock = store, clock
			}
			cfg.OnStoreError = func(r *http.Request, rule string, err error) {
				t.Errorf("rule %s: %v", rule, err)
			}
			e := newEnv(t, cfg)
			if store == nil {
				store = e.store
			}
			var wg sync.WaitGroup
			for i := range requests {
				wg.Go(func() {
					e.do(req{remote: fmt.Sprintf("192.0.2.%d:1", i%4), header: []string{"X-API-Key", "k"}})
				})
			}
			wg.Wait()
			if got := e.served.Load(); got != narrow {
				t.Fatalf("served %d, want %d", got, narrow)
			}
			var charged int64
			for i := range 4 {
				charged += wide - remainingIn(t, store, fmt.Sprintf("wide|192.0.2.%d", i), wideLimit)
			}
			if charged != narrow {
				t.Errorf("wide rule charged %d, want %d", charged, narrow)
			}
			if got := wide - remainingIn(t, store, "mid|k", midLimit); got != narrow {
				t.Errorf("mid rule charged %d, want %d", got, narrow)
			}
			if got := e.lim.Stats().Denied; got != requests-narrow {
				t.Errorf("Stats.Denied = %d, want %d", got, requests-narrow)
			}
		})
	}
}

func TestShadowMode(t *testing.T) {
	type shadowEvent struct {
		rule      string
		remaining int64
	}
	var events []shadowEvent
	e := newEnv(t, httplimit.Config{
		Rules: []httplimit.Rule{
			{Name: "trial", Limit: floodgate.PerMinute(2), Shadow: true},
			{Name: "real", Limit: floodgate.PerMinute(100)},
		},
		OnShadowDeny: func(r *http.Request, rule string, d floodgate.Decision) {
			events = append(events, shadowEvent{rule, d.Remaining})
		},
	})
	for range 5 {
		w := e.do(req{})
		if w.Code != http.StatusNoContent {
			t.Fatalf("shadow rule blocked: %d", w.Code)
		}
		if p := parseSF(t, w.Header(), "RateLimit-Policy"); len(p) != 1 || p[0].name != "real" {
			t.Errorf("policy lists %v, want only the enforced rule", p)
		}
		if rl := parseSF(t, w.Header(), "RateLimit"); rl[0].name != "real" {
			t.Errorf("RateLimit describes %v", rl)
		}
	}
	if got := e.lim.Stats().ShadowDenied; got != 3 {
		t.Errorf("ShadowDenied = %d, want 3", got)
	}
	if fmt.Sprint(events) != fmt.Sprint([]shadowEvent{{"trial", 0}, {"trial", 0}, {"trial", 0}}) {
		t.Errorf("events %v", events)
	}
	if got := e.served.Load(); got != 5 {
		t.Errorf("served %d", got)
	}

	// A shadow rule admitted before an enforced rule denies is refunded too.
	e2 := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{
		{Name: "trial", Limit: floodgate.PerMinute(100), Shadow: true},
		{Name: "real", Limit: floodgate.PerMinute(1)},
	}})
	for range 4 {
		e2.do(req{})
	}
	if got := remainingIn(t, e2.store, "trial|192.0.2.1", floodgate.PerMinute(100)); got != 99 {
		t.Errorf("shadow rule has %d left, want 99", got)
	}
}

func TestSkip(t *testing.T) {
	e := newEnv(t, httplimit.Config{
		Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(1)}},
		Skip:  func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})
	for range 5 {
		w := e.do(req{path: "/healthz"})
		if w.Code != http.StatusNoContent || w.Header().Get("RateLimit-Policy") != "" {
			t.Fatalf("skipped request: %d %v", w.Code, w.Header())
		}
	}
	if w := e.do(req{path: "/api"}); w.Code != http.StatusNoContent {
		t.Errorf("first counted request: %d", w.Code)
	}
	if w := e.do(req{path: "/api"}); w.Code != http.StatusTooManyRequests {
		t.Errorf("second counted request: %d", w.Code)
	}
}

func TestMatching(t *testing.T) {
	rules := []httplimit.Rule{
		{Name: "all", Limit: floodgate.PerMinute(1000)},
		{Name: "api", Limit: floodgate.PerMinute(1000), Paths: []string{"/api/"}},
		{Name: "login", Limit: floodgate.PerMinute(1000), Methods: []string{"POST"}, Paths: []string{"/login", "/v2/login"}},
		{Name: "user", Limit: floodgate.PerMinute(1000), Paths: []string{"GET /users/{id}"}},
		{Name: "reads", Limit: floodgate.PerMinute(1000), Methods: []string{"GET"}},
		{Name: "host", Limit: floodgate.PerMinute(1000), Paths: []string{"other.example/"}},
	}
	tests := []struct {
		method, path string
		want         string
	}{
		{"GET", "/", "all reads"},
		{"HEAD", "/", "all reads"},
		{"GET", "/api/x/y", "all api reads"},
		{"GET", "/api", "all api reads"}, // ServeMux would redirect to /api/
		{"POST", "/login", "all login"},
		{"GET", "/login", "all reads"},
		{"POST", "/v2/login", "all login"},
		{"POST", "/api/../login", "all login"}, // cleaned as ServeMux does
		{"POST", "/login/x", "all"},
		{"GET", "/users/42", "all user reads"},
		{"DELETE", "/users/42", "all"},
		{"GET", "/users/42/x", "all reads"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			e := newEnv(t, httplimit.Config{Rules: rules})
			w := e.do(req{method: tt.method, path: tt.path})
			var names []string
			for _, p := range parseSF(t, w.Header(), "RateLimit-Policy") {
				names = append(names, p.name)
			}
			got := strings.Join(names, " ")
			// The policy header lists rules in configuration order.
			if got != tt.want {
				t.Errorf("rules %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	type ctxKey struct{}
	type user struct{ id string }
	tests := []struct {
		name string
		key  httplimit.KeyFunc
		req  func(*http.Request) *http.Request
		want string // "" means the rule does not apply
		err  bool
	}{
		{"header", httplimit.Header("x-api-key"), func(r *http.Request) *http.Request {
			r.Header.Set("X-Api-Key", " k1 ")
			return r
		}, "k1", false},
		{"header absent", httplimit.Header("X-API-Key"), nil, "", false},
		{"context string", httplimit.ContextValue(ctxKey{}), func(r *http.Request) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), ctxKey{}, "alice"))
		}, "alice", false},
		{"context int64", httplimit.ContextValue(ctxKey{}), func(r *http.Request) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), ctxKey{}, int64(42)))
		}, "42", false},
		{"context absent", httplimit.ContextValue(ctxKey{}), nil, "", false},
		{"context wrong type", httplimit.ContextValue(ctxKey{}), func(r *http.Request) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), ctxKey{}, user{"x"}))
		}, "", true},
		{"combination", httplimit.Combine(httplimit.Header("X-API-Key"), httplimit.ClientIP(nil)), func(r *http.Request) *http.Request {
			r.Header.Set("X-API-Key", `a|b\c`)
			return r
		}, `a\|b\\c|192.0.2.1`, false},
		{"combination with a part missing", httplimit.Combine(httplimit.Header("X-API-Key"), httplimit.ClientIP(nil)), nil, "", false},
		{"client IP", httplimit.ClientIP(nil), nil, "192.0.2.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "http://x/", nil)
			r.RemoteAddr = "192.0.2.1:80"
			if tt.req != nil {
				r = tt.req(r)
			}
			got, err := tt.key(r)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestGarbageHeaders(t *testing.T) {
	ips, _ := clientip.New(clientip.Resolver{TrustedProxies: []string{"10.0.0.0/8"}})
	limit := floodgate.PerMinute(1000)
	e := newEnv(t, httplimit.Config{
		ClientIP: ips,
		Rules: []httplimit.Rule{
			{Name: "ip", Limit: limit},
			{Name: "key", Limit: limit, Key: httplimit.Header("X-API-Key")},
		},
	})
	garbage := []string{
		"not-an-ip", "unknown", "_hidden", "203.0.113.7/24", "999.1.1.1", "[::1", "fe80::1%eth0",
		"'; DROP TABLE", "203.0.113.7:99999", strings.Repeat("A", 5000),
	}
	for _, g := range garbage {
		w := e.do(req{remote: "10.0.0.1:1", header: []string{"X-Forwarded-For", "203.0.113.9, " + g, "Forwarded", "for=" + g}})
		if w.Code != http.StatusNoContent {
			t.Fatalf("%q: code %d", g, w.Code)
		}
	}
	// Every garbage request was counted against the proxy, the last
	// trusted hop, and none against an address the garbage names.
	if got := remainingIn(t, e.store, "ip|10.0.0.1", limit); got != 1000-int64(len(garbage)) {
		t.Errorf("proxy key has %d left, want %d", got, 1000-len(garbage))
	}
	if got := remainingIn(t, e.store, "ip|203.0.113.9", limit); got != 1000 {
		t.Errorf("address left of the garbage has %d left, want 1000", got)
	}

	// A huge header key is stored as its hash, and still counted.
	huge := strings.Repeat("k", 100_000)
	for range 3 {
		e.do(req{header: []string{"X-API-Key", huge}})
	}
	sum := sha256.Sum256([]byte(huge))
	if got := remainingIn(t, e.store, "key#"+hex.EncodeToString(sum[:]), limit); got != 997 {
		t.Errorf("hashed key has %d left, want 997", got)
	}
}

func TestKeyErrorsFollowFailureMode(t *testing.T) {
	type ctxKey struct{}
	bad := httplimit.ContextValue(ctxKey{})
	badReq := func(e *env) *http.Request {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		return r.WithContext(context.WithValue(r.Context(), ctxKey{}, 3.5))
	}
	for _, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var hookErrs []error
			e := newEnv(t, httplimit.Config{
				Rules:        []httplimit.Rule{{Name: "user", Limit: floodgate.PerMinute(10), Key: bad, Failure: mode}},
				OnStoreError: func(r *http.Request, rule string, err error) { hookErrs = append(hookErrs, err) },
			})
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, badReq(e))
			want := http.StatusNoContent
			if mode == httplimit.FailClosed {
				want = http.StatusServiceUnavailable
			}
			if w.Code != want {
				t.Errorf("code %d, want %d", w.Code, want)
			}
			if len(hookErrs) != 1 || !errors.Is(hookErrs[0], httplimit.ErrKey) {
				t.Errorf("hook errors %v", hookErrs)
			}
			if e.lim.Stats().KeyErrors != 1 {
				t.Errorf("Stats %+v", e.lim.Stats())
			}
		})
	}
	// A request whose peer is not an IP address cannot be keyed by it.
	e := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "ip", Limit: floodgate.PerMinute(10), Failure: httplimit.FailClosed}}})
	if w := e.do(req{remote: "@"}); w.Code != http.StatusServiceUnavailable {
		t.Errorf("unix-socket peer: code %d", w.Code)
	}
}

// TestEngineOptionErrors: the engine's options are checked by decide.New,
// for the middleware as for the gRPC interceptors: a negative Timeout is an
// error (it was once taken as zero), named with its value as decide names
// it.
func TestEngineOptionErrors(t *testing.T) {
	ok := httplimit.Rule{Name: "ok", Limit: floodgate.PerMinute(1)}
	for _, tt := range []struct {
		name string
		cfg  httplimit.Config
		want string
	}{
		{"negative timeout", httplimit.Config{Timeout: -time.Millisecond}, "httplimit: Timeout -1ms must not be negative (0: no deadline of the engine's own: the store bounds each call)"},
		{"negative retry", httplimit.Config{UnavailableRetryAfter: -time.Second}, "httplimit: UnavailableRetryAfter -1s must not be negative (0: the default 5s)"},
		{"negative log interval", httplimit.Config{LogInterval: -time.Second}, "httplimit: LogInterval -1s must not be negative (0: the default 30s)"},
		{"negative cache entries", httplimit.Config{OverLimitCache: decide.CacheOptions{MaxEntries: -1}}, "httplimit: OverLimitCache.MaxEntries -1 must not be negative"},
		{"negative cache bytes", httplimit.Config{OverLimitCache: decide.CacheOptions{MaxBytes: -5}}, "httplimit: OverLimitCache.MaxBytes -5 must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Store, tt.cfg.Rules = memory.New(), []httplimit.Rule{ok}
			_, err := httplimit.New(tt.cfg)
			var ce *httplimit.ConfigError
			if !errors.As(err, &ce) || err.Error() != tt.want {
				t.Fatalf("New = %v, want the *ConfigError %q", err, tt.want)
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != ce.Field {
				t.Errorf("New = %v, does not wrap a *fielderr.Error for %s", err, ce.Field)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	ok := httplimit.Rule{Name: "ok", Limit: floodgate.PerMinute(1)}
	store := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{ok}}).store
	tests := []struct {
		name  string
		cfg   httplimit.Config
		field string
	}{
		{"no store", httplimit.Config{Rules: []httplimit.Rule{ok}}, "Store"},
		{"no rules", httplimit.Config{Store: store}, "Rules"},
		{"no name", httplimit.Config{Store: store, Rules: []httplimit.Rule{{Limit: floodgate.PerMinute(1)}}}, "Rules[0].Name"},
		{"non-ASCII name", httplimit.Config{Store: store, Rules: []httplimit.Rule{ok, {Name: "débit", Limit: floodgate.PerMinute(1)}}}, "Rules[1].Name"},
		{"duplicate name", httplimit.Config{Store: store, Rules: []httplimit.Rule{ok, ok}}, "Rules[1].Name"},
		{"bad limit", httplimit.Config{Store: store, Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(0)}}}, "Rules[0].Limit"},
		{"bad method", httplimit.Config{Store: store, Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1), Methods: []string{"GET /"}}}}, "Rules[0].Methods[0]"},
		{"bad pattern", httplimit.Config{Store: store, Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1), Paths: []string{"/a", "/{bad"}}}}, "Rules[0].Paths[1]"},
		{"conflicting patterns", httplimit.Config{Store: store, Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1), Paths: []string{"/a/{x}", "/{y}/b"}}}}, "Rules[0].Paths[1]"},
		{"bad failure mode", httplimit.Config{Store: store, Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1), Failure: 9}}}, "Rules[0].Failure"},
		{"bad header mode", httplimit.Config{Store: store, Rules: []httplimit.Rule{ok}, Headers: 9}, "Headers"},
		{"negative retry", httplimit.Config{Store: store, Rules: []httplimit.Rule{ok}, UnavailableRetryAfter: -time.Second}, "UnavailableRetryAfter"},
		{"negative log interval", httplimit.Config{Store: store, Rules: []httplimit.Rule{ok}, LogInterval: -time.Second}, "LogInterval"},
		{"hash tag in the prefix", httplimit.Config{Store: store, Rules: []httplimit.Rule{ok}, KeyPrefix: "app{1}:"}, "KeyPrefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httplimit.New(tt.cfg)
			var ce *httplimit.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			if ce.Field != tt.field || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q names %s, want %s", err, ce.Field, tt.field)
			}
		})
	}
	_, err := httplimit.New(httplimit.Config{Store: store, Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(0)}}})
	if !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("bad limit error %v does not match ErrInvalidLimit", err)
	}
}

// TestPathsHostMistakes: a Paths entry that ServeMux would read as a host
// that never matches (a path missing its '/', a host with a port) is an
// error of New naming the entry, its value and the pattern meant; path
// patterns and host names with a dot, localhost or an IPv6 literal are
// accepted.
func TestPathsHostMistakes(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		want    string // the error; "" accepted
	}{
		{"api/", `httplimit: Rules[0].Paths[0] "api/" is a host pattern (host "api"), so it never matches a path: a path pattern starts with '/' ("/api/"); a host pattern names a host with a dot, such as "api.example.com/"`},
		{"GET api/users", `httplimit: Rules[0].Paths[0] "GET api/users" is a host pattern (host "api"), so it never matches a path: a path pattern starts with '/' ("GET /api/users"); a host pattern names a host with a dot, such as "GET api.example.com/users"`},
		{"login/", `httplimit: Rules[0].Paths[0] "login/" is a host pattern (host "login"), so it never matches a path: a path pattern starts with '/' ("/login/"); a host pattern names a host with a dot, such as "login.example.com/"`},
		{"api.example.com:8080/", `httplimit: Rules[0].Paths[0] "api.example.com:8080/" has a host with a port ("api.example.com:8080"), which never matches: ServeMux matches the request's host without its port; drop the port`},
		{"/api/", ""},
		{"GET /users/{id}", ""},
		{"POST\t/login", ""},
		{"api.example.com/", ""},
		{"GET api.example.com/v1/", ""},
		{"localhost/", ""},
		{"[::1]/", ""},
	} {
		t.Run(tt.pattern, func(t *testing.T) {
			_, err := httplimit.New(httplimit.Config{Store: memory.New(), Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(1), Paths: []string{tt.pattern}}}})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New refused %q: %v", tt.pattern, err)
				}
				return
			}
			var ce *httplimit.ConfigError
			if !errors.As(err, &ce) || ce.Field != "Rules[0].Paths[0]" || err.Error() != tt.want {
				t.Fatalf("New = %v\nwant the *ConfigError %s", err, tt.want)
			}
		})
	}
	// What the error guards against: ServeMux takes "api/" and routes no
	// request for /api/ to it.
	mux := http.NewServeMux()
	mux.Handle("api/", http.NotFoundHandler())
	if _, p := mux.Handler(httptest.NewRequest(http.MethodGet, "/api/x", nil)); p != "" {
		t.Fatalf("ServeMux routed /api/x to %q", p)
	}
}

// TestTimeoutBelowStore: a Timeout at or above the store's own per-call
// timeout is an error of New naming both, with the fix.
func TestTimeoutBelowStore(t *testing.T) {
	store, err := redisstore.New(redisstore.Config{Addrs: []string{"127.0.0.1:1"}, Mode: redisstore.ModeStandalone, LazyConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	rules := []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(1)}}
	_, err = httplimit.New(httplimit.Config{Store: store, Rules: rules, Timeout: time.Second})
	const want = "httplimit: Timeout 1s must be below the store's own per-call timeout, 50ms (the Timeout of its *redisstore.Store), which would end every call first: set it below 50ms, or to 0 to let the store bound each call"
	var ce *httplimit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Timeout" || err.Error() != want {
		t.Fatalf("New = %v\nwant the *ConfigError %s", err, want)
	}
	if _, err := httplimit.New(httplimit.Config{Store: store, Rules: rules, Timeout: 40 * time.Millisecond}); err != nil {
		t.Fatalf("a Timeout below the store's: %v", err)
	}
}

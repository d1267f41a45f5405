package frontend_test

import (
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestWriteHeaders: a shadow check's policy is dropped, the deciding
// check's decision is described, Retry-After comes with a denial and the
// fallback header with a local decision; the returned view is the
// engine's.
func TestWriteHeaders(t *testing.T) {
	l := floodgate.PerMinute(2)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	outage := failingStore{err: floodgate.ErrStoreUnavailable}
	mem := func() floodgate.Store { return memory.New(memory.WithClock(clocktest.NewManual(now))) }
	cases := []struct {
		name   string
		store  floodgate.Store
		checks []decide.Check
		before int // admitted calls on key "b" first
		want   http.Header
	}{
		{"admitted, shadow left out", mem(),
			[]decide.Check{{Rule: "a", Key: "a", Limit: floodgate.PerMinute(9)}, {Rule: "s", Key: "s", Limit: l, Shadow: true}, {Rule: "b", Key: "b", Limit: l}}, 0,
			http.Header{"Ratelimit-Policy": {`"a";q=9;w=60, "b";q=2;w=60`}, "Ratelimit": {`"b";r=1;t=60`},
				"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"1767323105"}}},
		{"denied", mem(), []decide.Check{{Rule: "b", Key: "b", Limit: l}}, 2,
			http.Header{"Ratelimit-Policy": {`"b";q=2;w=60`}, "Ratelimit": {`"b";r=0;t=60`}, "Retry-After": {"60"},
				// The log's two entries sit a microsecond apart; its reset
				// is still its window (Shown), not a second past it.
				"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1767323105"}}},
		{"only shadow", mem(), []decide.Check{{Rule: "s", Key: "s", Limit: l, Shadow: true}}, 0, http.Header{}},
		{"local", outage, []decide.Check{{Rule: "b", Key: "b", Limit: l, Failure: decide.FailLocal, LocalShare: 0.5}}, 0,
			http.Header{"Ratelimit-Policy": {`"b";q=2;w=60`}, "Ratelimit": {`"b";r=0;t=60`}, "Floodgate-Fallback": {"local"},
				"X-Ratelimit-Limit": {"1"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1767323105"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range c.before {
				_, _ = c.store.AllowN(t.Context(), "b", l, 1)
			}
			e, err := decide.New(c.store, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			policies := make([]*ratelimitheader.Policy, len(c.checks))
			for i, ch := range c.checks {
				p, err := ratelimitheader.NewPolicy(ch.Rule, ch.Limit.Quota, int64(ch.Limit.Window/time.Second))
				if err != nil {
					t.Fatal(err)
				}
				policies[i] = &p
			}
			res := e.Decide(t.Context(), c.checks)
			h := http.Header{}
			v := frontend.WriteHeaders(h, ratelimitheader.Both, now, policies, &res)
			if want := frontend.Headers(&res); v.Deciding != want.Deciding || v.Decision != want.Decision || v.Local != want.Local {
				t.Errorf("view = %+v, want Headers' %+v", v, want)
			}
			if len(h) != len(c.want) {
				t.Errorf("headers = %v, want %v", h, c.want)
			}
			for k, want := range c.want {
				if got := h.Get(k); got != want[0] {
					t.Errorf("%s = %q, want %q (all: %v)", k, got, want[0], h)
				}
			}
			for i, ch := range c.checks {
				if ch.Shadow != (policies[i] == nil) {
					t.Errorf("policies[%d] = %v for shadow %v: want nil exactly for shadow checks", i, policies[i], ch.Shadow)
				}
			}
		})
	}
}

// TestWriteUnavailable: only a request a fail-closed check could not
// decide gets Retry-After, of the engine's UnavailableRetryAfter.
func TestWriteUnavailable(t *testing.T) {
	l := floodgate.PerMinute(1)
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		want  string // Retry-After; "" for none
	}{
		{"unavailable", failingStore{err: floodgate.ErrStoreUnavailable}, "7"},
		{"store error", failingStore{err: errors.New("bad reply")}, ""},
		{"admitted", memory.New(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := decide.New(tc.store, decide.Options{Logger: slog.New(slog.DiscardHandler), UnavailableRetryAfter: 7 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			checks := []decide.Check{{Rule: "r", Key: "k", Limit: l, Failure: decide.FailClosed}}
			res := e.Decide(t.Context(), checks)
			h := http.Header{}
			frontend.WriteUnavailable(h, &res)
			if got := h.Get("Retry-After"); got != tc.want || len(h) > 1 {
				t.Errorf("headers = %v for verdict %v, want Retry-After %q only", h, res.Verdict, tc.want)
			}
		})
	}
}

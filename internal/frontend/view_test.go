package frontend_test

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestResultHeaders: the header view names the deciding check of an
// admitted or denied request, never a shadow one, lists every check but
// the shadow ones, and says when a check was decided locally.
func TestHeaders(t *testing.T) {
	l := floodgate.PerMinute(2)
	outage := failingStore{err: floodgate.ErrStoreUnavailable}
	cases := []struct {
		name         string
		store        floodgate.Store
		checks       []decide.Check
		before       int // admitted calls on key "b" first
		wantDeciding int
		wantListed   []bool
		wantLocal    bool
	}{
		{"admitted", memory.New(), []decide.Check{{Rule: "a", Key: "a", Limit: floodgate.PerMinute(9)}, {Rule: "s", Key: "s", Limit: l, Shadow: true}, {Rule: "b", Key: "b", Limit: l}}, 0,
			2, []bool{true, false, true}, false},
		{"denied", memory.New(), []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Key: "b", Limit: l}}, 2,
			1, []bool{true, true}, false},
		{"only shadow", memory.New(), []decide.Check{{Rule: "s", Key: "s", Limit: l, Shadow: true}}, 0,
			-1, []bool{false}, false},
		{"unavailable", outage, []decide.Check{{Rule: "a", Key: "a", Limit: l, Failure: decide.FailClosed}}, 0,
			-1, []bool{true}, false},
		{"local", outage, []decide.Check{{Rule: "a", Key: "a", Limit: l, Failure: decide.FailLocal}}, 0,
			0, []bool{true}, true},
		{"unavailable beside a local check", outage, []decide.Check{{Rule: "a", Key: "a", Limit: l, Failure: decide.FailLocal}, {Rule: "c", Key: "c", Limit: l, Failure: decide.FailClosed}}, 0,
			-1, []bool{true, true}, false},
		{"invalid", memory.New(), []decide.Check{{Rule: "a", Key: "a", Limit: l, Cost: 3}}, 0,
			-1, []bool{true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range c.before {
				_, _ = c.store.AllowN(t.Context(), "b", l, 1)
			}
			e, err := decide.New(c.store, decide.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			res := e.Decide(t.Context(), c.checks)
			v := frontend.Headers(&res)
			if v.Deciding != c.wantDeciding || v.Local != c.wantLocal {
				t.Fatalf("Headers() = deciding %d, local %v; want %d, %v (result %+v)", v.Deciding, v.Local, c.wantDeciding, c.wantLocal, res)
			}
			if v.Deciding >= 0 && v.Decision != res.Outcomes[v.Deciding].Decision {
				t.Errorf("Headers().Decision = %+v, want the deciding check's %+v", v.Decision, res.Outcomes[v.Deciding].Decision)
			}
			if v.Deciding < 0 && v.Decision != (floodgate.Decision{}) {
				t.Errorf("Headers().Decision = %+v with no deciding check, want zero", v.Decision)
			}
			var unlisted []int
			for i := range v.Unlisted {
				unlisted = append(unlisted, i)
			}
			var wantUnlisted []int
			for i, want := range c.wantListed {
				if got := v.Listed(i); got != want {
					t.Errorf("Listed(%d) = %v, want %v", i, got, want)
				}
				if !want {
					wantUnlisted = append(wantUnlisted, i)
				}
			}
			if !slices.Equal(unlisted, wantUnlisted) {
				t.Errorf("Unlisted = %v, want %v", unlisted, wantUnlisted)
			}
		})
	}
}

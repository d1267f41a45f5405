package frontend_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/memory"
)

// failingStore fails every call with err.
type failingStore struct {
	floodgate.Store
	err error
}

func (s failingStore) AllowN(context.Context, string, floodgate.Limit, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, s.err
}

// TestReporter: a library front end's counts and hook calls for a
// request's outcomes, one event of each kind, and the request's verdict.
func TestReporter(t *testing.T) {
	l := floodgate.PerMinute(1)
	outage := failingStore{err: floodgate.ErrStoreUnavailable}
	cases := []struct {
		name       string
		store      floodgate.Store
		checks     []decide.Check
		before     int // admitted calls on key "k" first
		callerGone bool
		want       frontend.Counts
		errs       []string // what onError gets, in order: rule, then the error's text
		shadows    []string // the rules onShadow gets
	}{
		{"admitted", memory.New(), []decide.Check{{Rule: "r", Key: "k", Limit: l}}, 0, false, frontend.Counts{}, nil, nil},
		{"denied", memory.New(), []decide.Check{{Rule: "r", Key: "k", Limit: l}}, 1, false, frontend.Counts{Denied: 1}, nil, nil},
		{"shadow denied", memory.New(), []decide.Check{{Rule: "s", Key: "k", Limit: l, Shadow: true}}, 1, false, frontend.Counts{ShadowDenied: 1}, nil, []string{"s"}},
		{"no key", memory.New(), []decide.Check{{Rule: "r", Limit: l, Err: errors.New("no header")}}, 0, false, frontend.Counts{KeyErrors: 1}, []string{"r no header"}, nil},
		{"outage, fail closed", outage, []decide.Check{{Rule: "r", Key: "k", Limit: l, Failure: decide.FailClosed}}, 0, false,
			frontend.Counts{StoreErrors: 1, Unavailable: 1}, []string{`r fe: rule "r": store: `}, nil},
		{"outage, local", outage, []decide.Check{{Rule: "r", Key: "k", Limit: l, Failure: decide.FailLocal}}, 0, false,
			frontend.Counts{StoreErrors: 1, LocalFallback: 1}, []string{`r fe: rule "r": store: `}, nil},
		{"outage, caller gone", outage, []decide.Check{{Rule: "r", Key: "k", Limit: l}}, 0, true, frontend.Counts{}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range c.before {
				_, _ = c.store.AllowN(t.Context(), "k", l, 1)
			}
			e, err := decide.New(c.store, decide.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			var errs, shadows []string
			rp := frontend.NewReporter("fe",
				func(req int, rule string, err error) {
					if req != 7 {
						t.Errorf("onError got request %d, want 7", req)
					}
					errs = append(errs, rule+" "+err.Error())
				},
				func(_ int, rule string, _ floodgate.Decision) { shadows = append(shadows, rule) })
			res := e.Decide(t.Context(), c.checks)
			rp.Report(7, c.callerGone, &res)
			if got := rp.Counts(); got != c.want {
				t.Errorf("Counts() = %+v, want %+v", got, c.want)
			}
			if len(errs) != len(c.errs) {
				t.Fatalf("onError got %q, want %q", errs, c.errs)
			}
			for i := range errs {
				if !strings.HasPrefix(errs[i], c.errs[i]) {
					t.Errorf("onError got %q, want it to begin with %q", errs[i], c.errs[i])
				}
			}
			if strings.Join(shadows, ",") != strings.Join(c.shadows, ",") {
				t.Errorf("onShadow got %q, want %q", shadows, c.shadows)
			}
		})
	}
	// Nil hooks: counted all the same.
	rp := frontend.NewReporter[int]("fe", nil, nil)
	checks := []decide.Check{{Rule: "r", Limit: l, Err: errors.New("no header")}}
	e, _ := decide.New(memory.New(), decide.Options{Logger: slog.New(slog.DiscardHandler)})
	res := e.Decide(t.Context(), checks)
	rp.Report(0, false, &res)
	if got := rp.Counts(); got != (frontend.Counts{KeyErrors: 1}) {
		t.Errorf("Counts() with nil hooks = %+v, want one key error", got)
	}
}

package decide_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
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

func TestResultEvent(t *testing.T) {
	l := floodgate.PerMinute(1)
	outage := failingStore{err: floodgate.ErrStoreUnavailable}
	broken := failingStore{err: errors.New("bad reply")}
	cases := []struct {
		name       string
		store      floodgate.Store
		check      decide.Check
		before     int // admitted calls on the key first
		callerGone bool
		want       decide.Event
	}{
		{"admitted", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l}, 0, false, decide.NoEvent},
		{"denied", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l}, 1, false, decide.NoEvent},
		{"shadow denied", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l, Shadow: true}, 1, false, decide.ShadowDenied},
		{"no key", memory.New(), decide.Check{Rule: "r", Limit: l, Err: errors.New("no header")}, 0, false, decide.KeyFailed},
		{"outage", outage, decide.Check{Rule: "r", Key: "k", Limit: l}, 0, false, decide.StoreFailed},
		{"store error", broken, decide.Check{Rule: "r", Key: "k", Limit: l, Failure: decide.FailClosed}, 0, false, decide.StoreFailed},
		{"outage, caller gone", outage, decide.Check{Rule: "r", Key: "k", Limit: l}, 0, true, decide.NoEvent},
		{"invalid cost", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l, Cost: 5}, 0, false, decide.NoEvent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range c.before {
				_, _ = c.store.AllowN(t.Context(), c.check.Key, c.check.Limit, 1)
			}
			e, err := decide.New(c.store, decide.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			checks := []decide.Check{c.check}
			res := e.Decide(t.Context(), checks)
			if got := res.Event(checks, 0, c.callerGone); got != c.want {
				t.Fatalf("Event = %d, want %d (result %+v)", got, c.want, res)
			}
		})
	}
}

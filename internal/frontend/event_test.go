package frontend_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/memory"
)

func TestEventOf(t *testing.T) {
	l := floodgate.PerMinute(1)
	outage := failingStore{err: floodgate.ErrStoreUnavailable}
	broken := failingStore{err: errors.New("bad reply")}
	cases := []struct {
		name       string
		store      floodgate.Store
		check      decide.Check
		before     int // admitted calls on the key first
		callerGone bool
		want       frontend.Event
	}{
		{"admitted", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l}, 0, false, frontend.NoEvent},
		{"denied", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l}, 1, false, frontend.NoEvent},
		{"shadow denied", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l, Shadow: true}, 1, false, frontend.ShadowDenied},
		{"no key", memory.New(), decide.Check{Rule: "r", Limit: l, Err: errors.New("no header")}, 0, false, frontend.KeyFailed},
		{"outage", outage, decide.Check{Rule: "r", Key: "k", Limit: l}, 0, false, frontend.StoreFailed},
		{"store error", broken, decide.Check{Rule: "r", Key: "k", Limit: l, Failure: decide.FailClosed}, 0, false, frontend.StoreFailed},
		{"outage, caller gone", outage, decide.Check{Rule: "r", Key: "k", Limit: l}, 0, true, frontend.NoEvent},
		{"invalid cost", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l, Cost: 5}, 0, false, frontend.NoEvent},
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
			if got := frontend.EventOf(&res, 0, c.callerGone); got != c.want {
				t.Fatalf("Event = %d, want %d (result %+v)", got, c.want, res)
			}
		})
	}
}

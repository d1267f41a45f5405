package memory_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
		return memory.New(memory.WithClock(clock))
	})
}

// closingStore is what a program that switches between stores holds: a
// store it closes when done.
type closingStore interface {
	floodgate.BatchStore
	Close()
}

// TestCloseSwitchesStores: the memory store has the Close that the Redis
// and remote stores have, so a program changes one line to switch, and
// Close leaves it usable.
func TestCloseSwitchesStores(t *testing.T) {
	var _ closingStore = (*redisstore.Store)(nil)
	var _ closingStore = (*remotestore.Store)(nil)
	var s closingStore = memory.New()
	limit := floodgate.PerMinute(1)
	s.Close()
	for i, want := range []bool{true, false} {
		d, err := s.Allow(t.Context(), "k", limit)
		if err != nil || d.Allowed != want {
			t.Fatalf("call %d after Close: %+v, %v; want allowed=%v", i+1, d, err, want)
		}
	}
	s.Close() // twice is fine
}

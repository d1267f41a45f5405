package decide

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestCacheSameShardGiveBack: a flooded key whose requests also admit, and
// so give back, a key of the same cache shard is still cached. A denied
// batch forgets the given-back key's entry, and that moves the shard's
// epoch: the request's own denial, decided before, must stay storable.
func TestCacheSameShardGiveBack(t *testing.T) {
	clock := clocktest.NewManual(time.Date(2030, 1, 7, 0, 0, 30, 0, time.UTC))
	// Wrapped, the memory store is a store the engine caches for, as Redis.
	store := struct{ floodgate.BatchStore }{memory.New(memory.WithClock(clock))}
	e, err := New(store, Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	wide := ""
	for i := 0; wide == ""; i++ { // a key of flood's shard, for this engine's seed
		if k := "wide-" + strconv.Itoa(i); e.cache.shard(k) == e.cache.shard("flood") {
			wide = k
		}
	}
	checks := []Check{
		{Rule: "flood", Key: "flood", Limit: floodgate.PerMinute(1)},
		{Rule: "wide", Key: wide, Limit: floodgate.PerMinute(1000)},
	}
	for i := range 10 {
		r := e.Decide(context.Background(), checks)
		if want := i == 0; r.Allowed() != want {
			t.Fatalf("request %d: %v, want admitted %v", i, r.Verdict, want)
		}
		if cached := r.Outcomes[0].Cached; i >= 2 && !cached {
			t.Errorf("request %d: the flood key's denial came from the store, want the cache", i)
		}
	}
	if hits := e.CacheStats().Hits; hits != 8 {
		t.Errorf("cache hits %d, want 8 (every denial after the first)", hits)
	}
}

// TestResetLeavesFallbackUnmade: a Reset on an engine whose local fallback
// never decided does not make the fallback's memory store; one that did
// clears its state.
func TestResetLeavesFallbackUnmade(t *testing.T) {
	e, err := New(memory.New(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := floodgate.PerMinute(1)
	if err := e.Reset(t.Context(), "k", l); err != nil || e.localMade.Load() {
		t.Fatalf("Reset = %v; fallback made: %v", err, e.localMade.Load())
	}
	if _, err := e.local().AllowN(t.Context(), "k", l, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.Reset(t.Context(), "k", l); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.local().AllowN(t.Context(), "k", l, 1); !d.Allowed {
		t.Errorf("the fallback's state outlived the Reset: %+v", d)
	}
}

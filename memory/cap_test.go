package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/memory"
)

func TestMaxKeysEvictsLeastRecentlyDecided(t *testing.T) {
	t.Parallel() // a store and clock of its own: seconds of CPU under -race, beside the others
	ctx := context.Background()
	clock := clocktest.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const maxKeys = 256 * 32 // 32 a shard
	const lenEvery = 16      // steps between looks at Len
	s := memory.New(memory.WithMaxKeys(maxKeys), memory.WithClock(clock))
	limit := floodgate.PerHour(3)
	// The "old" keys are used up first, then kept busy every few seconds;
	// a flood of new keys follows, in every algorithm.
	var old []string
	for i := range 256 {
		k := "old-" + strconv.Itoa(i)
		old = append(old, k)
		for range 3 {
			_, _ = s.Allow(ctx, k, limit)
		}
	}
	for i := range 20_000 {
		if i%500 == 0 {
			clock.Advance(2 * time.Second)
			for _, k := range old { // decided again: recently used
				if d, _ := s.Allow(ctx, k, limit); d.Allowed {
					t.Fatalf("old key %s admitted after %d new keys: evicted though recently decided", k, i)
				}
			}
		}
		clock.Advance(time.Millisecond)
		alg := algorithmlist.All()[i%4]
		_, _ = s.Allow(ctx, "new-"+strconv.Itoa(i), floodgate.NewLimit(alg, 3, time.Minute))
		// Each step adds at most one key (Len locks all 1024 tables, which
		// under -race costs more than the step): at most maxKeys+256-lenEvery
		// keys now means at most maxKeys+256 at every step until the next look.
		if i%lenEvery == 0 {
			if n := s.Len(); n > maxKeys+256-lenEvery {
				t.Fatalf("after %d new keys the store holds %d keys, over the cap of %d", i+1, n, maxKeys)
			}
		}
	}
	st := s.Stats()
	if st.Evictions < 20_000-maxKeys || st.Keys > maxKeys || st.MaxKeys != maxKeys {
		t.Fatalf("stats %+v: want about %d evictions and at most %d keys", st, 20_000-maxKeys, maxKeys)
	}
}

func TestMaxKeysInBatches(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.WithMaxKeys(512))
	limit := floodgate.PerMinute(10)
	for i := range 5000 {
		items := []floodgate.BatchItem{
			{Key: "a-" + strconv.Itoa(i), Limit: limit, Cost: 1},
			{Key: "b-" + strconv.Itoa(i), Limit: floodgate.NewTokenBucket(10, 10, time.Minute), Cost: 1},
		}
		results := make([]floodgate.BatchResult, 2)
		s.AllowBatch(ctx, items, results)
		for j, r := range results {
			if r.Err != nil || !r.Decision.Allowed {
				t.Fatalf("batch %d item %d: %+v", i, j, r)
			}
		}
	}
	if n := s.Len(); n > 512+256 {
		t.Fatalf("%d keys, over the cap", n)
	}
}

func TestNoCapByDefault(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	for i := range 10_000 {
		_, _ = s.Allow(ctx, strconv.Itoa(i), floodgate.PerMinute(1))
	}
	if st := s.Stats(); st.Keys != 10_000 || st.Evictions != 0 || st.MaxKeys != 0 || st.KeyBytes != 38890 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSweepGivesKeysBackWhileIdle(t *testing.T) {
	ctx := context.Background()
	clock := clocktest.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock), memory.WithEvictionGrace(time.Minute))
	for i := range 50_000 {
		_, _ = s.Allow(ctx, "k"+strconv.Itoa(i), floodgate.PerSecond(5))
	}
	_, _ = s.Allow(ctx, "long", floodgate.PerHour(5))
	s.Sweep() // nothing is replenished yet
	if n := s.Len(); n != 50_001 {
		t.Fatalf("sweep before any key replenished: %d keys left, want 50001", n)
	}
	clock.Advance(time.Second + time.Minute + time.Microsecond)
	s.Sweep()
	if st := s.Stats(); st.Keys != 1 || st.KeyBytes != len("long") {
		t.Fatalf("after the window and the grace: %+v, want only the key whose window is an hour", st)
	}
	// A swept key reads as new.
	if d, _ := s.Allow(ctx, "k1", floodgate.PerSecond(5)); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("a swept key: %+v", d)
	}
}

// BenchmarkAllowCapped measures decisions under WithMaxKeys: 100k keys
// with no cap and within a cap of 200k (the cap's bookkeeping alone), and
// 1M keys through a cap of 100k (every decision a new key, and an eviction
// every few).
func BenchmarkAllowCapped(b *testing.B) {
	ctx := context.Background()
	limit := floodgate.PerMinute(100)
	for _, c := range []struct {
		name         string
		keys, maxKey int
	}{{"100k-no-cap", 100_000, 0}, {"100k-under-cap", 100_000, 200_000}, {"1M-over-cap-100k", 1_000_000, 100_000}} {
		keys := benchKeys(c.keys)
		s := memory.New(memory.WithMaxKeys(c.maxKey))
		for _, k := range keys[:min(len(keys), max(c.maxKey, c.keys))] {
			_, _ = s.Allow(ctx, k, limit)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, _ = s.Allow(ctx, keys[i%len(keys)], limit)
				i++
			}
		})
	}
}

// Stats reports the cap as configured, not as the shards round it.
func TestMaxKeysReportedAsConfigured(t *testing.T) {
	for _, n := range []int{1, 255, 256, 1000, 1_000_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			if got := memory.New(memory.WithMaxKeys(n)).Stats().MaxKeys; got != int64(n) {
				t.Errorf("Stats().MaxKeys = %d, want %d", got, n)
			}
		})
	}
}

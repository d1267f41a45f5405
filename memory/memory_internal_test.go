package memory

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithm"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
)

// TestEvictionBoundsMemory drives a million distinct keys through the store
// in waves one window apart: expired keys are swept, so the table never holds
// much more than the keys live within one window. Under the race detector
// (which this single goroutine gives nothing to find) it drives 300,000,
// still more than the bound below.
func TestEvictionBoundsMemory(t *testing.T) {
	t.Parallel() // a store and clock of its own: seconds of CPU under -race, beside the others
	if testing.Short() {
		t.Skip("a million keys")
	}
	ctx := context.Background()
	clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
	const waves = 10
	perWave := 100_000
	if raceEnabled {
		perWave = 30_000
	}
	for _, alg := range algorithmlist.All() {
		s := New(WithClock(clock))
		limit := floodgate.NewLimit(alg, 5, time.Second)
		most := 0
		for w := range waves {
			for i := range perWave {
				if _, err := s.Allow(ctx, strconv.Itoa(w*perWave+i), limit); err != nil {
					t.Fatal(err)
				}
			}
			most = max(most, s.Len())
			// Every key of this wave is now fully replenished, and has been
			// for longer than the eviction grace.
			clock.Advance(3*time.Second + DefaultEvictionGrace)
		}
		// Live keys never exceed one wave; sweeping lets the table reach at
		// most about twice that before it is cleaned.
		if bound := 2*perWave + shardCount*minSweep; most > bound {
			t.Errorf("%s: the store held %d keys after %d distinct, want at most %d", alg, most, waves*perWave, bound)
		}
	}
}

// TestClockBackwards: time running backwards neither panics nor creates
// quota.
func TestClockBackwards(t *testing.T) {
	ctx := context.Background()
	clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
	s := New(WithClock(clock))
	for _, alg := range algorithmlist.All() {
		limit := floodgate.NewLimit(alg, 3, time.Minute)
		admitted := 0
		for range 3 {
			if d, _ := s.Allow(ctx, "k", limit); d.Allowed {
				admitted++
			}
		}
		clock.Advance(-30 * time.Second)
		for range 3 {
			d, err := s.Allow(ctx, "k", limit)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
			if d.RetryAfter < 0 || d.ResetAfter < 0 || d.Remaining < 0 {
				t.Errorf("%s: negative figure after the clock went back: %+v", alg, d)
			}
		}
		clock.Advance(30 * time.Second)
		if admitted != 3 {
			t.Errorf("%s: admitted %d with the clock going back, want 3", alg, admitted)
		}
	}
}

// TestDecisionsNeverGoBack: a caller that read the clock before another
// caller's decision on the same key, and then took the key's lock, decides
// (or refunds) at that decision's moment, as Redis's scripts run in order:
// at 0.9 s after a decision at 1.5 s it gets what it would at 1.5 s.
func TestDecisionsNeverGoBack(t *testing.T) {
	ctx := context.Background()
	base := time.Unix(1_900_000_000, 0)
	for _, alg := range algorithmlist.All() {
		for _, refund := range []bool{false, true} {
			// Decisions at 1.5 s up to the quota, then a decision read at
			// second, or a refund read at second and a decision at 2 s.
			limit := floodgate.NewLimit(alg, 1, time.Second)
			if refund {
				limit.Quota = 3 // a refund that leaves the key partly used
			}
			decisions := func(second time.Duration) floodgate.Decision {
				clock := clocktest.NewManual(base.Add(1500 * time.Millisecond))
				s := New(WithClock(clock))
				for range limit.Quota {
					if d, _ := s.Allow(ctx, "k", limit); !d.Allowed {
						t.Fatalf("%s: a first decision was denied", alg)
					}
				}
				clock.Set(base.Add(second))
				if refund {
					if err := s.RefundN(ctx, "k", limit, 1); err != nil {
						t.Fatal(err)
					}
					// Before the key's true expiry, after one set from 0.9 s.
					clock.Set(base.Add(2 * time.Second))
				}
				d, err := s.Allow(ctx, "k", limit)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			late, same := decisions(900*time.Millisecond), decisions(1500*time.Millisecond)
			if late != same {
				t.Errorf("%s (refund first: %v): read at 0.9 s after a decision at 1.5 s, gave %+v, want %+v (as at 1.5 s)", alg, refund, late, same)
			}
		}
	}
}

// stallingClock is a clock whose next read, once armed, blocks after
// taking the time until released: a caller that read the clock and was
// descheduled before it took the key's lock.
type stallingClock struct {
	mu      sync.Mutex
	t       time.Time
	armed   bool
	read    chan struct{} // closed once the armed read has taken the time
	release chan struct{}
}

func (c *stallingClock) Now() time.Time {
	c.mu.Lock()
	t, armed := c.t, c.armed
	c.armed = false
	c.mu.Unlock()
	if armed {
		close(c.read)
		<-c.release
	}
	return t
}

func (c *stallingClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// TestStalledCallerAfterSweep: a caller reads the clock at 1.2 s and
// stalls; another is admitted at 1.5 s; a sweep at 3 s drops the key (no
// grace). The stalled caller then inserts the key anew and must decide at a
// moment after the sweep, not at 1.2 s: one admission in [3 s, 4 s) with a
// quota of 1 per second, not two. And a clock before 1970 decides as any
// other (a new entry's moment is its insert's, not 0).
func TestStalledCallerAfterSweep(t *testing.T) {
	ctx := context.Background()
	base := time.Unix(1_900_000_000, 0)
	for _, alg := range algorithmlist.All() {
		limit := floodgate.NewLimit(alg, 1, time.Second)
		c := &stallingClock{t: base.Add(1200 * time.Millisecond), armed: true, read: make(chan struct{}), release: make(chan struct{})}
		s := New(WithClock(c), WithEvictionGrace(0))
		done := make(chan floodgate.Decision)
		go func() {
			d, _ := s.Allow(ctx, "k", limit)
			done <- d
		}()
		<-c.read
		c.set(base.Add(1500 * time.Millisecond))
		if d, _ := s.Allow(ctx, "k", limit); !d.Allowed {
			t.Fatalf("%s: the decision at 1.5 s was denied", alg)
		}
		c.set(base.Add(3 * time.Second))
		s.Sweep()
		if s.Len() != 0 {
			t.Fatalf("%s: the sweep kept the key", alg)
		}
		close(c.release)
		stalled := <-done
		c.set(base.Add(3100 * time.Millisecond))
		if later, _ := s.Allow(ctx, "k", limit); stalled.Allowed && later.Allowed {
			t.Errorf("%s: the stalled caller and one at 3.1 s were both admitted under 1 per second", alg)
		}

		old := clocktest.NewManual(time.Unix(-100, 0))
		s = New(WithClock(old))
		_, _ = s.Allow(ctx, "k", limit)
		old.Advance(10 * time.Second)
		if d, _ := s.Allow(ctx, "k", limit); !d.Allowed {
			t.Errorf("%s: before 1970, ten windows later: denied (%+v)", alg, d)
		}
	}
}

func TestMemoryUsage(t *testing.T) {
	ctx := context.Background()
	s := New()
	for _, alg := range algorithmlist.All() {
		limit := floodgate.NewLimit(alg, 100, time.Minute)
		if got := s.MemoryUsage("k", limit); got != 0 {
			t.Errorf("%s: MemoryUsage of an unknown key = %d, want 0", alg, got)
		}
		_, _ = s.AllowN(ctx, "k", limit, 50)
		if got := s.MemoryUsage("k", limit); got <= len("k") {
			t.Errorf("%s: MemoryUsage = %d, want more than the key's bytes", alg, got)
		}
	}
}

// TestReplenishedKeysAreReused: keys that come back within the eviction
// grace, though fully replenished between visits, are not dropped by the
// sweeps that new keys trigger, and so not rebuilt: revisiting 100k of them
// allocates nothing.
func TestReplenishedKeysAreReused(t *testing.T) {
	if testing.Short() {
		t.Skip("200k keys")
	}
	ctx := context.Background()
	clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
	s := New(WithClock(clock))
	limit := floodgate.NewTokenBucket(1, 1, time.Millisecond)
	keys := func(prefix string) []string {
		k := make([]string, 100_000)
		for i := range k {
			k[i] = prefix + strconv.Itoa(i)
		}
		return k
	}
	regular, newcomers := keys("r"), keys("n")
	round := func(keys []string) {
		clock.Advance(2 * time.Millisecond) // every key seen so far is fully replenished
		for _, k := range keys {
			if d, err := s.Allow(ctx, k, limit); err != nil || !d.Allowed {
				t.Fatalf("Allow(%s) = %+v, %v", k, d, err)
			}
		}
	}
	round(regular)
	round(newcomers) // doubles every shard: sweeps run
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	round(regular)
	runtime.ReadMemStats(&after)
	if allocs := after.Mallocs - before.Mallocs; allocs > 1000 {
		t.Fatalf("revisiting %d replenished keys allocated %d times, want ~0 (were they evicted?)", len(regular), allocs)
	}
}

// TestEvictionGrace: WithEvictionGrace sets how long a fully replenished key
// stays. New keys make the tables sweep: with no grace the replenished keys
// of an earlier wave are dropped; with a grace longer than they have been
// replenished, all are kept. Decisions are the same either way.
func TestEvictionGrace(t *testing.T) {
	t.Parallel() // a store and clock of its own: seconds of CPU under -race, beside the others
	if testing.Short() {
		t.Skip("200k keys")
	}
	ctx := context.Background()
	const perWave = 100_000
	limit := floodgate.NewTokenBucket(1, 1, time.Millisecond)
	for _, grace := range []time.Duration{0, time.Hour} {
		clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
		s := New(WithClock(clock), WithEvictionGrace(grace))
		if s.grace != grace.Microseconds() {
			t.Fatalf("WithEvictionGrace(%s): grace %dµs", grace, s.grace)
		}
		for _, wave := range []string{"a", "b"} {
			for i := range perWave {
				if d, err := s.Allow(ctx, wave+strconv.Itoa(i), limit); err != nil || !d.Allowed {
					t.Fatalf("grace %s: Allow = %+v, %v", grace, d, err)
				}
			}
			clock.Advance(time.Second) // every key is replenished, within the hour
		}
		switch n := s.Len(); {
		case grace == 0 && n > perWave+shardCount*minSweep:
			t.Errorf("no grace: the store holds %d keys after two waves of %d, want the first wave swept", n, perWave)
		case grace > 0 && n != 2*perWave:
			t.Errorf("grace %s: the store holds %d keys, want all %d kept", grace, n, 2*perWave)
		}
	}
	if s := New(WithEvictionGrace(-time.Second)); s.grace != 0 {
		t.Errorf("a negative grace is %dµs, want 0", s.grace)
	}
}

// TestChangedLimitSeesWhatRedisKeeps: under another limit, a key reads as
// its Redis key would. A refund that fills a bucket deletes the key, so a
// larger capacity then finds a full bucket; a key whose last write has
// expired is gone, so a longer window finds no entry; and a denied request
// writes nothing, not even the expiry, under whichever limit.
func TestChangedLimitSeesWhatRedisKeeps(t *testing.T) {
	ctx := context.Background()
	clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
	s := New(WithClock(clock))
	mustAllow := func(key string, l floodgate.Limit, n int64, want bool) floodgate.Decision {
		t.Helper()
		d, err := s.AllowN(ctx, key, l, n)
		if err != nil || d.Allowed != want {
			t.Fatalf("AllowN(%s, %v, %d) = %+v, %v; want allowed %v", key, l, n, d, err, want)
		}
		return d
	}

	small, large := floodgate.NewTokenBucket(10, 10, time.Second), floodgate.NewTokenBucket(100, 100, time.Second)
	mustAllow("b", small, 5, true)
	if err := s.RefundN(ctx, "b", small, 5); err != nil {
		t.Fatal(err)
	}
	if d := mustAllow("b", large, 100, true); d.Remaining != 0 {
		t.Fatalf("a bucket refunded to full, under a larger capacity: %+v, want the whole capacity", d)
	}

	short, long := floodgate.NewLimit(floodgate.SlidingWindowLog, 2, time.Second), floodgate.NewLimit(floodgate.SlidingWindowLog, 2, time.Hour)
	mustAllow("log", short, 2, true)
	clock.Advance(2 * time.Second)
	if d := mustAllow("log", long, 1, true); d.Remaining != 1 {
		t.Fatalf("an expired log under a longer window: %+v, want its entries gone", d)
	}

	mustAllow("deny", short, 2, true)
	clock.Advance(time.Second / 2)
	mustAllow("deny", long, 1, false) // its ResetAfter is an hour away
	clock.Advance(time.Second)
	if d := mustAllow("deny", long, 1, true); d.Remaining != 1 {
		t.Fatalf("a log past the expiry of its last write: %+v, want its entries gone", d)
	}
}

// sweepAll drops every entry of s that has been replenished for longer than
// grace at now, as an insert's sweep does.
func sweepAll(s *Store, now, grace int64) {
	for _, k := range s.keyspaces {
		switch k := k.(type) {
		case *tables[algorithm.Log, *algorithm.Log]:
			sweepTables(&k.shards, now, grace)
		case *tables[algorithm.Bucket, *algorithm.Bucket]:
			sweepTables(&k.shards, now, grace)
		case *tables[algorithm.Counter, *algorithm.Counter]:
			sweepTables(&k.shards, now, grace)
		case *tables[algorithm.Fixed, *algorithm.Fixed]:
			sweepTables(&k.shards, now, grace)
		case nil:
		default:
			panic("sweepAll: unknown keyspace")
		}
	}
}

func sweepTables[S any](shards *[shardCount]table[S], now, grace int64) {
	for i := range shards {
		t := &shards[i]
		// A table without an index holds nothing: skip it without taking
		// its lock (most of the 256 are empty here, and under -race a lock
		// costs far more than the atomic read).
		if t.index.Load() == nil {
			continue
		}
		t.mu.Lock()
		if t.index.Load() != nil {
			t.sweep(now, grace)
		}
		t.mu.Unlock()
	}
}

// TestEvictionNeverChangesDecisions: a store that drops every expired key
// after each step decides as one that drops none, for random costs, refunds,
// batches and limits changed on the same keys (quota and window).
func TestEvictionNeverChangesDecisions(t *testing.T) {
	t.Parallel() // a store and clock of its own: seconds of CPU under -race, beside the others
	ctx := context.Background()
	clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
	swept, kept := New(WithClock(clock), WithEvictionGrace(0)), New(WithClock(clock))
	r := rand.New(rand.NewPCG(1, 2))
	windows := []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second}
	quotas := []int64{1, 2, 5, 20}
	for i := range 20000 {
		l := floodgate.NewLimit(algorithmlist.All()[r.IntN(len(algorithmlist.All()))], quotas[r.IntN(len(quotas))], windows[r.IntN(len(windows))])
		key := strconv.Itoa(r.IntN(4))
		n := 1 + r.Int64N(l.Quota)
		clock.Advance(time.Duration(r.Int64N(int64(l.Window))))
		switch r.IntN(10) {
		case 0:
			_ = swept.RefundN(ctx, key, l, n)
			_ = kept.RefundN(ctx, key, l, n)
		case 1:
			items := []floodgate.BatchItem{{Key: key, Limit: l, Cost: n}, {Key: strconv.Itoa(r.IntN(4)), Limit: l, Cost: 1}}
			rs, rk := make([]floodgate.BatchResult, 2), make([]floodgate.BatchResult, 2)
			swept.AllowBatch(ctx, items, rs)
			kept.AllowBatch(ctx, items, rk)
			if rs[0] != rk[0] || rs[1] != rk[1] {
				t.Fatalf("step %d: AllowBatch(%v): swept %+v, kept %+v", i, items, rs, rk)
			}
		default:
			ds, _ := swept.AllowN(ctx, key, l, n)
			dk, _ := kept.AllowN(ctx, key, l, n)
			if ds != dk {
				t.Fatalf("step %d: AllowN(%s, %v, %d): swept %+v, kept %+v", i, key, l, n, ds, dk)
			}
		}
		sweepAll(swept, swept.now(), 0)
	}
}

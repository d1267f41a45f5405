package memory

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithm"
)

// TestLockAllUnlocksOnDead: lockAll reports a dropped entry and leaves every
// entry unlocked.
func TestLockAllUnlocksOnDead(t *testing.T) {
	es := []*batchEntry[algorithm.Bucket, *algorithm.Bucket]{{}, {at: droppedAt}, {}}
	locks := make([]lockedEntry, len(es))
	for i, e := range es {
		locks[i] = lockedEntry{e: e, at: e.addr()}
	}
	if lockAll(locks) {
		t.Fatal("lockAll locked a dead entry")
	}
	for i, e := range es {
		if !e.mu.TryLock() {
			t.Fatalf("entry %d left locked", i)
		}
	}
}

// TestBatchLarge: a batch of more items than batchInline, many of them on
// the same keys, is all or nothing like a small one.
func TestBatchLarge(t *testing.T) {
	ctx := context.Background()
	s := New(WithClock(clocktest.NewManual(time.Unix(1_900_000_000, 0))))
	limits := []floodgate.Limit{
		floodgate.NewLimit(floodgate.SlidingWindowLog, 10, time.Minute),
		floodgate.NewTokenBucket(10, 1, time.Second),
		floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, time.Minute),
		floodgate.NewLimit(floodgate.FixedWindow, 10, time.Minute),
	}
	var items []floodgate.BatchItem
	for i := range 40 { // ten of cost 1 on each of four keys, one per algorithm
		items = append(items, floodgate.BatchItem{Key: "k" + strconv.Itoa(i%4), Limit: limits[i%4], Cost: 1})
	}
	results := make([]floodgate.BatchResult, len(items)+1)
	s.AllowBatch(ctx, append(items, items[0]), results) // one too many: denied
	if r := results[len(items)]; r.Err != nil || r.Decision.Allowed {
		t.Fatalf("the 11th item on k0 got %+v, %v; want denied", r.Decision, r.Err)
	}
	s.AllowBatch(ctx, items, results)
	for i, r := range results[:len(items)] {
		if want := int64(9 - i/4); r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != want {
			t.Fatalf("item %d got %+v, %v; want allowed with Remaining %d", i, r.Decision, r.Err, want)
		}
	}
	for i, l := range limits {
		if d, _ := s.Allow(ctx, "k"+strconv.Itoa(i), l); d.Allowed {
			t.Errorf("%s: allowed after the batch took the whole quota", l.Algorithm)
		}
	}
}

// TestBatchWithSweeps: batches stay all or nothing and exact while sweeps
// drop entries, including ones a batch has found but not yet locked, and
// inserts grow the tables. Time is frozen within a phase and moves past
// every expiry (the eviction grace is zero) between phases, so each phase
// starts on fully replenished keys that the sweeps keep dropping until a
// decision touches them. Goroutines send batches of five items: a key
// shared by all, one per group, one per goroutine, one per goroutine that
// never denies and one new in every batch, which a sweep may drop between
// the insert and the lock. Every key must record exactly the batches
// admitted in full that touch it, and the shared key exactly its quota.
func TestBatchWithSweeps(t *testing.T) {
	const (
		goroutines, groupSize, rounds, phases = 32, 4, 20, 4
		groups                                = goroutines / groupSize
		sharedQuota, groupQuota, ownQuota     = 40, 6, 2
	)
	ctx := context.Background()
	clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
	s := New(WithClock(clock), WithEvictionGrace(0))
	shared := floodgate.NewLimit(floodgate.FixedWindow, sharedQuota, time.Second)
	group := floodgate.NewTokenBucket(groupQuota, groupQuota, time.Second)
	own := floodgate.NewLimit(floodgate.SlidingWindowLog, ownQuota, time.Second)
	free := floodgate.NewLimit(floodgate.SlidingWindowCounter, 1000, time.Second)
	once := floodgate.NewLimit(floodgate.FixedWindow, 1, time.Second)
	for phase := range phases {
		clock.Advance(3 * time.Second) // past every expiry: the counter's is two windows
		now := s.now()
		stop := make(chan struct{})
		var background sync.WaitGroup
		background.Go(func() { // sweeps every table, over and over
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, k := range s.keyspaces {
					if k != nil {
						k.(testKeyspace).sweepAll(now)
					}
				}
			}
		})
		background.Go(func() { // new keys: inserts, growth
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = s.Allow(ctx, "new/"+strconv.Itoa(phase)+"/"+strconv.Itoa(i), free)
			}
		})
		var mu sync.Mutex
		full := map[string]int{}
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				p := strconv.Itoa(phase) + "/"
				items := []floodgate.BatchItem{
					{Key: p + "shared", Limit: shared, Cost: 1},
					{Key: p + "group/" + strconv.Itoa(g/groupSize), Limit: group, Cost: 1},
					{Key: p + "own/" + strconv.Itoa(g), Limit: own, Cost: 1},
					{Key: p + "free/" + strconv.Itoa(g), Limit: free, Cost: 1},
					{Limit: once, Cost: 1},
				}
				results := make([]floodgate.BatchResult, len(items))
				for r := range rounds {
					items[4].Key = p + "once/" + strconv.Itoa(g) + "/" + strconv.Itoa(r)
					s.AllowBatch(ctx, items, results)
					all := true
					for _, r := range results {
						if r.Err != nil {
							t.Error(r.Err)
						}
						all = all && r.Decision.Allowed
					}
					if all {
						mu.Lock()
						for _, it := range items {
							full[it.Key]++
						}
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		background.Wait()
		check := func(key string, l floodgate.Limit) {
			t.Helper()
			left := 0
			for range l.Quota + 1 {
				if d, _ := s.Allow(ctx, key, l); d.Allowed {
					left++
				}
			}
			if got := int(l.Quota) - left; got != full[key] {
				t.Errorf("phase %d: %s recorded %d admissions, callers saw %d batches admitted", phase, key, got, full[key])
			}
		}
		p := strconv.Itoa(phase) + "/"
		if full[p+"shared"] != sharedQuota {
			t.Errorf("phase %d: %d batches admitted, want the shared quota %d", phase, full[p+"shared"], sharedQuota)
		}
		check(p+"shared", shared)
		for i := range groups {
			check(p+"group/"+strconv.Itoa(i), group)
		}
		for i := range goroutines {
			check(p+"own/"+strconv.Itoa(i), own)
			check(p+"free/"+strconv.Itoa(i), free)
			for r := range rounds {
				check(p+"once/"+strconv.Itoa(i)+"/"+strconv.Itoa(r), once)
			}
		}
	}
}

// TestSortEntries: entries come out in address order, each once, for few
// entries (insertion) and many (sort).
func TestSortEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 3, 5, batchInline, batchInline + 1, 40} {
		for range 100 {
			locks := make([]lockedEntry, n)
			want := map[uintptr]bool{}
			for i := range locks {
				locks[i].at = uintptr(rng.IntN(n + 1))
				want[locks[i].at] = true
			}
			got := sortEntries(locks)
			if len(got) != len(want) {
				t.Fatalf("n=%d: %d entries, want %d distinct", n, len(got), len(want))
			}
			for i := range got {
				if !want[got[i].at] || i > 0 && got[i-1].at >= got[i].at {
					t.Fatalf("n=%d: not sorted and distinct: %v", n, got)
				}
			}
		}
	}
}

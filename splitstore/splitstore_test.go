package splitstore_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/splitstore"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestConformance runs the store suite on two memory stores behind a
// split store: the suite's per-second limits go to one, all others to the
// other.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
		s, err := splitstore.New(memory.New(memory.WithClock(clock)), memory.New(memory.WithClock(clock)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewNeedsBothStores(t *testing.T) {
	if _, err := splitstore.New(memory.New(), nil); err == nil {
		t.Fatal("New accepted a nil per-second store")
	}
	if _, err := splitstore.New(nil, memory.New()); err == nil {
		t.Fatal("New accepted a nil main store")
	}
}

// remaining reads what key holds under l in s, taking nothing.
func remaining(t *testing.T, s floodgate.Store, key string, l floodgate.Limit) int64 {
	t.Helper()
	d, err := s.AllowN(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestRouting: a limit of exactly one second is decided in the per-second
// store, every other window (a minute, two seconds, a token bucket per
// 500ms) in the main store.
func TestRouting(t *testing.T) {
	for _, c := range []struct {
		name      string
		limit     floodgate.Limit
		perSecond bool
	}{
		{"per second", floodgate.PerSecond(5), true},
		{"fixed window of 1s", floodgate.NewLimit(floodgate.FixedWindow, 5, time.Second), true},
		{"token bucket per 1s", floodgate.NewTokenBucket(5, 1, time.Second), true},
		{"per minute", floodgate.PerMinute(5), false},
		{"per 2s", floodgate.NewLimit(floodgate.FixedWindow, 5, 2*time.Second), false},
		{"per 500ms", floodgate.NewLimit(floodgate.SlidingWindowCounter, 5, 500*time.Millisecond), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			main, ps := memory.New(), memory.New()
			s, _ := splitstore.New(main, ps)
			ctx := context.Background()
			if _, err := s.AllowN(ctx, "k", c.limit, 2); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Allow(ctx, "k", c.limit); err != nil {
				t.Fatal(err)
			}
			want, other := floodgate.Store(main), floodgate.Store(ps)
			if c.perSecond {
				want, other = ps, main
			}
			if got := remaining(t, want, "k", c.limit); got != 2 {
				t.Fatalf("remaining in the store of its window = %d, want 2", got)
			}
			if got := remaining(t, other, "k", c.limit); got != 5 {
				t.Fatalf("remaining in the other store = %d, want 5 (untouched)", got)
			}
			if err := s.RefundN(ctx, "k", c.limit, 1); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, want, "k", c.limit); got != 3 {
				t.Fatalf("remaining after a refund = %d, want 3", got)
			}
			// Reset clears both: state left in the other store (a rule whose
			// window changed) too.
			if _, err := other.AllowN(ctx, "k", c.limit, 4); err != nil {
				t.Fatal(err)
			}
			if err := s.Reset(ctx, "k", c.limit); err != nil {
				t.Fatal(err)
			}
			if a, b := remaining(t, want, "k", c.limit), remaining(t, other, "k", c.limit); a != 5 || b != 5 {
				t.Fatalf("after Reset: %d and %d remain, want 5 in both", a, b)
			}
		})
	}
}

// TestBatchAcrossStores: a batch with items in both stores is all or
// nothing: when either side denies, the other side's admitted items are
// given back.
func TestBatchAcrossStores(t *testing.T) {
	sec, min := floodgate.PerSecond(3), floodgate.PerMinute(3)
	for _, c := range []struct {
		name                 string
		preSec, preMin       int64 // taken before the batch
		wantAllowed          [3]bool
		wantSecLeft, wantMin int64 // remaining after the batch
	}{
		{"both admit", 0, 0, [3]bool{true, true, true}, 1, 2},
		{"the per-second side denies", 2, 0, [3]bool{true, false, true}, 1, 3},
		{"the main side denies", 0, 3, [3]bool{true, true, false}, 3, 0},
		{"both deny", 3, 3, [3]bool{false, false, false}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A manual clock: a stall of a second would empty the per-second window.
			clock := clocktest.NewManual(time.Date(2030, 1, 7, 0, 0, 30, 0, time.UTC))
			main, ps := memory.New(memory.WithClock(clock)), memory.New(memory.WithClock(clock))
			s, _ := splitstore.New(main, ps)
			ctx := context.Background()
			if c.preSec > 0 {
				_, _ = ps.AllowN(ctx, "s", sec, c.preSec)
			}
			if c.preMin > 0 {
				_, _ = main.AllowN(ctx, "m", min, c.preMin)
			}
			items := []floodgate.BatchItem{{Key: "s", Limit: sec, Cost: 1}, {Key: "s", Limit: sec, Cost: 1}, {Key: "m", Limit: min, Cost: 1}}
			res := make([]floodgate.BatchResult, len(items)+1) // longer than items, as the contract allows
			s.AllowBatch(ctx, items, res)
			for i, r := range res[:len(items)] {
				if r.Err != nil || r.RefundErr != nil || r.Decision.Allowed != c.wantAllowed[i] {
					t.Fatalf("item %d: %+v, want allowed %v", i, r, c.wantAllowed[i])
				}
				if r.Decision.Limit != 3 {
					t.Fatalf("item %d: limit %d, want 3", i, r.Decision.Limit)
				}
			}
			if got := remaining(t, ps, "s", sec); got != c.wantSecLeft {
				t.Fatalf("per-second store: %d remain, want %d", got, c.wantSecLeft)
			}
			if got := remaining(t, main, "m", min); got != c.wantMin {
				t.Fatalf("main store: %d remain, want %d", got, c.wantMin)
			}
		})
	}
}

// failingRefunds is a memory store whose refunds fail, as a store's can
// when it goes away between a batch and its undo.
type failingRefunds struct{ *memory.Store }

var errRefund = errors.New("the store went away")

func (failingRefunds) RefundN(context.Context, string, floodgate.Limit, int64) error {
	return errRefund
}

// TestBatchRefundFails: when one side denies and giving the other side's
// admitted item back fails, that item's result says so (RefundErr wraps
// the store's error) and the request is still denied.
func TestBatchRefundFails(t *testing.T) {
	clock := clocktest.NewManual(time.Date(2030, 1, 7, 0, 0, 30, 0, time.UTC))
	sec, min := floodgate.PerSecond(3), floodgate.PerMinute(1)
	main, ps := memory.New(memory.WithClock(clock)), failingRefunds{memory.New(memory.WithClock(clock))}
	s, _ := splitstore.New(main, ps)
	ctx := context.Background()
	if _, err := main.AllowN(ctx, "m", min, 1); err != nil { // the main side will deny
		t.Fatal(err)
	}
	items := []floodgate.BatchItem{{Key: "s", Limit: sec, Cost: 1}, {Key: "m", Limit: min, Cost: 1}}
	res := make([]floodgate.BatchResult, len(items))
	s.AllowBatch(ctx, items, res)
	if !res[0].Decision.Allowed || !errors.Is(res[0].RefundErr, errRefund) {
		t.Fatalf("the per-second item: %+v, want admitted with a RefundErr wrapping %v", res[0], errRefund)
	}
	if res[1].Decision.Allowed || res[1].Err != nil || res[1].RefundErr != nil {
		t.Fatalf("the main item: %+v, want denied, no error", res[1])
	}
	if got := remaining(t, ps, "s", sec); got != 2 {
		t.Fatalf("per-second store: %d remain, want 2 (the failed refund left the item recorded)", got)
	}
}

// TestBatchAcrossStoresConcurrent: 64 goroutines send batches of three
// items, two in the main store (a key shared by all, one per goroutine)
// and one in the per-second store (one per group of eight), with quotas
// that let every rule deny. The batches a side denies are given back on
// the other, so each key ends holding exactly the batches its callers saw
// admitted in full, and the shared key no more than its quota.
func TestBatchAcrossStoresConcurrent(t *testing.T) {
	const goroutines, groupSize, each = 64, 8, 30
	clock := clocktest.NewManual(time.Date(2030, 1, 7, 0, 0, 30, 0, time.UTC)) // time stands still
	main, ps := memory.New(memory.WithClock(clock)), memory.New(memory.WithClock(clock))
	s, _ := splitstore.New(main, ps)
	shared := floodgate.NewLimit(floodgate.SlidingWindowLog, 90, time.Hour)
	group := floodgate.NewLimit(floodgate.TokenBucket, 12, time.Second)
	own := floodgate.NewLimit(floodgate.FixedWindow, 2, time.Minute)
	var (
		mu       sync.Mutex
		sharedN  int
		groupN   [goroutines / groupSize]int
		ownN     [goroutines]int
		deniedBy [3]int
		wg       sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			items := []floodgate.BatchItem{
				{Key: "shared", Limit: shared, Cost: 1},
				{Key: "group/" + strconv.Itoa(g/groupSize), Limit: group, Cost: 1},
				{Key: "own/" + strconv.Itoa(g), Limit: own, Cost: 1},
			}
			res := make([]floodgate.BatchResult, len(items))
			for range each {
				s.AllowBatch(context.Background(), items, res)
				mu.Lock()
				all := true
				for i, r := range res {
					if r.Err != nil || r.RefundErr != nil {
						t.Errorf("item %d: %+v", i, r)
					}
					if !r.Decision.Allowed {
						all, deniedBy[i] = false, deniedBy[i]+1
					}
				}
				if all {
					sharedN++
					groupN[g/groupSize]++
					ownN[g]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	used := func(store floodgate.Store, key string, l floodgate.Limit) int {
		return int(l.Quota - remaining(t, store, key, l))
	}
	if got := used(main, "shared", shared); got != sharedN || sharedN > int(shared.Quota) {
		t.Errorf("shared key holds %d, callers saw %d batches admitted (quota %d)", got, sharedN, shared.Quota)
	}
	for i, n := range groupN {
		if got := used(ps, "group/"+strconv.Itoa(i), group); got != n {
			t.Errorf("group key %d holds %d, callers saw %d", i, got, n)
		}
	}
	for i, n := range ownN {
		if got := used(main, "own/"+strconv.Itoa(i), own); got != n {
			t.Errorf("own key %d holds %d, callers saw %d", i, got, n)
		}
	}
	for i, rule := range []string{"shared", "group", "own"} {
		if deniedBy[i] == 0 {
			t.Errorf("the %s rule never denied: the quotas do not exercise it", rule)
		}
	}
}

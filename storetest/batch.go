package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
)

// RunBatch runs the batch part of the suite (the cases Run adds for a
// [floodgate.BatchStore]), and fails the test if the stores from newStore do
// not implement floodgate.BatchStore.
func RunBatch(t *testing.T, newStore NewStore) {
	t.Helper()
	if s := newStore(t, clocktest.NewManual(Epoch)); !isBatchStore(s) {
		t.Fatalf("%T does not implement floodgate.BatchStore", s)
	}
	runBatch(t, newStore)
}

func isBatchStore(s floodgate.Store) bool {
	_, ok := s.(floodgate.BatchStore)
	return ok
}

func runBatch(t *testing.T, newStore NewStore) {
	cases := []struct {
		name string
		run  func(*testing.T, NewStore)
	}{
		{"AllOrNothing", testBatchAllOrNothing},
		{"InvalidItems", testBatchInvalidItems},
		{"ResultsSlice", testBatchResultsSlice},
		{"ConcurrentExactCount", testBatchConcurrentExactCount},
		{"NoPartialState", testBatchNoPartialState},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore) })
	}
}

// garbage fills a result before a batch, so that a result the store does
// not write shows.
var garbage = floodgate.BatchResult{
	Decision: floodgate.Decision{Allowed: true, Limit: -1, Remaining: -1, RetryAfter: -1, ResetAfter: -1},
	Err:      errors.New("storetest: result not written"),
}

// batch runs items through the store's AllowBatch and returns the results,
// after checking the invariants every decision keeps.
func (e *env) batch(items []floodgate.BatchItem) []floodgate.BatchResult {
	e.t.Helper()
	results := make([]floodgate.BatchResult, len(items))
	for i := range results {
		results[i] = garbage
	}
	e.store.(floodgate.BatchStore).AllowBatch(e.ctx, items, results)
	for i, r := range results {
		if r.Err != nil {
			if r.Decision.Allowed {
				e.t.Fatalf("item %d %+v: Allowed with error %v", i, items[i], r.Err)
			}
			continue
		}
		d := r.Decision
		if d.Remaining < 0 || d.Limit != items[i].Limit.Quota || d.Allowed != (d.RetryAfter == 0) || d.ResetAfter < 0 {
			e.t.Fatalf("item %d %+v: decision %+v breaks the invariants (Remaining >= 0, Limit = Quota, RetryAfter 0 exactly when allowed)", i, items[i], d)
		}
	}
	return results
}

// batchAlgorithms are the algorithm sets the batch cases run for: each
// algorithm alone, and all four mixed in one batch.
func batchAlgorithms() []struct {
	name string
	alg  func(key string) floodgate.Algorithm
} {
	type set = struct {
		name string
		alg  func(key string) floodgate.Algorithm
	}
	var out []set
	for _, a := range algorithmlist.All() {
		out = append(out, set{a.String(), func(string) floodgate.Algorithm { return a }})
	}
	// Mixed: the algorithm follows the key's first letter, so that the
	// items of one key share state and those of different keys do not.
	all := algorithmlist.All()
	out = append(out, set{"mixed", func(key string) floodgate.Algorithm { return all[int(key[0]-'a')%len(all)] }})
	return out
}

// batchLimit is the limit of the all-or-nothing cases: 10 per hour, or a
// bucket of 10 refilled at 10 per hour. Their clock never moves, so that
// every algorithm's Remaining is exactly 10 less what the key has taken.
func batchLimit(a floodgate.Algorithm) floodgate.Limit { return floodgate.NewLimit(a, 10, time.Hour) }

// testBatchAllOrNothing: a batch whose items all fit records them all; one
// denied item records none. Either way each item's decision is the one a
// sequence of AllowN calls in item order gives (so the same key twice is
// decided in order, the second seeing the first), and afterwards every key
// has exactly the quota left that the batch's outcome implies.
func testBatchAllOrNothing(t *testing.T, newStore NewStore) {
	const quota = 10
	type item struct {
		key  string
		cost int64
		alg  floodgate.Algorithm // zero: the algorithm set's choice for key
	}
	type batchCase struct {
		name  string
		used  map[string]int64 // taken from each key before the batch
		items []item
	}
	cases := []batchCase{
		{"all fit", nil, []item{{"a", 1, 0}, {"b", 3, 0}, {"c", 10, 0}, {"d", 2, 0}}},
		{"all fit exactly", map[string]int64{"a": 4, "b": 9, "d": 1}, []item{{"a", 6, 0}, {"b", 1, 0}, {"c", 2, 0}, {"d", 9, 0}}},
		{"first denied", map[string]int64{"a": 10}, []item{{"a", 1, 0}, {"b", 2, 0}, {"c", 3, 0}}},
		{"middle denied", map[string]int64{"b": 8}, []item{{"a", 2, 0}, {"b", 3, 0}, {"c", 1, 0}}},
		{"last denied", map[string]int64{"a": 2, "d": 10}, []item{{"a", 5, 0}, {"b", 5, 0}, {"c", 10, 0}, {"d", 1, 0}}},
		{"several denied", map[string]int64{"a": 9, "c": 10}, []item{{"a", 2, 0}, {"b", 4, 0}, {"c", 1, 0}}},
		{"same key twice, both fit", nil, []item{{"a", 3, 0}, {"a", 4, 0}}},
		{"same key twice, the second denied", map[string]int64{"a": 1}, []item{{"a", 6, 0}, {"b", 1, 0}, {"a", 6, 0}}},
		{"same key thrice between others", map[string]int64{"a": 1}, []item{{"a", 3, 0}, {"b", 1, 0}, {"a", 3, 0}, {"c", 5, 0}, {"a", 3, 0}}},
		{"same key, a later item fits again", nil, []item{{"a", 8, 0}, {"a", 5, 0}, {"a", 2, 0}, {"b", 1, 0}}},
		{"one key under every algorithm", nil, []item{
			{"a", 5, floodgate.SlidingWindowLog}, {"a", 10, floodgate.TokenBucket},
			{"a", 10, floodgate.SlidingWindowCounter}, {"a", 10, floodgate.FixedWindow}}},
		{"one key under every algorithm, one denied", nil, []item{
			{"a", 10, floodgate.SlidingWindowLog}, {"a", 10, floodgate.TokenBucket},
			{"a", 10, floodgate.SlidingWindowCounter}, {"a", 10, floodgate.FixedWindow}, {"a", 1, floodgate.TokenBucket}}},
	}
	// Batches of many items: forty of cost 1 over four keys fill them
	// exactly, and one more is denied.
	var many []item
	for i := range 40 {
		many = append(many, item{string(rune('a' + i%4)), 1, 0})
	}
	cases = append(cases,
		batchCase{"many items, all fit", nil, many},
		batchCase{"many items, the last denied", nil, append(many[:40:40], item{"c", 1, 0})})
	for _, set := range batchAlgorithms() {
		t.Run(set.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					e := newEnv(t, newStore)
					e.clock.Set(Epoch.Add(10 * time.Minute))
					// A state is a key under an algorithm. The batch runs on
					// the keys; its twins get the same items as AllowN calls.
					type state struct {
						key string
						alg floodgate.Algorithm
					}
					alg := func(it item) floodgate.Algorithm {
						if it.alg != 0 {
							return it.alg
						}
						return set.alg(it.key)
					}
					var states []state
					seen := map[state]bool{}
					for _, it := range c.items {
						if s := (state{it.key, alg(it)}); !seen[s] {
							seen[s] = true
							states = append(states, s)
						}
					}
					used := func(s state) int64 {
						if s.alg != set.alg(s.key) {
							return 0 // the pre-use is of the set's algorithm
						}
						return c.used[s.key]
					}
					for _, s := range states {
						if n := used(s); n > 0 {
							l := batchLimit(s.alg)
							for _, k := range []string{e.key(s.key), e.key("twin/" + s.key)} {
								if d := e.allowN(k, l, n); !d.Allowed {
									t.Fatalf("taking %d from %s beforehand: %+v", n, k, d)
								}
							}
						}
					}
					// The model: each item fits if its key has room after the
					// items before it; the batch is admitted if all fit.
					items := make([]floodgate.BatchItem, len(c.items))
					taken := map[state]int64{}
					allFit := true
					wantAllowed := make([]bool, len(c.items))
					for i, it := range c.items {
						s := state{it.key, alg(it)}
						items[i] = floodgate.BatchItem{Key: e.key(it.key), Limit: batchLimit(s.alg), Cost: it.cost}
						if used(s)+taken[s]+it.cost <= quota {
							taken[s] += it.cost
							wantAllowed[i] = true
						} else {
							allFit = false
						}
					}
					results := e.batch(items)
					for i, it := range items {
						r := results[i]
						if r.Err != nil {
							t.Fatalf("item %d (%s cost %d): %v", i, c.items[i].key, it.Cost, r.Err)
						}
						want := e.allowN(e.key("twin/"+c.items[i].key), it.Limit, it.Cost)
						if r.Decision != want {
							t.Errorf("item %d (%s cost %d under %s): got %+v, want %+v, the decision of AllowN calls in item order",
								i, c.items[i].key, it.Cost, it.Limit.Algorithm, r.Decision, want)
						}
						if r.Decision.Allowed != wantAllowed[i] {
							t.Errorf("item %d (%s cost %d): Allowed %v, want %v", i, c.items[i].key, it.Cost, r.Decision.Allowed, wantAllowed[i])
						}
					}
					// What is left: quota less the pre-use, less what the
					// batch took if it was admitted. A probe of cost 1 reads it.
					for _, s := range states {
						left := quota - used(s)
						if allFit {
							left -= taken[s]
						}
						d := e.allowN(e.key(s.key), batchLimit(s.alg), 1)
						if left > 0 && (!d.Allowed || d.Remaining != left-1) || left == 0 && (d.Allowed || d.Remaining != 0) {
							verb := "all admitted"
							if !allFit {
								verb = "denied"
							}
							t.Errorf("key %s under %s after the batch (%s): probe got %+v, want %d left before it", s.key, s.alg, verb, d, left)
						}
					}
				})
			}
		})
	}
}

// testBatchInvalidItems: an item with an invalid limit or cost (for a batch
// item, a cost of 0 too: batches take what they decide) gets the error
// AllowN gives for it, is never admitted and touches no state; the
// other items are decided as if it were not there.
func testBatchInvalidItems(t *testing.T, newStore NewStore) {
	ok := batchLimit(floodgate.TokenBucket)
	cases := []struct {
		name  string
		limit floodgate.Limit
		cost  int64
		want  error
	}{
		{"cost 0", ok, 0, floodgate.ErrInvalidCost},
		{"negative cost", ok, -3, floodgate.ErrInvalidCost},
		{"cost above the quota", ok, 11, floodgate.ErrCostExceedsLimit},
		{"huge cost", ok, 1 << 62, floodgate.ErrCostExceedsLimit},
		{"zero limit", floodgate.Limit{}, 1, floodgate.ErrInvalidLimit},
		{"unknown algorithm", floodgate.Limit{Algorithm: 99, Quota: 10, Window: time.Hour}, 1, floodgate.ErrInvalidLimit},
		{"zero window", floodgate.NewLimit(floodgate.FixedWindow, 10, 0), 1, floodgate.ErrInvalidLimit},
		{"invalid limit and cost", floodgate.Limit{}, 0, floodgate.ErrInvalidLimit},
	}
	for _, set := range batchAlgorithms() {
		t.Run(set.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					for _, denied := range []bool{false, true} {
						e := newEnv(t, newStore)
						e.clock.Set(Epoch.Add(10 * time.Minute))
						la, lb := batchLimit(set.alg("a")), batchLimit(set.alg("b"))
						if denied {
							e.allowN(e.key("b"), lb, 10)
						}
						items := []floodgate.BatchItem{
							{Key: e.key("a"), Limit: la, Cost: 2},
							{Key: e.key("bad"), Limit: c.limit, Cost: c.cost},
							{Key: e.key("b"), Limit: lb, Cost: 3},
						}
						results := e.batch(items)
						bad := results[1]
						if !errors.Is(bad.Err, c.want) || bad.Decision.Allowed {
							t.Fatalf("denied=%v: invalid item got %+v, %v; want %v and not allowed", denied, bad.Decision, bad.Err, c.want)
						}
						if _, single := e.store.AllowN(e.ctx, e.key("bad"), c.limit, c.cost); c.cost != 0 && !errors.Is(single, c.want) {
							t.Fatalf("AllowN with the invalid item's arguments = %v, want %v", single, c.want)
						}
						if c.limit == ok && bad.Decision.Limit != ok.Quota {
							t.Errorf("invalid cost: Decision.Limit = %d, want the quota %d", bad.Decision.Limit, ok.Quota)
						}
						if results[0].Err != nil || !results[0].Decision.Allowed || results[0].Decision.Remaining != 8 {
							t.Errorf("denied=%v: item a got %+v, %v; want allowed with Remaining 8", denied, results[0].Decision, results[0].Err)
						}
						if b := results[2]; b.Err != nil || b.Decision.Allowed == denied {
							t.Errorf("denied=%v: item b got %+v, %v", denied, b.Decision, b.Err)
						}
						// With no denial the valid items stay recorded; with
						// one, nothing is. The invalid item's key is untouched.
						wantA, wantB := int64(7), int64(6)
						if denied {
							wantA = 9
						}
						if d := e.allowN(e.key("a"), la, 1); !d.Allowed || d.Remaining != wantA {
							t.Errorf("denied=%v: probe of a got %+v, want allowed with Remaining %d", denied, d, wantA)
						}
						if d := e.allowN(e.key("b"), lb, 1); denied && d.Allowed || !denied && d.Remaining != wantB {
							t.Errorf("denied=%v: probe of b got %+v", denied, d)
						}
						if d := e.allowN(e.key("bad"), ok, 10); !d.Allowed {
							t.Errorf("the invalid item's key lost quota: %+v", d)
						}
					}
				})
			}
		})
	}
}

// testBatchResultsSlice: an empty batch does nothing; a results slice longer
// than the items has the items' outcomes at their indexes and the rest left
// alone.
func testBatchResultsSlice(t *testing.T, newStore NewStore) {
	e := newEnv(t, newStore)
	bs := e.store.(floodgate.BatchStore)
	bs.AllowBatch(e.ctx, nil, nil)
	bs.AllowBatch(e.ctx, []floodgate.BatchItem{}, make([]floodgate.BatchResult, 2))
	l := batchLimit(floodgate.SlidingWindowLog)
	items := []floodgate.BatchItem{{Key: e.key("a"), Limit: l, Cost: 4}, {Key: e.key("b"), Limit: l, Cost: 1}}
	results := make([]floodgate.BatchResult, 4)
	for i := range results {
		results[i] = garbage
	}
	bs.AllowBatch(e.ctx, items, results)
	for i, want := range []int64{6, 9} {
		if r := results[i]; r.Err != nil || !r.Decision.Allowed || r.Decision.Remaining != want {
			t.Errorf("result %d = %+v, %v; want allowed with Remaining %d", i, r.Decision, r.Err, want)
		}
	}
	for i := len(items); i < len(results); i++ {
		if results[i] != garbage {
			t.Errorf("result %d, past the items, was overwritten: %+v", i, results[i])
		}
	}
}

// testBatchConcurrentExactCount: 64 goroutines send batches of three items
// (a key shared by all, one per group of eight goroutines, one per
// goroutine), with quotas that let every rule deny. Afterwards every key has
// recorded exactly the batches the callers saw admitted in full that touch
// it, and the shared key, whose quota the demand exceeds, exactly its quota.
// The keys share a Redis hash tag in "one slot", where a Redis store decides
// atomically; in "any slots" a store may refund across slots, so the shared
// key may end below its quota, but never above it.
func testBatchConcurrentExactCount(t *testing.T, newStore NewStore) {
	const (
		goroutines, groupSize, each = 64, 8, 30
		groups                      = goroutines / groupSize
		// Every goroutine could be admitted twice (128), a group 12 times
		// (96 over the eight): the shared quota is reached, at least two
		// groups and at least 26 goroutines run out.
		sharedQuota, groupQuota, ownQuota = 90, 12, 2
	)
	type algorithms struct {
		name               string
		shared, group, own floodgate.Algorithm
	}
	sets := []algorithms{
		{"mixed", floodgate.SlidingWindowLog, floodgate.TokenBucket, floodgate.SlidingWindowCounter},
		{"mixed again", floodgate.FixedWindow, floodgate.SlidingWindowCounter, floodgate.TokenBucket},
	}
	for _, a := range algorithmlist.All() {
		sets = append(sets, algorithms{a.String(), a, a, a})
	}
	for _, set := range sets {
		for _, sameSlot := range []bool{true, false} {
			name := set.name + "/any slots"
			if sameSlot {
				name = set.name + "/one slot"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, newStore)
				e.clock.Set(Epoch.Add(10 * time.Minute))
				key := e.key
				if sameSlot {
					key = func(name string) string { return "{" + e.ns + "}" + name }
				}
				shared := floodgate.NewLimit(set.shared, sharedQuota, time.Hour)
				group := floodgate.NewLimit(set.group, groupQuota, time.Hour)
				own := floodgate.NewLimit(set.own, ownQuota, time.Hour)
				var (
					mu       sync.Mutex
					sharedN  int
					groupN   [groups]int
					ownN     [goroutines]int
					deniedBy [3]int // items denied, by rule
					firstErr error
					wg       sync.WaitGroup
					bs       = e.store.(floodgate.BatchStore)
				)
				for g := range goroutines {
					wg.Go(func() {
						items := []floodgate.BatchItem{
							{Key: key("shared"), Limit: shared, Cost: 1},
							{Key: key("group/" + strconv.Itoa(g/groupSize)), Limit: group, Cost: 1},
							{Key: key("own/" + strconv.Itoa(g)), Limit: own, Cost: 1},
						}
						results := make([]floodgate.BatchResult, len(items))
						for range each {
							bs.AllowBatch(e.ctx, items, results)
							all := true
							mu.Lock()
							for i, r := range results {
								if r.Err != nil && firstErr == nil {
									firstErr = fmt.Errorf("item %d: %w", i, r.Err)
								}
								if !r.Decision.Allowed {
									all = false
									deniedBy[i]++
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
				if firstErr != nil {
					t.Fatalf("AllowBatch: %v", firstErr)
				}
				// recorded returns how much of quota key has used: quota
				// less the requests of cost 1 it still admits.
				recorded := func(k string, l floodgate.Limit) int {
					return int(l.Quota) - e.admit(k, l, 1, int(l.Quota)+1)
				}
				if got := recorded(key("shared"), shared); got != sharedN {
					t.Errorf("shared key recorded %d admissions, callers saw %d batches admitted", got, sharedN)
				}
				if sameSlot && sharedN != sharedQuota || sharedN > sharedQuota {
					t.Errorf("%d batches admitted in full, want exactly the shared quota %d (demand %d)", sharedN, sharedQuota, goroutines*each)
				}
				for i := range groups {
					if got := recorded(key("group/"+strconv.Itoa(i)), group); got != groupN[i] {
						t.Errorf("group key %d recorded %d admissions, callers saw %d", i, got, groupN[i])
					}
				}
				for i := range goroutines {
					if got := recorded(key("own/"+strconv.Itoa(i)), own); got != ownN[i] {
						t.Errorf("own key %d recorded %d admissions, callers saw %d", i, got, ownN[i])
					}
				}
				if sameSlot {
					for i, rule := range []string{"shared", "group", "own"} {
						if deniedBy[i] == 0 {
							t.Errorf("the %s rule never denied: the quotas do not exercise it", rule)
						}
					}
				}
			})
		}
	}
}

// testBatchNoPartialState: batches that take from key x but are always
// denied by an exhausted key y never let another caller see x taken. While
// goroutines send them (x before y and y before x), another takes x's whole
// quota with AllowN and gives it back with RefundN, over and over: every one
// of those takes must be admitted. The keys share a Redis hash tag, as a
// Redis store is atomic only within one slot.
func testBatchNoPartialState(t *testing.T, newStore NewStore) {
	const batchers, each, quota = 4, 500, 5
	for _, l := range limits(quota, time.Hour) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			e.clock.Set(Epoch.Add(10 * time.Minute))
			x, y := "{"+e.ns+"}x", "{"+e.ns+"}y"
			e.allowN(y, l, quota)
			bs := e.store.(floodgate.BatchStore)
			var wg sync.WaitGroup
			done := make(chan struct{})
			errs := make(chan error, batchers+1)
			for g := range batchers {
				wg.Go(func() {
					items := []floodgate.BatchItem{{Key: x, Limit: l, Cost: 1}, {Key: y, Limit: l, Cost: 1}}
					if g%2 == 1 {
						items[0], items[1] = items[1], items[0]
					}
					results := make([]floodgate.BatchResult, 2)
					for range each {
						bs.AllowBatch(e.ctx, items, results)
						for _, r := range results {
							if r.Err != nil {
								errs <- r.Err
								return
							}
						}
					}
				})
			}
			probes, denied := 0, 0
			var probeWG sync.WaitGroup
			probeWG.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					d, err := e.store.AllowN(e.ctx, x, l, quota)
					if err == nil && d.Allowed {
						err = e.store.RefundN(e.ctx, x, l, quota)
					}
					if err != nil {
						errs <- err
						return
					}
					probes++
					if !d.Allowed {
						denied++
					}
				}
			})
			wg.Wait()
			close(done)
			probeWG.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if denied > 0 {
				t.Errorf("%d of %d takes of x's whole quota were denied while batches that were all denied ran: a batch's take of x was visible", denied, probes)
			}
			if d := e.allowN(x, l, quota); !d.Allowed {
				t.Errorf("x lost quota to batches that were all denied: %+v", d)
			}
		})
	}
}

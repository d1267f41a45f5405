package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/storetest"
)

// bi returns the BatchItem of key, limit and cost.
func bi(key string, limit floodgate.Limit, cost int64) floodgate.BatchItem {
	return floodgate.BatchItem{Key: key, Limit: limit, Cost: cost}
}

// referenceBatch decides items on store the way the BatchStore contract
// says, with one AllowN per item and RefundN for the admitted ones when one
// is denied: what AllowBatch must be equivalent to on a store nobody else
// uses.
func referenceBatch(ctx context.Context, store floodgate.Store, items []floodgate.BatchItem) []floodgate.BatchResult {
	out := make([]floodgate.BatchResult, len(items))
	denied := false
	for i, it := range items {
		d, err := store.AllowN(ctx, it.Key, it.Limit, it.Cost)
		out[i] = floodgate.BatchResult{Decision: d, Err: err}
		denied = denied || err == nil && !d.Allowed
	}
	if denied {
		for i, it := range items {
			if out[i].Err == nil && out[i].Decision.Allowed {
				if err := store.RefundN(ctx, it.Key, it.Limit, it.Cost); err != nil {
					out[i].Err = err
				}
			}
		}
	}
	return out
}

// sameResults reports how got differs from want: Decisions equal, and
// errors both nil or both matching the same floodgate error.
func sameResults(got, want []floodgate.BatchResult) error {
	kinds := []error{floodgate.ErrInvalidLimit, floodgate.ErrInvalidCost, floodgate.ErrCostExceedsLimit, floodgate.ErrStoreUnavailable}
	for i := range want {
		g, w := got[i], want[i]
		if g.Decision != w.Decision {
			return fmt.Errorf("item %d: %+v, want %+v", i, g.Decision, w.Decision)
		}
		if (g.Err == nil) != (w.Err == nil) {
			return fmt.Errorf("item %d: error %v, want %v", i, g.Err, w.Err)
		}
		for _, k := range kinds {
			if errors.Is(g.Err, k) != errors.Is(w.Err, k) {
				return fmt.Errorf("item %d: error %v, want %v", i, g.Err, w.Err)
			}
		}
	}
	return nil
}

// keyState is what a key holds: its DUMP (value and type) and PTTL, read
// between two times.
type keyState struct {
	dump      string
	pttl      int64
	from, end time.Time
}

func stateOf(t *testing.T, client rueidis.Client, key string) keyState {
	t.Helper()
	from := time.Now()
	dump, _ := doKey(t, client, "DUMP", key).ToString()
	pttl, _ := doKey(t, client, "PTTL", key).AsInt64()
	return keyState{dump, pttl, from, time.Now()}
}

// checkUnchanged fails t unless every key holds what before says: the same
// value, and the same expiry less at most the real time since it was read.
func checkUnchanged(t *testing.T, client rueidis.Client, before map[string]keyState) {
	t.Helper()
	for key, b := range before {
		a := stateOf(t, client, key)
		if a.dump != b.dump {
			t.Errorf("key %s changed: %q, was %q", key, a.dump, b.dump)
		}
		slack := a.end.Sub(b.from).Milliseconds() + 1
		if a.pttl != b.pttl && (b.pttl < 0 || a.pttl > b.pttl || a.pttl < b.pttl-slack) {
			t.Errorf("key %s: PTTL %d, was %d (%d ms before)", key, a.pttl, b.pttl, slack)
		}
	}
}

// slotted returns n identities that start with name and whose keys lie in
// n distinct hash slots (an identity's keys share one slot whatever the
// algorithm).
func slotted(name string, n int) []string {
	var ids []string
	used := map[int]bool{}
	for i := 0; len(ids) < n; i++ {
		id := name + strconv.Itoa(i)
		slot := keySlot(Key(DefaultKeyPrefix, id, floodgate.TokenBucket))
		if !used[slot] {
			used[slot] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// TestBatch: AllowBatch decides as one AllowN per item would, with RefundN
// when one is denied; a denial leaves every key as it was (on one slot,
// exactly: the same value and expiry), on a single server and on a cluster,
// with items on one slot and on several.
func TestBatch(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		clock := clocktest.NewManual(storetest.Epoch.Add(time.Hour + 123*time.Microsecond))
		s := testStore(t, client, clock)
		mem := memory.New(memory.WithClock(clock))
		ctx := t.Context()
		run := func(t *testing.T, items []floodgate.BatchItem) []floodgate.BatchResult {
			t.Helper()
			got := make([]floodgate.BatchResult, len(items))
			s.AllowBatch(ctx, items, got)
			if err := sameResults(got, referenceBatch(ctx, mem, items)); err != nil {
				t.Fatalf("AllowBatch(%v): %v", items, err)
			}
			return got
		}
		denied := func(rs []floodgate.BatchResult) bool {
			for _, r := range rs {
				if r.Err == nil && !r.Decision.Allowed {
					return true
				}
			}
			return false
		}
		l3 := limits(3, time.Minute)

		t.Run("one identity, every algorithm, duplicates", func(t *testing.T) {
			var items []floodgate.BatchItem
			for _, l := range l3 {
				items = append(items, floodgate.BatchItem{Key: "u", Limit: l, Cost: 1})
			}
			items = append(items, floodgate.BatchItem{Key: "u", Limit: l3[0], Cost: 2}) // the log again: 3 of 3
			if rs := run(t, items); denied(rs) {
				t.Fatalf("a batch that fits was denied: %+v", rs)
			}
			// Now the log is full: the next batch takes the bucket and
			// the windows, then the log denies, and all is undone.
			keys := map[string]keyState{}
			for _, l := range l3 {
				keys[s.Key("u", l.Algorithm)] = stateOf(t, client, s.Key("u", l.Algorithm))
			}
			items = []floodgate.BatchItem{bi("u", l3[1], 1), bi("u", l3[2], 2), bi("u", l3[3], 1), bi("u", l3[0], 1), bi("u", l3[1], 1)}
			if rs := run(t, items); !denied(rs) || !rs[0].Decision.Allowed || !rs[4].Decision.Allowed {
				t.Fatalf("want the log denied and the rest fitting: %+v", rs)
			}
			checkUnchanged(t, client, keys)
		})

		t.Run("a denial undoes exactly, wherever it is", func(t *testing.T) {
			// State of every shape: keys with an expiry, a key without one,
			// missing keys.
			id := "exact"
			for _, l := range l3 {
				if _, err := s.AllowN(ctx, id, l, 1); err != nil {
					t.Fatal(err)
				}
				if _, err := mem.AllowN(ctx, id, l, 1); err != nil {
					t.Fatal(err)
				}
			}
			doKey(t, client, "PERSIST", s.Key(id, floodgate.FixedWindow))
			wide := limits(1000, time.Hour)
			base := []floodgate.BatchItem{
				bi(id, l3[0], 1), bi(id, l3[1], 2), bi(id, l3[2], 1), bi(id, l3[3], 1),
				bi(id+"-new", wide[0], 5), bi(id+"-new", wide[1], 7), bi(id+"-new", wide[2], 1), bi(id+"-new", wide[3], 1),
				bi(id, l3[0], 1), // the log again: 3 of 3
			}
			for pos := 0; pos <= len(base); pos++ {
				// Insert a request that can never fit now: the bucket's
				// 3 are partly taken.
				items := append(append(append([]floodgate.BatchItem{}, base[:pos]...), floodgate.BatchItem{Key: id, Limit: l3[1], Cost: 3}), base[pos:]...)
				keys := map[string]keyState{}
				for _, it := range items {
					k := s.Key(it.Key, it.Limit.Algorithm)
					keys[k] = stateOf(t, client, k)
				}
				if rs := run(t, items); !denied(rs) {
					t.Fatalf("denied item at %d: batch admitted: %+v", pos, rs)
				}
				checkUnchanged(t, client, keys)
				clock.Advance(time.Microsecond)
			}
		})

		t.Run("several slots", func(t *testing.T) {
			ids := slotted("slots", 4)
			l5 := limits(5, time.Minute)
			items := []floodgate.BatchItem{bi(ids[0], l3[0], 1), bi(ids[1], l5[1], 1), bi(ids[2], l5[2], 1), bi(ids[3], l5[3], 1)}
			for round := range 5 {
				// Rounds 1 to 3 fit; then the log of 3 is full and denies,
				// and the other slots' items are given back each time.
				rs := run(t, items)
				if denied(rs) != (round >= 3) {
					t.Fatalf("round %d: %+v", round+1, rs)
				}
			}
			// The denied rounds took nothing: the log has no room, the
			// others the 2 that three rounds left.
			for i, it := range items {
				d, err := s.AllowN(ctx, it.Key, it.Limit, 1)
				if err != nil || d.Allowed != (i != 0) || i != 0 && d.Remaining != 1 {
					t.Errorf("%s after the rounds: %+v, %v", it.Limit.Algorithm, d, err)
				}
			}
		})

		t.Run("errors", func(t *testing.T) {
			doKey(t, client, "SET", s.Key("wrong", floodgate.SlidingWindowLog), "a string, not a log")
			items := []floodgate.BatchItem{
				bi("err", l3[1], 1),
				bi("err", floodgate.Limit{}, 1),
				bi("err", l3[2], 4),
				bi("err", l3[3], 0),
				bi("wrong", l3[0], 1),
				bi("err", l3[0], 1),
			}
			got := make([]floodgate.BatchResult, len(items))
			s.AllowBatch(ctx, items, got)
			for i, want := range []error{nil, floodgate.ErrInvalidLimit, floodgate.ErrCostExceedsLimit, floodgate.ErrInvalidCost, ErrScript, nil} {
				if want == nil && (got[i].Err != nil || !got[i].Decision.Allowed) || want != nil && !errors.Is(got[i].Err, want) {
					t.Errorf("item %d: %+v, want error %v", i, got[i], want)
				}
			}
			// No item was denied: the admitted ones stay recorded.
			if d, _ := s.AllowN(ctx, "err", l3[0], 3); d.Allowed || d.Remaining != 2 {
				t.Errorf("the log after the batch: %+v; want 2 remaining", d)
			}
			// With a denial as well, nothing is recorded.
			items = append(items, floodgate.BatchItem{Key: "err", Limit: l3[0], Cost: 3})
			before := stateOf(t, client, s.Key("err", floodgate.TokenBucket))
			got = make([]floodgate.BatchResult, len(items))
			s.AllowBatch(ctx, items, got)
			if got[6].Err != nil || got[6].Decision.Allowed || !errors.Is(got[4].Err, ErrScript) {
				t.Errorf("with a denial: %+v", got)
			}
			checkUnchanged(t, client, map[string]keyState{s.Key("err", floodgate.TokenBucket): before})
		})

		t.Run("after SCRIPT FLUSH", func(t *testing.T) {
			ids := slotted("flush", 3)
			for _, node := range client.Nodes() {
				do(t, node, "SCRIPT", "FLUSH")
			}
			items := []floodgate.BatchItem{bi(ids[0], l3[1], 1), bi(ids[1], l3[2], 1), bi(ids[2], l3[3], 1), bi(ids[0], l3[0], 1)}
			got := make([]floodgate.BatchResult, len(items))
			s.AllowBatch(ctx, items, got)
			for i, r := range got {
				if r.Err != nil || !r.Decision.Allowed {
					t.Errorf("item %d after SCRIPT FLUSH: %+v", i, r)
				}
			}
			for _, node := range client.Nodes() {
				do(t, node, "SCRIPT", "FLUSH")
			}
			s.AllowBatch(ctx, items[:1], got)
			if got[0].Err != nil {
				t.Errorf("one item after SCRIPT FLUSH: %v", got[0].Err)
			}
		})
	})
}

// TestBatchRandom: random batches of every algorithm over a few keys, with
// duplicates, denials anywhere and time moving on, decide as
// referenceBatch on the memory store does, on one slot and on several.
func TestBatchRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		r := rand.New(rand.NewPCG(seed, 2))
		clock := clocktest.NewManual(storetest.Epoch.Add(time.Duration(r.Int64N(int64(time.Hour)))))
		s := testStore(t, client, clock)
		mem := memory.New(memory.WithClock(clock))
		ctx := t.Context()
		ls := []floodgate.Limit{
			floodgate.NewLimit(floodgate.SlidingWindowLog, 5, time.Minute),
			floodgate.NewTokenBucket(4, 1, time.Minute),
			floodgate.NewLimit(floodgate.SlidingWindowCounter, 6, time.Minute),
			floodgate.NewLimit(floodgate.FixedWindow, 5, time.Minute),
		}
		ids := slotted("random", 3)
		denials := 0
		for step := range 300 {
			items := make([]floodgate.BatchItem, 1+r.IntN(5))
			for i := range items {
				l := ls[r.IntN(len(ls))]
				items[i] = floodgate.BatchItem{Key: ids[r.IntN(len(ids))], Limit: l, Cost: 1 + r.Int64N(2)}
			}
			got := make([]floodgate.BatchResult, len(items))
			s.AllowBatch(ctx, items, got)
			want := referenceBatch(ctx, mem, items)
			if err := sameResults(got, want); err != nil {
				t.Fatalf("step %d at %s: AllowBatch(%v): %v", step, clock.Now().Sub(storetest.Epoch), items, err)
			}
			for _, w := range want {
				if !w.Decision.Allowed {
					denials++
					break
				}
			}
			clock.Advance(time.Duration(r.Int64N(int64(3 * time.Second))).Truncate(time.Microsecond))
		}
		if denials < 30 {
			t.Errorf("only %d of 300 batches had a denial; the sequence explored too little", denials)
		}
	})
}

// TestBatchConcurrent: 64 callers send requests of 3 checks (a global log,
// a bucket per user, a fixed window per address) as one AllowBatch each.
// With time standing still, every key counts exactly the admitted requests
// that went through it: a denied request took nothing anywhere, on one
// server and across a cluster's slots. On one server exactly the global
// quota is admitted.
func TestBatchConcurrent(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		clock := clocktest.NewManual(storetest.Epoch.Add(time.Hour))
		s := testStore(t, client, clock)
		ctx := t.Context()
		const (
			callers  = 64
			requests = 12 // per caller
			global   = 100
			users    = 4
			perUser  = 30 // 4 * 30 > 100
			addrs    = 8  // address a belongs to user a % 4
			perAddr  = 20 // 2 * 20 > 30 per user
		)
		gl := floodgate.NewLimit(floodgate.SlidingWindowLog, global, time.Hour)
		ul := floodgate.NewTokenBucket(perUser, 1, time.Hour)
		al := floodgate.NewLimit(floodgate.FixedWindow, perAddr, time.Hour)
		var mu sync.Mutex
		admitted := 0
		perU, perA := map[int]int{}, map[int]int{}
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				a := g % addrs
				u := a % users
				items := []floodgate.BatchItem{
					{Key: "global", Limit: gl, Cost: 1},
					{Key: "user-" + strconv.Itoa(u), Limit: ul, Cost: 1},
					{Key: "addr-" + strconv.Itoa(a), Limit: al, Cost: 1},
				}
				results := make([]floodgate.BatchResult, len(items))
				for range requests {
					s.AllowBatch(ctx, items, results)
					ok := true
					for _, r := range results {
						if r.Err != nil {
							t.Errorf("AllowBatch: %v", r.Err)
							return
						}
						ok = ok && r.Decision.Allowed
					}
					if ok {
						mu.Lock()
						admitted++
						perU[u]++
						perA[a]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		// On one server the batch is atomic, and exactly the quota is
		// admitted. Across a cluster's slots a request may see another's
		// take before its refund and be denied for it, so fewer may be.
		if admitted > global || admitted != global && !s.cluster {
			t.Errorf("%d requests admitted, want exactly %d", admitted, global)
		}
		if n, _ := doKey(t, client, "ZCARD", s.Key("global", gl.Algorithm)).AsInt64(); n != int64(admitted) {
			t.Errorf("the global log holds %d entries for %d admitted requests", n, admitted)
		}
		for u := range users {
			d, err := s.AllowN(ctx, "user-"+strconv.Itoa(u), ul, 1)
			if want := perUser - perU[u]; err != nil || d.Allowed != (want > 0) || d.Allowed && d.Remaining != int64(want-1) {
				t.Errorf("user %d: %d admitted, then %+v, %v", u, perU[u], d, err)
			}
		}
		for a := range addrs {
			d, err := s.AllowN(ctx, "addr-"+strconv.Itoa(a), al, 1)
			if want := perAddr - perA[a]; err != nil || d.Allowed != (want > 0) || d.Allowed && d.Remaining != int64(want-1) {
				t.Errorf("address %d: %d admitted, then %+v, %v", a, perA[a], d, err)
			}
		}
		t.Logf("admitted %d: per user %v, per address %v", admitted, perU, perA)
	})
}

// TestBatchOOM: on a server over its maxmemory (noeviction), Redis refuses
// the batch script before it runs (its #!lua shebang declares it may
// write): every item fails with ErrStoreUnavailable and nothing is written,
// not even the log's trim, which without the shebang was a first write
// that let the later ones through.
func TestBatchOOM(t *testing.T) {
	server := redistest.Spawn(t)
	client := newClient(t, server.Addr)
	clock := clocktest.NewManual(storetest.Epoch.Add(time.Hour))
	s := testStore(t, client, clock)
	ctx := t.Context()
	tb := floodgate.NewTokenBucket(5, 1, time.Hour)
	fw := floodgate.NewLimit(floodgate.FixedWindow, 1, time.Hour)
	swl := floodgate.NewLimit(floodgate.SlidingWindowLog, 5, time.Second)
	// A bucket with state, a full window, and a log whose only entry will
	// have left its window (so trimming it is the script's first write).
	for _, it := range []floodgate.BatchItem{bi("k", tb, 1), bi("k", fw, 1), bi("k", swl, 1)} {
		if d, err := s.AllowN(ctx, it.Key, it.Limit, it.Cost); err != nil || !d.Allowed {
			t.Fatalf("AllowN(%v) = %+v, %v", it, d, err)
		}
	}
	keys := map[string]keyState{}
	for _, l := range []floodgate.Limit{tb, fw, swl} {
		keys[s.Key("k", l.Algorithm)] = stateOf(t, client, s.Key("k", l.Algorithm))
	}
	if err := server.Do(t, "CONFIG", "SET", "maxmemory", "1").Error(); err != nil {
		t.Fatal(err)
	}
	defer server.Do(t, "CONFIG", "SET", "maxmemory", "0")
	clock.Advance(2 * time.Second)

	for _, batch := range [][]floodgate.BatchItem{
		{bi("k", tb, 1), bi("new", tb, 1), bi("k", fw, 1)},
		{bi("k", swl, 1), bi("k", tb, 1), bi("k", fw, 1)},
		{bi("k", swl, 1), bi("new", swl, 1)},
	} {
		got := make([]floodgate.BatchResult, len(batch))
		s.AllowBatch(ctx, batch, got)
		for i, r := range got {
			if !errors.Is(r.Err, floodgate.ErrStoreUnavailable) || r.Decision.Allowed {
				t.Errorf("over maxmemory, item %d of %v: %+v; want ErrStoreUnavailable", i, batch, r)
			}
		}
		checkUnchanged(t, client, keys)
		for _, l := range []floodgate.Limit{tb, swl} {
			if n, _ := do(t, client, "EXISTS", s.Key("new", l.Algorithm)).AsInt64(); n != 0 {
				t.Errorf("a refused batch created the key of %s", l.Algorithm)
			}
		}
	}
}

// TestBatchHung: a batch on a hung server returns within the store's
// timeout with ErrStoreUnavailable for every item.
func TestBatchHung(t *testing.T) {
	server := redistest.Spawn(t)
	s, err := New(Config{Addrs: []string{server.Addr}, Timeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	items := []floodgate.BatchItem{bi("a", floodgate.PerMinute(5), 1), bi("b", floodgate.NewLimit(floodgate.TokenBucket, 5, time.Minute), 1)}
	got := make([]floodgate.BatchResult, len(items))
	s.AllowBatch(t.Context(), items, got)
	server.Stop(t)
	defer server.Cont(t)
	start := time.Now()
	s.AllowBatch(t.Context(), items, got)
	if elapsed := time.Since(start); elapsed > callTimeout+blockingBound {
		t.Errorf("AllowBatch on a hung server took %s, want at most %s", elapsed, callTimeout+blockingBound)
	}
	for i, r := range got {
		if !errors.Is(r.Err, floodgate.ErrStoreUnavailable) || r.Decision.Allowed {
			t.Errorf("item %d on a hung server: %+v; want ErrStoreUnavailable", i, r)
		}
	}
}

// TestBatchReplyShape: a batch reply that breaks the contract is ErrReply
// for every item, never a decision.
func TestBatchReplyShape(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	l := floodgate.PerMinute(10)
	items := []floodgate.BatchItem{bi("a", l, 1), bi("b", l, 1)}
	for lua, valid := range map[string]bool{
		"{1, 9, 0, 1, 0, 0, 5, 1}":             true,
		"{1, 9, 0, 1}":                         false,
		"{1, 9, 0, 1, 1, 9, 0, 1, 1, 9, 0, 1}": false,
		"7":                                    false,
		"{{1, 9, 0, 1}, {0, 0, 5, 1}}":         false,
		"{1, 9, 0, 1, 2, 9, 0, 1}":             false,
		"{1, 9, 0, 1, 'x', 0, 0, 0}":           false,
	} {
		res := client.Do(t.Context(), client.B().Eval().Script("return "+lua).Numkeys(0).Build())
		g := batchGroup{items: []int{0, 1}, keys: []string{"a", "b"}}
		got := make([]floodgate.BatchResult, 2)
		g.decide(t.Context(), items, got, res)
		bad := errors.Is(got[0].Err, ErrReply) || errors.Is(got[1].Err, ErrReply)
		if bad == valid || got[0].Err != nil && got[0].Decision.Allowed {
			t.Errorf("reply %s: %+v, want valid=%v", lua, got, valid)
		}
	}
}

// TestBatchRefundFails: an admitted item whose refund fails, after another
// slot denied, keeps its decision and reports the refund's error in
// RefundErr, so the request still reads as denied, not as a store error.
func TestBatchRefundFails(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	s := testStore(t, client, nil)
	l := floodgate.PerMinute(5)
	items := []floodgate.BatchItem{bi("a", l, 1), bi("b", l, 1)}
	results := []floodgate.BatchResult{{Decision: floodgate.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Minute}}, {}}
	groups := []batchGroup{{items: []int{0}, keys: []string{s.Key("a", l.Algorithm)}}, {items: []int{1}, denied: true}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s.refundBatch(ctx, items, results, groups, "")
	if r := results[0]; r.Err != nil || !errors.Is(r.RefundErr, floodgate.ErrStoreUnavailable) || !r.Decision.Allowed || r.Decision.Limit != 5 {
		t.Errorf("after a failed refund: %+v; want its decision kept and RefundErr matching ErrStoreUnavailable", r)
	}
}

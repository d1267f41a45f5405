package decide_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// counting counts the decisions a store is asked for.
type counting struct {
	floodgate.Store
	calls atomic.Int64
}

func (c *counting) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	c.calls.Add(1)
	return c.Store.AllowN(ctx, key, l, n)
}

func (c *counting) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	c.calls.Add(1)
	c.Store.(floodgate.BatchStore).AllowBatch(ctx, items, results)
}

var epoch = time.Unix(1_900_000_000, 0)

// clocked returns a memory store on a manual clock, a counting wrapper
// around it, and an engine on the same clock.
func clocked(t *testing.T, opts decide.Options) (*memory.Store, *counting, *decide.Engine, *clocktest.Manual) {
	t.Helper()
	clock := clocktest.NewManual(epoch)
	mem := memory.New(memory.WithClock(clock))
	cs := &counting{Store: mem}
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Now = clock.Now
	if opts.OverLimitCache.MaxAge == 0 {
		opts.OverLimitCache.MaxAge = 24 * time.Hour // the store has no change channel: keep entries to their retry
	}
	e, err := decide.New(cs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return mem, cs, e, clock
}

// cacheLimits are one limit per algorithm, each with a cost that a full
// quota can pay twice at most.
var cacheLimits = []struct {
	name  string
	limit floodgate.Limit
	cost  int64
}{
	{"sliding_window_log", floodgate.NewLimit(floodgate.SlidingWindowLog, 5, 10*time.Second), 2},
	{"sliding_window_log cost 1", floodgate.NewLimit(floodgate.SlidingWindowLog, 3, time.Second), 1},
	{"token_bucket", floodgate.NewTokenBucket(5, 3, 7*time.Second), 3},
	{"sliding_window_counter", floodgate.NewLimit(floodgate.SlidingWindowCounter, 4, 3*time.Second), 2},
	{"fixed_window", floodgate.NewLimit(floodgate.FixedWindow, 4, 2*time.Second), 3},
}

// TestCacheExactExpiry holds every algorithm's cached denial to the store's
// own answer: until exactly the denial's retry delay the store is not
// asked and the answer is what the store would say (the same retry and
// reset delays, a remaining no larger); at the retry delay the store is
// asked and admits.
func TestCacheExactExpiry(t *testing.T) {
	for _, tc := range cacheLimits {
		t.Run(tc.name, func(t *testing.T) {
			mem, cs, e, clock := clocked(t, decide.Options{})
			ctx := context.Background()
			check := []decide.Check{{Rule: "r", Key: "k", Limit: tc.limit, Cost: tc.cost}}
			var first decide.Result
			for {
				first = e.Decide(ctx, check)
				if first.Verdict == decide.Denied {
					break
				}
				clock.Advance(time.Millisecond) // spread the log's entries
			}
			retry := first.RetryAfter
			if retry <= 10*time.Microsecond {
				t.Fatalf("retry %v too short for the test", retry)
			}
			calls := cs.calls.Load()
			denialAt := clock.Now()
			for _, at := range []time.Duration{0, time.Microsecond, retry / 3, retry / 2, retry - time.Microsecond} {
				clock.Set(denialAt.Add(at))
				got := e.Decide(ctx, check)
				o := got.Outcomes[0]
				if got.Verdict != decide.Denied || !o.Cached {
					t.Fatalf("at +%v: %v cached %v, want a cached denial", at, got.Verdict, o.Cached)
				}
				want, err := mem.AllowN(ctx, "k", tc.limit, tc.cost) // denied: takes nothing
				if err != nil || want.Allowed {
					t.Fatalf("at +%v: the store admits (%v, %v) what the cache denies", at, want, err)
				}
				if o.Decision.RetryAfter != want.RetryAfter || got.RetryAfter != want.RetryAfter {
					t.Errorf("at +%v: cached retry %v (result %v), store's %v", at, o.Decision.RetryAfter, got.RetryAfter, want.RetryAfter)
				}
				if o.Decision.ResetAfter != want.ResetAfter {
					t.Errorf("at +%v: cached reset %v, store's %v", at, o.Decision.ResetAfter, want.ResetAfter)
				}
				// Remaining is a lower bound: exact for a cost of 1 and for the
				// fixed window; a bucket's is refilled to within one token.
				exact := tc.cost == 1 || tc.limit.Algorithm == floodgate.FixedWindow
				bucket := tc.limit.Algorithm == floodgate.TokenBucket
				if r := o.Decision.Remaining; r > want.Remaining || exact && r != want.Remaining || bucket && r < want.Remaining-1 {
					t.Errorf("at +%v: cached remaining %d, store's %d", at, r, want.Remaining)
				}
				if o.Decision.Limit != want.Limit {
					t.Errorf("at +%v: cached limit %d, store's %d", at, o.Decision.Limit, want.Limit)
				}
			}
			if got := cs.calls.Load(); got != calls {
				t.Fatalf("the store was asked %d times before the retry delay, want 0", got-calls)
			}
			clock.Set(denialAt.Add(retry))
			if got := e.Decide(ctx, check); !got.Allowed() || got.Outcomes[0].Cached {
				t.Fatalf("at the retry delay: %v cached %v, want admitted by the store", got.Verdict, got.Outcomes[0].Cached)
			}
			if got := cs.calls.Load(); got != calls+1 {
				t.Errorf("store calls at the retry delay: %d, want 1", got-calls)
			}
			// The expired entry stays a window longer, for the key's callers to
			// take turns (TestCacheTakesTurns), then goes.
			if st := e.CacheStats(); st.Hits != 5 || st.Entries != 1 {
				t.Errorf("stats %+v, want 5 hits and the entry kept", st)
			}
			clock.Set(denialAt.Add(retry + tc.limit.Window))
			e.Decide(ctx, check)
			if st := e.CacheStats(); st.Hits != 5 || st.Entries != 0 || st.Waits != 0 {
				t.Errorf("stats %+v a window after the retry, want 5 hits, no waits and the entry gone", st)
			}
		})
	}
}

// TestCacheCosts: a denial of cost n answers costs of n and more, never a
// smaller cost or another limit.
func TestCacheCosts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit       floodgate.Limit
		largerCache bool // a larger cost is answered from the cache too
	}{
		{"sliding_window_log", floodgate.PerMinute(5), false},
		{"token_bucket", floodgate.NewTokenBucket(5, 1, time.Minute), false},
		{"sliding_window_counter", floodgate.NewLimit(floodgate.SlidingWindowCounter, 5, time.Minute), false},
		{"fixed_window", floodgate.NewLimit(floodgate.FixedWindow, 5, time.Minute), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, cs, e, clock := clocked(t, decide.Options{})
			ctx := context.Background()
			l := tc.limit
			ask := func(cost int64, l floodgate.Limit) decide.Outcome {
				return e.Decide(ctx, []decide.Check{{Rule: "r", Key: "k", Limit: l, Cost: cost}}).Outcomes[0]
			}
			if o := ask(4, l); o.Verdict != decide.Admitted {
				t.Fatal(o.Verdict)
			}
			clock.Advance(time.Second)
			if o := ask(2, l); o.Verdict != decide.Denied || o.Cached {
				t.Fatalf("cost 2 after 4 of 5: %v cached %v, want denied by the store", o.Verdict, o.Cached)
			}
			clock.Advance(time.Second)
			for _, c := range []struct {
				cost   int64
				limit  floodgate.Limit
				cached bool
				want   decide.Verdict
			}{
				{2, l, true, decide.Denied},
				{5, l, tc.largerCache, decide.Denied}, // a larger cost: cached only where its retry is the same
				{2, l, tc.largerCache, decide.Denied}, // else the cost 5 denial replaced the cost 2 one
				{1, l, false, decide.Admitted},        // a smaller cost: the store's answer
				{1, floodgate.PerMinute(6), false, decide.Admitted},
			} {
				var want floodgate.Decision
				if c.want == decide.Denied {
					want, _ = mem.AllowN(ctx, "k", c.limit, c.cost) // a denial changes nothing
				}
				calls := cs.calls.Load()
				o := ask(c.cost, c.limit)
				if o.Verdict != c.want || o.Cached != c.cached || (cs.calls.Load() == calls) != c.cached {
					t.Errorf("cost %d under %s: %v cached %v, want %v cached %v", c.cost, c.limit, o.Verdict, o.Cached, c.want, c.cached)
				}
				if c.want == decide.Denied && o.Decision.RetryAfter != want.RetryAfter {
					t.Errorf("cost %d under %s: retry %s, the store says %s", c.cost, c.limit, o.Decision.RetryAfter, want.RetryAfter)
				}
			}
		})
	}
}

// TestCacheCleared: a Reset or a Refund through the engine clears the
// denial, so the next request asks the store and is admitted.
func TestCacheCleared(t *testing.T) {
	l := floodgate.PerMinute(2)
	for _, tc := range []struct {
		name  string
		clear func(e *decide.Engine) error
	}{
		{"reset", func(e *decide.Engine) error { return e.Reset(context.Background(), "k", l) }},
		{"refund", func(e *decide.Engine) error { return e.Refund(context.Background(), "k", l, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cs, e, _ := clocked(t, decide.Options{})
			ctx := context.Background()
			check := []decide.Check{{Rule: "r", Key: "k", Limit: l}}
			for range 2 {
				e.Decide(ctx, check)
			}
			for i := range 3 {
				if r := e.Decide(ctx, check); r.Verdict != decide.Denied || r.Outcomes[0].Cached != (i > 0) {
					t.Fatalf("request %d over the limit: %v cached %v", i, r.Verdict, r.Outcomes[0].Cached)
				}
			}
			if err := tc.clear(e); err != nil {
				t.Fatal(err)
			}
			calls := cs.calls.Load()
			if r := e.Decide(ctx, check); !r.Allowed() || cs.calls.Load() != calls+1 {
				t.Fatalf("after %s: %v with %d store calls, want admitted by the store", tc.name, r.Verdict, cs.calls.Load()-calls)
			}
			// The cache works again for the key (and its shard): the next
			// denial is remembered.
			for {
				if r := e.Decide(ctx, check); !r.Allowed() {
					break
				}
			}
			calls = cs.calls.Load()
			for i := range 3 {
				if r := e.Decide(ctx, check); r.Verdict != decide.Denied || !r.Outcomes[0].Cached {
					t.Fatalf("after %s, request %d over the limit again: %v cached %v, want a cached denial", tc.name, i, r.Verdict, r.Outcomes[0].Cached)
				}
			}
			if got := cs.calls.Load(); got != calls {
				t.Errorf("after %s: %d store calls for cached denials, want 0", tc.name, got-calls)
			}
		})
	}
}

// holdDenial holds a denied AllowN until released, so a Reset can run while
// the denial is on its way back.
type holdDenial struct {
	floodgate.Store
	hold    atomic.Bool
	denied  chan struct{}
	release chan struct{}
}

func (b *holdDenial) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	d, err := b.Store.AllowN(ctx, key, l, n)
	if !d.Allowed && b.hold.Load() {
		b.denied <- struct{}{}
		<-b.release
	}
	return d, err
}

// TestCacheResetRace: a denial the store gave before a Reset, returning
// after it, is not cached.
func TestCacheResetRace(t *testing.T) {
	l := floodgate.PerMinute(1)
	b := &holdDenial{Store: memory.New(), denied: make(chan struct{}), release: make(chan struct{})}
	e := newEngine(t, b)
	ctx := context.Background()
	check := []decide.Check{{Rule: "r", Key: "k", Limit: l}}
	e.Decide(ctx, check)
	b.hold.Store(true)
	done := make(chan decide.Result)
	go func() { done <- e.Decide(ctx, check) }()
	<-b.denied
	if err := e.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	b.hold.Store(false)
	close(b.release)
	if r := <-done; r.Verdict != decide.Denied {
		t.Fatalf("the request decided before the reset: %v, want denied", r.Verdict)
	}
	if r := e.Decide(ctx, check); !r.Allowed() {
		t.Fatalf("after the reset: %v cached %v, want admitted (the stale denial not cached)", r.Verdict, r.Outcomes[0].Cached)
	}
}

// TestCacheOptOut: NoCache, and a disabled cache, ask the store every time.
func TestCacheOptOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    decide.Options
		noCache bool
	}{
		{"rule", decide.Options{}, true},
		{"engine", decide.Options{OverLimitCache: decide.CacheOptions{Disabled: true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cs, e, _ := clocked(t, tc.opts)
			check := []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerMinute(1), NoCache: tc.noCache}}
			for range 10 {
				e.Decide(context.Background(), check)
			}
			if got := cs.calls.Load(); got != 10 {
				t.Errorf("store calls %d, want 10", got)
			}
			if st := e.CacheStats(); st.Hits != 0 || st.Entries != 0 {
				t.Errorf("stats %+v, want none", st)
			}
		})
	}
}

// TestCacheBounds: the cache never holds more entries or bytes than its
// bounds, however many keys are denied.
func TestCacheBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        decide.CacheOptions
		wantEntries int64
	}{
		{"entries", decide.CacheOptions{MaxEntries: 10}, 10},
		{"bytes", decide.CacheOptions{MaxBytes: 5 * (decide.CacheEntryOverhead + 6)}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, e, _ := clocked(t, decide.Options{OverLimitCache: tc.opts})
			ctx := context.Background()
			l := floodgate.PerMinute(1)
			var maxEntries int64
			for i := range 500 {
				check := []decide.Check{{Rule: "r", Key: fmt.Sprintf("k-%04d", i), Limit: l}}
				e.Decide(ctx, check)
				if r := e.Decide(ctx, check); r.Verdict != decide.Denied {
					t.Fatal(r.Verdict)
				}
				st := e.CacheStats()
				maxEntries = max(maxEntries, st.Entries)
				if st.Bytes != st.Entries*(decide.CacheEntryOverhead+6) {
					t.Fatalf("bytes %d for %d entries of 6-byte keys", st.Bytes, st.Entries)
				}
			}
			st := e.CacheStats()
			if maxEntries != tc.wantEntries || st.Entries != tc.wantEntries {
				t.Errorf("entries: at most %d, now %d; want %d", maxEntries, st.Entries, tc.wantEntries)
			}
			if st.Evictions != 500-uint64(tc.wantEntries) {
				t.Errorf("evictions %d, want %d", st.Evictions, 500-tc.wantEntries)
			}
		})
	}
}

// TestCacheConcurrent: callers flooding one key are admitted exactly the
// quota, and each asks the store about at most one denial before the cache
// answers it.
func TestCacheConcurrent(t *testing.T) {
	for _, name := range []string{"batch", "sequential"} {
		t.Run(name, func(t *testing.T) {
			clock := clocktest.NewManual(epoch)
			cs := &counting{Store: memory.New(memory.WithClock(clock))}
			var s floodgate.Store = cs
			if name == "sequential" {
				s = sequential{cs}
			}
			e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			const callers, each, quota = 64, 200, 100
			checks := []decide.Check{
				{Rule: "flood", Key: "flood", Limit: floodgate.PerMinute(quota)},
				{Rule: "wide", Key: "wide", Limit: floodgate.PerMinute(1 << 20)},
			}
			var admitted, denied, cached atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for range each {
						r := e.Decide(context.Background(), checks)
						switch {
						case r.Allowed():
							admitted.Add(1)
						case r.Verdict == decide.Denied && r.Deciding == 0:
							denied.Add(1)
							if r.Outcomes[0].Cached {
								cached.Add(1)
							}
						default:
							t.Errorf("%v deciding %d", r.Verdict, r.Deciding)
						}
					}
				})
			}
			wg.Wait()
			if admitted.Load() != quota || denied.Load() != callers*each-quota {
				t.Fatalf("admitted %d denied %d, want %d and %d", admitted.Load(), denied.Load(), quota, callers*each-quota)
			}
			if storeDenied := denied.Load() - cached.Load(); storeDenied < 1 || storeDenied > callers {
				t.Errorf("%d denials came from the store, want 1 to %d", storeDenied, callers)
			}
			if got := e.CacheStats().Hits; got != uint64(cached.Load()) {
				t.Errorf("hits %d, cached outcomes %d", got, cached.Load())
			}
			// The wide rule was given back every time the flood rule denied.
			if got := remaining(t, cs, "wide", checks[1].Limit); got != 1<<20-quota {
				t.Errorf("wide remaining %d, want %d", got, 1<<20-quota)
			}
		})
	}
}

// gateFirst holds the first call after armed until released, counting
// every call.
type gateFirst struct {
	floodgate.Store
	calls   atomic.Int64
	armed   atomic.Bool
	release chan struct{}
}

func (g *gateFirst) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	g.calls.Add(1)
	if g.armed.CompareAndSwap(true, false) {
		<-g.release
	}
	return g.Store.AllowN(ctx, key, l, n)
}

// TestCacheTakesTurns: when a flooded key's cached denial expires, its
// callers take turns instead of all asking the store: one asks while the
// others wait; its admission lets as many callers ask together as it left
// remaining; the next denial answers the rest from the cache. 64 callers
// arriving at the expiry of a fixed window of 10 make exactly 11 store
// calls (10 admitted, 1 denied), not 64.
func TestCacheTakesTurns(t *testing.T) { synctest.Test(t, testCacheTakesTurns) }

// testCacheTakesTurns runs in a synctest bubble, so that it can wait for
// every caller to be blocked rather than poll for it.
func testCacheTakesTurns(t *testing.T) {
	const callers, quota = 64, 10
	clock := clocktest.NewManual(epoch)
	g := &gateFirst{Store: memory.New(memory.WithClock(clock)), release: make(chan struct{})}
	e, err := decide.New(g, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.NewLimit(floodgate.FixedWindow, quota, time.Second)}}
	for range quota + 2 { // the quota, a denial from the store, one from the cache
		e.Decide(ctx, check)
	}
	if st := e.CacheStats(); st.Hits != 1 || g.calls.Load() != quota+1 {
		t.Fatalf("filling: %+v after %d store calls, want 1 hit after %d", st, g.calls.Load(), quota+1)
	}
	clock.Advance(time.Second) // the next window: the denial has expired
	g.armed.Store(true)
	g.calls.Store(0)
	var admitted, denied, cached atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			r := e.Decide(ctx, check)
			switch {
			case r.Allowed():
				admitted.Add(1)
			case r.Verdict == decide.Denied:
				denied.Add(1)
				if r.Outcomes[0].Cached {
					cached.Add(1)
				}
			default:
				t.Errorf("verdict %v", r.Verdict)
			}
		})
	}
	// The first caller's store call is held: every other caller waits for it.
	synctest.Wait()
	if got := e.CacheStats().Waits; got != callers-1 {
		t.Fatalf("waits %d, want %d callers waiting for the first one's store call", got, callers-1)
	}
	close(g.release)
	wg.Wait()
	if admitted.Load() != quota || denied.Load() != callers-quota {
		t.Fatalf("admitted %d, denied %d: want %d and %d", admitted.Load(), denied.Load(), quota, callers-quota)
	}
	if got := g.calls.Load(); got != quota+1 {
		t.Errorf("store calls %d, want %d: the probe, %d callers on its tickets, one denial (%+v)", got, quota+1, quota-1, e.CacheStats())
	}
	if cached.Load() != callers-quota-1 {
		t.Errorf("cached denials %d, want %d", cached.Load(), callers-quota-1)
	}
}

// TestCacheTurnsOutage: when the one call that a key's expired denial let
// through fails (an outage), its waiters keep the cached answer rather
// than all asking the failing store at once; the key's next caller asks
// again, and follows its failure mode.
func TestCacheTurnsOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := clocktest.NewManual(epoch)
		mem := memory.New(memory.WithClock(clock))
		s := &downable{Store: mem, hold: make(chan struct{})}
		e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		check := []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerMinute(1), Failure: decide.FailOpen}}
		e.Decide(ctx, check)
		if r := e.Decide(ctx, check); r.Verdict != decide.Denied {
			t.Fatalf("over the limit: %v", r.Verdict)
		}
		clock.Advance(time.Minute)
		s.down.Store(true)
		var wg sync.WaitGroup
		var open, cached atomic.Int64
		for range 16 {
			wg.Go(func() {
				r := e.Decide(ctx, check)
				switch {
				case r.Allowed() && r.Outcomes[0].Verdict == decide.Unavailable:
					open.Add(1)
				case r.Verdict == decide.Denied && r.Outcomes[0].Cached && r.RetryAfter > 0:
					cached.Add(1)
				default:
					t.Errorf("%v %+v", r.Verdict, r.Outcomes[0])
				}
			})
		}
		synctest.Wait() // one call is held in the store, the others wait for it
		close(s.hold)
		wg.Wait()
		if open.Load() != 1 || cached.Load() != 15 || s.calls.Load() != 1 {
			t.Fatalf("%d admitted by the failure mode, %d cached denials, %d store calls: want 1, 15, 1", open.Load(), cached.Load(), s.calls.Load())
		}
		if r := e.Decide(ctx, check); !r.Allowed() || r.Outcomes[0].Verdict != decide.Unavailable || s.calls.Load() != 2 {
			t.Errorf("the next caller: %v %+v after %d store calls, want it to ask and fail open", r.Verdict, r.Outcomes[0], s.calls.Load())
		}
	})
}

// downable answers ErrStoreUnavailable while down, counting the calls made
// then (holding the first until hold is closed, if set).
type downable struct {
	floodgate.Store
	down  atomic.Bool
	calls atomic.Int64
	hold  chan struct{} // if set, the first failing call waits until it is closed
}

func (d *downable) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if d.down.Load() {
		if d.calls.Add(1) == 1 && d.hold != nil {
			<-d.hold
		}
		return floodgate.Decision{}, floodgate.ErrStoreUnavailable
	}
	return d.Store.AllowN(ctx, key, l, n)
}

// panicking panics on every call while armed.
type panicking struct {
	floodgate.Store
	armed atomic.Bool
}

func (p *panicking) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if p.armed.Load() {
		panic("store bug")
	}
	return p.Store.AllowN(ctx, key, l, n)
}

// TestCacheTurnsPanic: a store call that panics in a key's turn still ends
// it, so the key's next callers do not wait (here they would wait forever:
// their context has no deadline).
func TestCacheTurnsPanic(t *testing.T) {
	clock := clocktest.NewManual(epoch)
	p := &panicking{Store: memory.New(memory.WithClock(clock))}
	e, err := decide.New(p, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerMinute(1)}}
	e.Decide(ctx, check)
	e.Decide(ctx, check) // denied: cached
	clock.Advance(time.Minute)
	p.armed.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the store's panic did not reach the caller")
			}
		}()
		e.Decide(ctx, check)
	}()
	p.armed.Store(false)
	done := make(chan decide.Result, 1)
	go func() { done <- e.Decide(ctx, check) }()
	select {
	case r := <-done:
		if !r.Allowed() {
			t.Fatalf("after the panic: %v, want admitted", r.Verdict)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the next caller is still waiting for the panicked call's turn")
	}
}

// TestOnStoreCall: the hook hears of every call to the store, by
// operation, and of nothing the engine answered itself (a cached denial, a
// request refused as invalid before the store was asked).
func TestOnStoreCall(t *testing.T) {
	calls := map[string]int{}
	var mu sync.Mutex
	_, _, e, _ := clocked(t, decide.Options{OnStoreCall: func(_ context.Context, op string, took time.Duration) {
		if took < 0 {
			t.Errorf("%s took %v", op, took)
		}
		mu.Lock()
		calls[op]++
		mu.Unlock()
	}})
	l := floodgate.PerMinute(1)
	ctx := t.Context()
	for range 3 { // admitted, denied by the store, denied from the cache
		e.Decide(ctx, []decide.Check{{Rule: "r", Key: "k", Limit: l}})
	}
	e.Decide(ctx, []decide.Check{{Rule: "r", Key: "k", Limit: l, Cost: 5}}) // invalid
	e.Decide(ctx, []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Key: "b", Limit: l}})
	if err := e.Refund(ctx, "a", l, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"allow": 3, "refund": 1, "reset": 1}
	if !maps.Equal(calls, want) {
		t.Errorf("store calls = %v, want %v", calls, want)
	}
}

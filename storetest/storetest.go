// Package storetest is the conformance suite every floodgate.Store must pass:
// exact admission counts under concurrency, the boundary burst, exact
// retry-after times, fractional refill, key isolation, Reset, rejection of
// invalid limits and costs, and for a [floodgate.BatchStore] batches decided
// all or nothing, exactly, under concurrency too.
//
// A store's tests call Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
//			return memory.New(memory.WithClock(clock))
//		})
//	}
//
// The constructor must return a store that reads time from clock, so the
// suite can move time by hand. Stores backed by a shared server may return
// the same backend each time: every case uses keys of its own.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
)

// NewStore returns a store that reads time from clock.
type NewStore func(t *testing.T, clock floodgate.Clock) floodgate.Store

// Epoch is the time the suite's clocks start at: a Monday at midnight UTC,
// aligned to every window the suite uses.
var Epoch = time.Date(2030, 1, 7, 0, 0, 0, 0, time.UTC)

// env is one case's store, clock and key namespace.
type env struct {
	t     *testing.T
	ctx   context.Context
	store floodgate.Store
	clock *clocktest.Manual
	ns    string
}

func newEnv(t *testing.T, newStore NewStore) *env {
	t.Helper()
	clock := clocktest.NewManual(Epoch)
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &env{t: t, ctx: t.Context(), store: newStore(t, clock), clock: clock, ns: t.Name() + "/" + hex.EncodeToString(b[:]) + "/"}
}

// key returns a key unique to this case.
func (e *env) key(name string) string { return e.ns + name }

func (e *env) allowN(key string, l floodgate.Limit, n int64) floodgate.Decision {
	e.t.Helper()
	d, err := e.store.AllowN(e.ctx, key, l, n)
	if err != nil {
		e.t.Fatalf("AllowN(%q, %v, %d): %v", key, l, n, err)
	}
	if d.Remaining < 0 {
		e.t.Fatalf("AllowN(%q, %v, %d): Remaining = %d, want >= 0", key, l, n, d.Remaining)
	}
	if d.Limit != l.Quota {
		e.t.Fatalf("AllowN(%q, %v, %d): Limit = %d, want %d", key, l, n, d.Limit, l.Quota)
	}
	if d.Allowed != (d.RetryAfter == 0) {
		e.t.Fatalf("AllowN(%q, %v, %d) = %+v: RetryAfter must be 0 exactly when allowed", key, l, n, d)
	}
	return d
}

// admit sends count requests of cost n and returns how many were admitted.
func (e *env) admit(key string, l floodgate.Limit, n int64, count int) int {
	e.t.Helper()
	admitted := 0
	for range count {
		if e.allowN(key, l, n).Allowed {
			admitted++
		}
	}
	return admitted
}

// limits returns one limit of quota per window for every algorithm; the
// token bucket refills quota per window.
func limits(quota int64, window time.Duration) []floodgate.Limit {
	var out []floodgate.Limit
	for _, a := range algorithmlist.All() {
		out = append(out, floodgate.NewLimit(a, quota, window))
	}
	return out
}

// Run runs the whole suite against stores from newStore, with the batch
// cases of RunBatch when the stores implement [floodgate.BatchStore].
func Run(t *testing.T, newStore NewStore) {
	cases := []struct {
		name string
		run  func(*testing.T, NewStore)
	}{
		{"ConcurrentExactCount", testConcurrentExactCount},
		{"BoundaryBurst", testBoundaryBurst},
		{"LogNeverExceedsQuotaInAnyWindow", testLogAnyWindow},
		{"RetryAfterExact", testRetryAfterExact},
		{"DeniedConsumesNothing", testDeniedConsumesNothing},
		{"RemainingAndResetAfter", testRemainingAndResetAfter},
		{"FractionalRefill", testFractionalRefill},
		{"KeyIsolation", testKeyIsolation},
		{"HostileKeys", testHostileKeys},
		{"Refund", testRefund},
		{"Reset", testReset},
		{"InvalidLimits", testInvalidLimits},
		{"InvalidCosts", testInvalidCosts},
		{"CheckOnly", testCheckOnly},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore) })
	}
	if isBatchStore(newStore(t, clocktest.NewManual(Epoch))) {
		t.Run("Batch", func(t *testing.T) { runBatch(t, newStore) })
	}
}

// testConcurrentExactCount: 64 goroutines x 50 requests on one key with a
// limit of 100 admit exactly 100, for every algorithm.
func testConcurrentExactCount(t *testing.T, newStore NewStore) {
	const goroutines, each, quota = 64, 50, 100
	for _, l := range limits(quota, time.Hour) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			e.clock.Set(Epoch.Add(10 * time.Minute)) // mid-window, away from any edge
			key := e.key("hot")
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for range goroutines {
				wg.Go(func() {
					for range each {
						d, err := e.store.Allow(e.ctx, key, l)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted.Add(1)
						} else {
							denied.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Allow: %v", err)
			}
			if got := admitted.Load(); got != quota {
				t.Errorf("admitted %d of %d requests, want exactly %d", got, goroutines*each, quota)
			}
			if got, want := denied.Load(), int64(goroutines*each-quota); got != want {
				t.Errorf("denied %d, want %d", got, want)
			}
		})
	}
}

// testBoundaryBurst is the seed's attack: N requests one second before a
// window edge and N one second after. A fixed window admits 2N within two
// seconds; the sliding-window log admits N; the counter and the bucket stay
// within their documented bounds.
func testBoundaryBurst(t *testing.T, newStore NewStore) {
	const n = 100
	window := time.Minute
	gap := 2 * time.Second
	for _, l := range limits(n, window) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("attacker")
			edge := Epoch.Add(window)
			e.clock.Set(edge.Add(-gap / 2))
			before := e.admit(key, l, 1, n)
			e.clock.Set(edge.Add(gap / 2))
			after := e.admit(key, l, 1, n)
			total := before + after
			if before != n {
				t.Fatalf("admitted %d before the edge, want %d", before, n)
			}
			// Share of the window covered by the gap, rounded down.
			refillInGap := int(n * gap / window)
			switch l.Algorithm {
			case floodgate.FixedWindow:
				// The hole floodgate exists to close: 2N in two seconds.
				if total != 2*n {
					t.Errorf("fixed window admitted %d in %s, want the boundary burst of %d", total, gap, 2*n)
				}
			case floodgate.SlidingWindowLog:
				if total != n {
					t.Errorf("sliding-window log admitted %d in %s, want %d", total, gap, n)
				}
			case floodgate.TokenBucket:
				// Capacity N plus what refills during the gap.
				if total != n+refillInGap {
					t.Errorf("token bucket admitted %d in %s, want capacity %d + refill %d", total, gap, n, refillInGap)
				}
			case floodgate.SlidingWindowCounter:
				// At most N plus the previous window's count times the
				// share of the new window elapsed (here 1s of 60s).
				bound := n + int(n*(gap/2)/window)
				if total < n || total > bound {
					t.Errorf("sliding-window counter admitted %d in %s, want between %d and %d", total, gap, n, bound)
				}
			}
		})
	}
}

// testLogAnyWindow drives the log with a steady over-limit stream over
// several windows and checks that no interval of one window ever holds more
// than N admitted requests.
func testLogAnyWindow(t *testing.T, newStore NewStore) {
	const quota = 20
	// A minute, not a second: a store on the suite's clock still expires
	// keys on its own (Redis's TTLs), so a window must be long against the
	// real time a step takes, or a slow step (a loaded machine, a store
	// behind HTTP) would let a key expire that the suite's clock keeps.
	window := time.Minute
	l := floodgate.NewLimit(floodgate.SlidingWindowLog, quota, window)
	e := newEnv(t, newStore)
	key := e.key("stream")
	e.clock.Set(Epoch.Add(333 * time.Millisecond))
	var admitted []time.Time
	step := 420 * time.Millisecond // ~143 requests per window, 7x the quota
	for range int(4 * window / step) {
		if e.allowN(key, l, 1).Allowed {
			admitted = append(admitted, e.clock.Now())
		}
		e.clock.Advance(step)
	}
	for i := range admitted {
		j := i
		for j < len(admitted) && admitted[j].Sub(admitted[i]) < window {
			j++
		}
		if j-i > quota {
			t.Fatalf("%d requests admitted in [%s, +%s), want at most %d", j-i, admitted[i].Sub(Epoch), window, quota)
		}
	}
	if len(admitted) < 4*quota {
		t.Errorf("admitted %d over four windows, want at least %d", len(admitted), 4*quota)
	}
}

// testRetryAfterExact: a retry of the same cost exactly at RetryAfter is
// admitted; one microsecond earlier it is not.
func testRetryAfterExact(t *testing.T, newStore NewStore) {
	type step struct {
		advance time.Duration
		cost    int64
	}
	cases := []struct {
		name  string
		limit floodgate.Limit
		fill  []step // requests before the probe, all of which must be admitted
		cost  int64  // the probe's cost
	}{
		{"log cost 1", floodgate.NewLimit(floodgate.SlidingWindowLog, 5, time.Minute),
			[]step{{0, 1}, {10 * time.Second, 2}, {5 * time.Second, 2}}, 1},
		{"log cost 3 waits for three oldest", floodgate.NewLimit(floodgate.SlidingWindowLog, 10, time.Minute),
			[]step{{0, 2}, {time.Second, 1}, {2 * time.Second, 4}, {3 * time.Second, 1}}, 3},
		{"bucket cost 1", floodgate.NewTokenBucket(10, 2, time.Second),
			[]step{{0, 10}}, 1},
		{"bucket cost 4 after partial refill", floodgate.NewTokenBucket(10, 3, time.Second),
			[]step{{0, 8}, {100 * time.Millisecond, 2}}, 4},
		{"counter cost 1 in window", floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, time.Minute),
			[]step{{0, 10}, {time.Minute, 0}}, 1},
		{"counter cost 3 next window", floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, time.Minute),
			[]step{{30 * time.Second, 9}}, 3},
		{"fixed cost 2", floodgate.NewLimit(floodgate.FixedWindow, 10, time.Minute),
			[]step{{42 * time.Second, 9}}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			for _, s := range c.fill {
				e.clock.Advance(s.advance)
				if s.cost > 0 && !e.allowN(key, c.limit, s.cost).Allowed {
					t.Fatalf("fill request of cost %d at %s denied", s.cost, e.clock.Now().Sub(Epoch))
				}
			}
			// Exhaust with cost 1 so the probe is denied.
			for e.allowN(key, c.limit, 1).Allowed {
			}
			d := e.allowN(key, c.limit, c.cost)
			if d.Allowed {
				t.Fatalf("probe of cost %d admitted on an exhausted key", c.cost)
			}
			if d.RetryAfter <= 0 {
				t.Fatalf("denied with RetryAfter %s, want > 0", d.RetryAfter)
			}
			at := e.clock.Now().Add(d.RetryAfter)
			e.clock.Set(at.Add(-time.Microsecond))
			if early := e.allowN(key, c.limit, c.cost); early.Allowed {
				t.Fatalf("retry 1µs before RetryAfter %s admitted", d.RetryAfter)
			}
			e.clock.Set(at)
			if on := e.allowN(key, c.limit, c.cost); !on.Allowed {
				t.Fatalf("retry exactly at RetryAfter %s denied: %+v", d.RetryAfter, on)
			}
		})
	}
}

// testDeniedConsumesNothing: hammering a key while it is over its limit does
// not move its retry time, and the request is admitted when the first denial
// said it would be.
func testDeniedConsumesNothing(t *testing.T, newStore NewStore) {
	for _, l := range limits(10, 10*time.Second) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			e.clock.Set(Epoch.Add(3 * time.Second))
			if got := e.admit(key, l, 1, 10); got != 10 {
				t.Fatalf("admitted %d of 10 on a fresh key", got)
			}
			first := e.allowN(key, l, 1)
			if first.Allowed {
				t.Fatal("11th request admitted")
			}
			retryAt := e.clock.Now().Add(first.RetryAfter)
			for range 50 {
				e.clock.Advance(first.RetryAfter / 100)
				if d := e.allowN(key, l, 1); d.Allowed {
					t.Fatalf("admitted at %s, before the first denial's retry time", e.clock.Now().Sub(Epoch))
				} else if got := e.clock.Now().Add(d.RetryAfter); !got.Equal(retryAt) {
					t.Fatalf("retry time moved from %s to %s after denied requests", retryAt.Sub(Epoch), got.Sub(Epoch))
				}
			}
			e.clock.Set(retryAt)
			if d := e.allowN(key, l, 1); !d.Allowed {
				t.Fatalf("denied at the first denial's retry time: %+v", d)
			}
		})
	}
}

// testRemainingAndResetAfter checks Remaining falls by the cost of each
// admitted request and ResetAfter on a few exact cases.
func testRemainingAndResetAfter(t *testing.T, newStore NewStore) {
	t.Run("remaining falls by cost", func(t *testing.T) {
		for _, l := range limits(20, time.Minute) {
			e := newEnv(t, newStore)
			key := e.key(l.Algorithm.String())
			e.clock.Set(Epoch.Add(time.Second))
			want := int64(20)
			for _, n := range []int64{1, 3, 5, 1, 10} {
				d := e.allowN(key, l, n)
				want -= n
				if !d.Allowed || d.Remaining != want {
					t.Fatalf("%s: after cost %d got %+v, want allowed with Remaining %d", l.Algorithm, n, d, want)
				}
			}
			if d := e.allowN(key, l, 1); d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: on an exhausted key got %+v, want denied with Remaining 0", l.Algorithm, d)
			}
		}
	})
	cases := []struct {
		name      string
		limit     floodgate.Limit
		at        time.Duration // from Epoch
		cost      int64
		wantReset time.Duration
	}{
		{"log: one window after the newest entry", floodgate.NewLimit(floodgate.SlidingWindowLog, 10, time.Minute), 5 * time.Second, 1, time.Minute},
		{"log: cost 3 occupies three microseconds", floodgate.NewLimit(floodgate.SlidingWindowLog, 10, time.Minute), 0, 3, time.Minute + 2*time.Microsecond},
		{"bucket: time to refill what was taken", floodgate.NewTokenBucket(10, 10, time.Second), 0, 4, 400 * time.Millisecond},
		{"bucket: 1 per 7s", floodgate.NewTokenBucket(3, 1, 7*time.Second), 0, 2, 14 * time.Second},
		{"fixed: end of the window", floodgate.NewLimit(floodgate.FixedWindow, 10, time.Minute), 20 * time.Second, 1, 40 * time.Second},
		{"counter: end of the next window", floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, time.Minute), 20 * time.Second, 1, 100 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			e.clock.Set(Epoch.Add(c.at))
			d := e.allowN(e.key("k"), c.limit, c.cost)
			if !d.Allowed || d.ResetAfter != c.wantReset {
				t.Fatalf("got %+v, want allowed with ResetAfter %s", d, c.wantReset)
			}
		})
	}
}

// testFractionalRefill checks rates that are not whole tokens per second.
func testFractionalRefill(t *testing.T, newStore NewStore) {
	cases := []struct {
		name      string
		limit     floodgate.Limit
		wantRetry time.Duration // for one token on an empty bucket
	}{
		{"0.5 per second", floodgate.NewTokenBucket(2, 1, 2*time.Second), 2 * time.Second},
		{"1 per 7 seconds", floodgate.NewTokenBucket(1, 1, 7*time.Second), 7 * time.Second},
		{"3 per second", floodgate.NewTokenBucket(3, 3, time.Second), 333334 * time.Microsecond},
		{"1000 per hour", floodgate.NewTokenBucket(1000, 1000, time.Hour), 3600 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			e.clock.Set(Epoch.Add(time.Hour))
			if got := e.admit(key, c.limit, c.limit.Quota, 1); got != 1 {
				t.Fatal("could not drain a full bucket")
			}
			d := e.allowN(key, c.limit, 1)
			if d.Allowed || d.RetryAfter != c.wantRetry {
				t.Fatalf("on an empty bucket got %+v, want denied with RetryAfter %s", d, c.wantRetry)
			}
			// Tokens accrue exactly: after k refill intervals, exactly k
			// requests fit, with no drift from rounding.
			k := min(c.limit.Quota, 5)
			e.clock.Advance(time.Duration(k) * c.wantRetry)
			if got := e.admit(key, c.limit, 1, int(k)+1); got != int(k) {
				t.Errorf("after %d intervals admitted %d, want %d", k, got, k)
			}
		})
	}
}

// testKeyIsolation: exhausting one key leaves others, and the same key under
// another algorithm, untouched.
func testKeyIsolation(t *testing.T, newStore NewStore) {
	e := newEnv(t, newStore)
	e.clock.Set(Epoch.Add(time.Second))
	ls := limits(3, time.Minute)
	for _, l := range ls {
		if got := e.admit(e.key("a"), l, 1, 5); got != 3 {
			t.Fatalf("%s: admitted %d on key a, want 3", l.Algorithm, got)
		}
	}
	for _, l := range ls {
		if d := e.allowN(e.key("b"), l, 1); !d.Allowed || d.Remaining != 2 {
			t.Errorf("%s: key b got %+v after key a was exhausted, want allowed with Remaining 2", l.Algorithm, d)
		}
		if d := e.allowN(e.key("ab"), l, 3); !d.Allowed {
			t.Errorf("%s: key ab got %+v, want allowed", l.Algorithm, d)
		}
	}
}

// HostileKeys are identities a caller may send that break naive key schemes:
// empty, Redis hash-tag braces, NUL, newlines, invalid UTF-8, and 64 KiB.
func HostileKeys() []string {
	return []string{
		"", "{", "}", "{}", "}{", "{a}", "a{b}c", "{{x}}", "x{}{y}",
		"\x00", "a\x00b", "line\nbreak", "\r\n", "\xff\xfe\xfd", "\xc3\x28",
		" ", "*", "fg:", ":", "{fg}:tb", strings.Repeat("k", 64<<10), strings.Repeat("{}", 32<<10),
	}
}

// testHostileKeys: every hostile key works, and no two of them share state.
func testHostileKeys(t *testing.T, newStore NewStore) {
	for _, l := range limits(2, time.Minute) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			e.clock.Set(Epoch.Add(time.Second))
			for i, k := range HostileKeys() {
				key := e.ns + k
				if got := e.admit(key, l, 1, 3); got != 2 {
					t.Errorf("hostile key #%d (%d bytes): admitted %d of 3, want 2 (state shared with another key?)", i, len(k), got)
				}
			}
			// The bare hostile keys, without the namespace prefix, must be
			// distinct from each other too. They are shared across runs, so
			// reset them first.
			for i, k := range HostileKeys() {
				if err := e.store.Reset(e.ctx, k, l); err != nil {
					t.Fatalf("Reset(hostile key #%d): %v", i, err)
				}
				if got := e.admit(k, l, 2, 1); got != 1 {
					t.Errorf("bare hostile key #%d (%d bytes): cost 2 on a reset key denied", i, len(k))
				}
			}
		})
	}
}

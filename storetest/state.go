package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

// testRefund: a refunded admission gives its quota back, never more than
// the full quota.
func testRefund(t *testing.T, newStore NewStore) {
	for _, l := range limits(5, time.Hour) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			e.clock.Set(Epoch.Add(time.Minute))
			e.allowN(key, l, 2)
			if d := e.allowN(key, l, 3); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("filling the quota got %+v", d)
			}
			if err := e.store.RefundN(e.ctx, key, l, 3); err != nil {
				t.Fatalf("RefundN: %v", err)
			}
			if d := e.allowN(key, l, 3); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("after refunding 3, cost 3 got %+v, want allowed with Remaining 0", d)
			}
			if d := e.allowN(key, l, 1); d.Allowed {
				t.Fatalf("refund gave back more than it took: %+v", d)
			}
			// Refunds never raise a key above its quota.
			fresh := e.key("fresh")
			if err := e.store.RefundN(e.ctx, fresh, l, 5); err != nil {
				t.Fatalf("RefundN on an unknown key: %v", err)
			}
			e.allowN(fresh, l, 1)
			if err := e.store.RefundN(e.ctx, fresh, l, 5); err != nil {
				t.Fatalf("RefundN: %v", err)
			}
			if got := e.admit(fresh, l, 1, 7); got != 5 {
				t.Fatalf("after over-refunding, admitted %d, want the quota 5", got)
			}
			if err := e.store.RefundN(e.ctx, key, l, 6); !errors.Is(err, floodgate.ErrCostExceedsLimit) {
				t.Fatalf("RefundN beyond the quota = %v, want ErrCostExceedsLimit", err)
			}
		})
	}
}

// testReset: after Reset the whole quota is available again.
func testReset(t *testing.T, newStore NewStore) {
	for _, l := range limits(5, time.Hour) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			e.clock.Set(Epoch.Add(time.Minute))
			e.admit(key, l, 1, 6)
			if err := e.store.Reset(e.ctx, key, l); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			if d := e.allowN(key, l, 5); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("after Reset, cost 5 got %+v, want allowed with Remaining 0", d)
			}
			if err := e.store.Reset(e.ctx, e.key("never-seen"), l); err != nil {
				t.Fatalf("Reset of an unknown key: %v", err)
			}
		})
	}
}

// testInvalidLimits: invalid limits are rejected with ErrInvalidLimit naming
// the field, and nothing is admitted.
func testInvalidLimits(t *testing.T, newStore NewStore) {
	e := newEnv(t, newStore)
	ok := floodgate.PerMinute(10)
	cases := []struct {
		name  string
		limit floodgate.Limit
		field string
	}{
		{"zero value", floodgate.Limit{}, "Algorithm"},
		{"unknown algorithm", floodgate.Limit{Algorithm: 99, Quota: 1, Window: time.Second}, "Algorithm"},
		{"zero quota", floodgate.NewLimit(floodgate.SlidingWindowLog, 0, time.Second), "Quota"},
		{"negative quota", floodgate.NewLimit(floodgate.TokenBucket, -5, time.Second), "Quota"},
		{"huge quota", floodgate.NewLimit(floodgate.FixedWindow, 1<<62, time.Second), "Quota"},
		{"huge log", floodgate.NewLimit(floodgate.SlidingWindowLog, 1<<20+1, time.Hour), "Quota"},
		{"zero window", floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, 0), "Window"},
		{"negative window", floodgate.NewLimit(floodgate.FixedWindow, 10, -time.Second), "Window"},
		{"window under 1ms", floodgate.NewLimit(floodgate.SlidingWindowLog, 10, 999*time.Microsecond), "Window"},
		{"window over a year", floodgate.NewLimit(floodgate.FixedWindow, 10, 400*24*time.Hour), "Window"},
		{"fractional microsecond", floodgate.NewLimit(floodgate.FixedWindow, 10, time.Second+1), "Window"},
		{"negative refill", floodgate.NewTokenBucket(10, -1, time.Second), "Refill"},
		{"refill on a window", floodgate.Limit{Algorithm: floodgate.FixedWindow, Quota: 10, Window: time.Second, Refill: 3}, "Refill"},
		{"bucket too fine for exact arithmetic", floodgate.NewTokenBucket(1<<40, 1, 300*24*time.Hour), "Quota"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.limit.Validate()
			var le *floodgate.LimitError
			if !errors.As(err, &le) || !errors.Is(err, floodgate.ErrInvalidLimit) || le.Field != c.field {
				t.Fatalf("Validate() = %v, want a *LimitError for field %s", err, c.field)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %q does not name the field %s", err, c.field)
			}
			d, err := e.store.AllowN(e.ctx, e.key("k"), c.limit, 1)
			if !errors.Is(err, floodgate.ErrInvalidLimit) || d.Allowed {
				t.Fatalf("AllowN with %s = %+v, %v; want ErrInvalidLimit and not allowed", c.name, d, err)
			}
			if err := e.store.Reset(e.ctx, e.key("k"), c.limit); !errors.Is(err, floodgate.ErrInvalidLimit) {
				t.Fatalf("Reset with %s = %v, want ErrInvalidLimit", c.name, err)
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("PerMinute(10).Validate() = %v", err)
	}
}

// testInvalidCosts: a negative cost is ErrInvalidCost; a cost above the
// quota is ErrCostExceedsLimit, never admitted and never spun on.
func testInvalidCosts(t *testing.T, newStore NewStore) {
	for _, l := range limits(10, time.Minute) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			for _, n := range []int64{-1, -1 << 62} {
				d, err := e.store.AllowN(e.ctx, key, l, n)
				if !errors.Is(err, floodgate.ErrInvalidCost) || d.Allowed {
					t.Errorf("AllowN cost %d = %+v, %v; want ErrInvalidCost", n, d, err)
				}
			}
			for _, n := range []int64{11, 1 << 62} {
				d, err := e.store.AllowN(e.ctx, key, l, n)
				if !errors.Is(err, floodgate.ErrCostExceedsLimit) || d.Allowed || d.Limit != 10 {
					t.Errorf("AllowN cost %d = %+v, %v; want ErrCostExceedsLimit with Limit 10", n, d, err)
				}
			}
			// Nothing was consumed by the rejected calls.
			if d := e.allowN(key, l, 10); !d.Allowed {
				t.Errorf("cost 10 after rejected costs got %+v, want allowed", d)
			}
		})
	}
	// A log records one entry per unit of cost: one request takes at most
	// limitcheck.MaxLogCost of them, whatever its quota, so that no single
	// call holds the store for long.
	t.Run("log cost above the most per request", func(t *testing.T) {
		e := newEnv(t, newStore)
		key, l := e.key("big"), floodgate.PerHour(1<<20)
		d, err := e.store.AllowN(e.ctx, key, l, limitcheck.MaxLogCost+1)
		if !errors.Is(err, floodgate.ErrInvalidCost) || d.Allowed {
			t.Errorf("AllowN cost %d on a log = %+v, %v; want ErrInvalidCost", limitcheck.MaxLogCost+1, d, err)
		}
		var r [1]floodgate.BatchResult
		if bs, ok := e.store.(floodgate.BatchStore); ok {
			bs.AllowBatch(e.ctx, []floodgate.BatchItem{{Key: key, Limit: l, Cost: limitcheck.MaxLogCost + 1}}, r[:])
			if !errors.Is(r[0].Err, floodgate.ErrInvalidCost) || r[0].Decision.Allowed {
				t.Errorf("AllowBatch cost %d on a log = %+v; want ErrInvalidCost", limitcheck.MaxLogCost+1, r[0])
			}
		}
		if d := e.allowN(key, l, 0); d.Remaining != 1<<20 {
			t.Errorf("the refused call took quota: %+v", d)
		}
	})
}

// testCheckOnly: a cost of 0 is always allowed, reports what the key holds
// (the Remaining and ResetAfter of the last decision at the same moment, a
// whole quota for a key never seen) and changes nothing, for every
// algorithm; RefundN of 0 changes nothing either.
func testCheckOnly(t *testing.T, newStore NewStore) {
	for _, l := range limits(20, time.Minute) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			e.clock.Set(Epoch.Add(time.Second))
			peek := func(wantRemaining int64, wantReset time.Duration) {
				t.Helper()
				for range 3 {
					d := e.allowN(key, l, 0)
					if !d.Allowed || d.Remaining != wantRemaining || d.RetryAfter != 0 || d.ResetAfter != wantReset {
						t.Fatalf("AllowN cost 0 = %+v, want allowed with Remaining %d, ResetAfter %s", d, wantRemaining, wantReset)
					}
				}
			}
			peek(20, 0)
			taken := e.allowN(key, l, 5)
			if !taken.Allowed || taken.Remaining != 15 {
				t.Fatalf("cost 5 after peeks = %+v, want allowed with Remaining 15", taken)
			}
			peek(15, taken.ResetAfter)
			if err := e.store.RefundN(e.ctx, key, l, 0); err != nil {
				t.Fatalf("RefundN cost 0: %v", err)
			}
			peek(15, taken.ResetAfter)
			if got := e.admit(key, l, 1, 16); got != 15 {
				t.Fatalf("after peeks %d of 16 admitted, want 15: a peek took quota", got)
			}
			if d := e.allowN(key, l, 0); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("peek of an exhausted key = %+v, want allowed with Remaining 0", d)
			}
			e.clock.Set(Epoch.Add(4 * time.Minute)) // every algorithm is whole again
			peek(20, 0)
		})
	}
}

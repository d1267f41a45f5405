package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
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

// testInvalidCosts: a cost below 1 is ErrInvalidCost; a cost above the quota
// is ErrCostExceedsLimit, never admitted and never spun on.
func testInvalidCosts(t *testing.T, newStore NewStore) {
	for _, l := range limits(10, time.Minute) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, newStore)
			key := e.key("k")
			for _, n := range []int64{0, -1, -1 << 62} {
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
}

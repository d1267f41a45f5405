package floodgate_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestAllowAll: all or nothing on every store, with its batches and
// without: an admitted request takes from every item, one that is denied
// or fails takes from none, and the Decision is the deciding item's.
func TestAllowAll(t *testing.T) {
	tenLog := floodgate.PerHour(10)
	twoLog := floodgate.PerHour(2)
	bucket := floodgate.NewTokenBucket(5, 1, time.Minute)
	bigLog := floodgate.NewLimit(floodgate.SlidingWindowLog, 1<<20, time.Hour)
	type use struct {
		key   string
		limit floodgate.Limit
		n     int64
	}
	for _, tc := range []struct {
		name        string
		before      []use // taken first
		items       []floodgate.BatchItem
		wantAllowed bool
		wantErr     error  // matched with errors.Is
		wantMsg     string // in the error
		wantLimit   int64  // the Decision's Limit: which item decided
		wantLeft    []int64
	}{
		{name: "all fit: the least remaining decides",
			items:       []floodgate.BatchItem{{Key: "a", Limit: tenLog, Cost: 1}, {Key: "b", Limit: bucket, Cost: 2}},
			wantAllowed: true, wantLimit: 5, wantLeft: []int64{9, 3}},
		{name: "one denies: nothing taken",
			before:    []use{{"b", twoLog, 2}},
			items:     []floodgate.BatchItem{{Key: "a", Limit: tenLog, Cost: 1}, {Key: "b", Limit: twoLog, Cost: 1}, {Key: "c", Limit: bucket, Cost: 1}},
			wantLimit: 2, wantLeft: []int64{10, 0, 5}},
		{name: "the same key twice, in order",
			items:       []floodgate.BatchItem{{Key: "a", Limit: twoLog, Cost: 1}, {Key: "a", Limit: twoLog, Cost: 1}},
			wantAllowed: true, wantLimit: 2, wantLeft: []int64{0, 0}},
		{name: "the same key twice, over its quota: nothing taken",
			items:     []floodgate.BatchItem{{Key: "a", Limit: twoLog, Cost: 2}, {Key: "a", Limit: twoLog, Cost: 1}},
			wantLimit: 2, wantLeft: []int64{2, 2}},
		{name: "a store error after an admission: given back",
			items:   []floodgate.BatchItem{{Key: "a", Limit: tenLog, Cost: 3}, {Key: "big", Limit: bigLog, Cost: 70000}},
			wantErr: floodgate.ErrInvalidCost, wantMsg: `floodgate: AllowAll: item 1 (key "big"): `, wantLimit: 1 << 20, wantLeft: []int64{10, 1 << 20}},
		{name: "a cost of 0: refused before the store",
			items:   []floodgate.BatchItem{{Key: "a", Limit: tenLog, Cost: 1}, {Key: "b", Limit: tenLog}},
			wantErr: floodgate.ErrInvalidCost, wantMsg: `floodgate: AllowAll: item 1 (key "b"): floodgate: invalid cost: cost 0 must be at least 1`, wantLimit: 10, wantLeft: []int64{10, 10}},
		{name: "a cost above the quota: refused before the store",
			items:   []floodgate.BatchItem{{Key: "a", Limit: tenLog, Cost: 11}},
			wantErr: floodgate.ErrCostExceedsLimit, wantMsg: `item 0 (key "a")`, wantLimit: 10, wantLeft: []int64{10}},
		{name: "an invalid limit: refused before the store",
			items:   []floodgate.BatchItem{{Key: "a", Limit: tenLog, Cost: 1}, {Key: "b", Limit: floodgate.PerHour(0), Cost: 1}},
			wantErr: floodgate.ErrInvalidLimit, wantMsg: `item 1 (key "b"): floodgate: invalid limit: Quota 0 must be at least 1`, wantLeft: []int64{10}},
	} {
		for _, st := range stores() {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				s := st.make(t)
				for _, u := range tc.before {
					if _, err := s.AllowN(t.Context(), u.key, u.limit, u.n); err != nil {
						t.Fatal(err)
					}
				}
				d, err := floodgate.AllowAll(t.Context(), s, tc.items...)
				if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) || err != nil && !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("AllowAll = %+v, %v; want error %v containing %q", d, err, tc.wantErr, tc.wantMsg)
				}
				if d.Allowed != tc.wantAllowed || d.Limit != tc.wantLimit {
					t.Errorf("AllowAll = %+v; want allowed=%v, limit %d", d, tc.wantAllowed, tc.wantLimit)
				}
				if !d.Allowed && err == nil && d.RetryAfter <= 0 {
					t.Errorf("a denial without a retry delay: %+v", d)
				}
				for i, want := range tc.wantLeft {
					it := tc.items[i]
					if got := remaining(t, s, it.Key, it.Limit); got != want {
						t.Errorf("item %d (%s) has %d left, want %d", i, it.Key, got, want)
					}
				}
			})
		}
	}
}

// TestAllowAllNoItems: nothing to check is an error, not an admission.
func TestAllowAllNoItems(t *testing.T) {
	for _, st := range stores()[:2] {
		if _, err := floodgate.AllowAll(t.Context(), st.make(t)); err == nil || err.Error() != "floodgate: AllowAll: no items: pass at least one BatchItem" {
			t.Errorf("%s: AllowAll with no items = %v", st.name, err)
		}
	}
}

// TestAllowAllLongestRetryDecides: of several denying items, the one that
// fits last decides, so a retry at its RetryAfter finds them all fitting.
func TestAllowAllLongestRetryDecides(t *testing.T) {
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			s := st.make(t)
			minute, hour := floodgate.PerMinute(1), floodgate.PerHour(1)
			for _, k := range []struct {
				key   string
				limit floodgate.Limit
			}{{"m", minute}, {"h", hour}} {
				if _, err := s.Allow(t.Context(), k.key, k.limit); err != nil {
					t.Fatal(err)
				}
			}
			d, err := floodgate.AllowAll(t.Context(), s,
				floodgate.BatchItem{Key: "m", Limit: minute, Cost: 1}, floodgate.BatchItem{Key: "h", Limit: hour, Cost: 1})
			if err != nil || d.Allowed || d.RetryAfter <= time.Minute {
				t.Fatalf("AllowAll = %+v, %v; want the hour's denial, retrying in nearly an hour", d, err)
			}
		})
	}
}

// TestAllowAllConcurrent: many requests at once, each needing a global and
// its tenant's limit. Every key has exactly what the admitted requests
// took, on every store; where the store decides a batch atomically the
// global budget is used up exactly (no request is denied by quota about
// to be given back).
func TestAllowAllConcurrent(t *testing.T) {
	const tenants, workers, tries = 4, 8, 4
	global, perTenant := floodgate.PerHour(60), floodgate.PerHour(20)
	tenantKeys := [tenants]string{"tenant-0", "tenant-1", "tenant-2", "tenant-3"}
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			s := st.make(t)
			var admitted [tenants]atomic.Int64
			var wg sync.WaitGroup
			for w := range tenants * workers {
				wg.Go(func() {
					tn := w % tenants
					for range tries {
						d, err := floodgate.AllowAll(t.Context(), s,
							floodgate.BatchItem{Key: "global", Limit: global, Cost: 1},
							floodgate.BatchItem{Key: tenantKeys[tn], Limit: perTenant, Cost: 1})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted[tn].Add(1)
						}
					}
				})
			}
			wg.Wait()
			total := int64(0)
			for tn := range tenants {
				n := admitted[tn].Load()
				total += n
				if left := remaining(t, s, tenantKeys[tn], perTenant); left != perTenant.Quota-n {
					t.Errorf("%s: %d admitted, %d left of %d", tenantKeys[tn], n, left, perTenant.Quota)
				}
			}
			if left := remaining(t, s, "global", global); left != global.Quota-total {
				t.Errorf("global: %d admitted, %d left of %d", total, left, global.Quota)
			}
			if _, atomic := s.(floodgate.BatchStore); atomic && total != global.Quota {
				t.Errorf("an atomic store admitted %d, want the global quota %d", total, global.Quota)
			}
		})
	}
}

package floodgate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestWait runs WaitN in a synctest bubble, whose clock the memory store
// reads too: the sleeps take no real time and are exact.
func TestWait(t *testing.T) {
	oneAMinute := floodgate.PerMinute(1)
	for _, tc := range []struct {
		name     string
		used     int64         // taken from the key first
		timeout  time.Duration // of the context; 0: none
		cancelIn time.Duration // cancel the context then; 0: never
		cost     int64
		limit    floodgate.Limit
		wantErr  error // matched with errors.Is
		wantWait time.Duration
		wantLeft int64 // the key's remaining at the end
	}{
		{name: "admitted at once", cost: 1, limit: floodgate.PerMinute(3), wantLeft: 2},
		{name: "sleeps the retry delay", used: 1, cost: 1, limit: oneAMinute, wantWait: time.Minute},
		{name: "deadline after the retry", used: 1, timeout: 2 * time.Minute, cost: 1, limit: oneAMinute, wantWait: time.Minute},
		{name: "deadline before the retry: at once", used: 1, timeout: 30 * time.Second, cost: 1, limit: oneAMinute, wantErr: context.DeadlineExceeded},
		{name: "cancelled while sleeping", used: 1, cancelIn: 10 * time.Second, cost: 1, limit: oneAMinute, wantErr: context.Canceled, wantWait: 10 * time.Second},
		{name: "a cost that never fits: at once", cost: 2, limit: oneAMinute, wantErr: floodgate.ErrCostExceedsLimit, wantLeft: 1},
		{name: "a negative cost: at once", cost: -1, limit: oneAMinute, wantErr: floodgate.ErrInvalidCost, wantLeft: 1},
		{name: "an invalid limit: at once", cost: 1, limit: floodgate.Limit{}, wantErr: floodgate.ErrInvalidLimit},
		{name: "a cost of 0 takes nothing", used: 1, cost: 0, limit: oneAMinute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.New()
				ctx := t.Context()
				if tc.used > 0 {
					if d, err := store.AllowN(ctx, "k", tc.limit, tc.used); err != nil || !d.Allowed {
						t.Fatalf("taking %d first: %+v, %v", tc.used, d, err)
					}
				}
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				if tc.cancelIn > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(tc.cancelIn, cancel)
				}
				start := time.Now()
				d, err := floodgate.WaitN(ctx, store, "k", tc.limit, tc.cost)
				waited := time.Since(start)
				if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
					t.Fatalf("WaitN = %+v, %v; want error %v", d, err, tc.wantErr)
				}
				if d.Allowed != (err == nil) {
					t.Errorf("WaitN = %+v, %v: Allowed must say whether it admitted", d, err)
				}
				if waited != tc.wantWait {
					t.Errorf("WaitN returned after %s, want %s", waited, tc.wantWait)
				}
				if tc.limit.Validate() == nil {
					if got := remaining(t, store, "k", tc.limit); got != tc.wantLeft {
						t.Errorf("the key has %d left, want %d", got, tc.wantLeft)
					}
				}
			})
		})
	}
}

// TestWaitDeadlineError: the error of a wait that would pass the deadline
// says so, and comes with the denial, whose RetryAfter tells when to come
// back.
func TestWaitDeadlineError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		limit := floodgate.PerMinute(1)
		_, _ = store.Allow(t.Context(), "k", limit)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		d, err := floodgate.Wait(ctx, store, "k", limit)
		const want = "floodgate: Wait: the retry in 1m0s would come after the context's deadline, 30s away: context deadline exceeded"
		if err == nil || err.Error() != want || d.Allowed || d.RetryAfter != time.Minute {
			t.Fatalf("Wait = %+v, %v; want a denial retrying in 1m and %q", d, err, want)
		}
	})
}

// TestWaitBeforeAsking: a context that has ended already is an error
// before the store is asked, and a nil store is an error, not a panic.
func TestWaitBeforeAsking(t *testing.T) {
	store := memory.New()
	limit := floodgate.PerMinute(1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := floodgate.Wait(ctx, store, "k", limit); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v, want context.Canceled", err)
	}
	if got := remaining(t, store, "k", limit); got != 1 {
		t.Fatalf("a cancelled Wait took from the key: %d left", got)
	}
	if _, err := floodgate.Wait(t.Context(), nil, "k", limit); err == nil || err.Error() != "floodgate: Wait: the store is nil" {
		t.Fatalf("Wait on a nil store = %v", err)
	}
	if _, err := floodgate.WaitAll(t.Context(), nil, floodgate.BatchItem{Key: "k", Limit: limit, Cost: 1}); err == nil || err.Error() != "floodgate: WaitAll: the store is nil" {
		t.Fatalf("WaitAll on a nil store = %v", err)
	}
}

// TestWaitTakesTurns: waiters on one key are each admitted once, in turn,
// as the quota comes back: 3 waiters on 1 a minute end at 0, 1 and 2
// minutes, each denial having slept exactly its retry delay.
func TestWaitTakesTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		limit := floodgate.PerMinute(1)
		start := time.Now()
		var mu sync.Mutex
		var ends []time.Duration
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if _, err := floodgate.Wait(t.Context(), store, "k", limit); err != nil {
					t.Error(err)
				}
				mu.Lock()
				ends = append(ends, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		for i, want := range []time.Duration{0, time.Minute, 2 * time.Minute} {
			if ends[i] != want {
				t.Fatalf("the waiters ended at %v, want 0s, 1m0s and 2m0s", ends)
			}
		}
	})
}

// TestWaitAll: WaitAll waits for the limit that denies while holding
// nothing of the other: the global budget is untouched until the tenant's
// turn comes, and then both are taken together.
func TestWaitAll(t *testing.T) {
	for _, st := range stores()[:2] { // the memory store: its clock is the bubble's
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := st.make(t)
				global, tenant := floodgate.PerHour(100), floodgate.PerMinute(1)
				items := []floodgate.BatchItem{{Key: "global", Limit: global, Cost: 1}, {Key: "tenant-7", Limit: tenant, Cost: 1}}
				if d, err := floodgate.WaitAll(t.Context(), store, items...); err != nil || !d.Allowed {
					t.Fatalf("first WaitAll = %+v, %v", d, err)
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					if d, err := floodgate.WaitAll(t.Context(), store, items...); err != nil || !d.Allowed {
						t.Errorf("second WaitAll = %+v, %v", d, err)
					}
				}()
				synctest.Wait() // the second one is asleep
				if got := remaining(t, store, "global", global); got != 99 {
					t.Errorf("while waiting on the tenant, the global budget has %d left, want 99", got)
				}
				time.Sleep(time.Minute)
				<-done
				if g, tn := remaining(t, store, "global", global), remaining(t, store, "tenant-7", tenant); g != 98 || tn != 0 {
					t.Errorf("after the wait: global %d left, tenant %d; want 98 and 0", g, tn)
				}
			})
		})
	}
}

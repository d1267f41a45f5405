package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/memory"
)

func Example() {
	store := memory.New() // embedded; redisstore.New shares limits between instances
	limit := floodgate.PerMinute(3)
	ctx := context.Background()
	for i := range 4 {
		d, err := store.Allow(ctx, "user-42", limit)
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v remaining=%d\n", i+1, d.Allowed, d.Remaining)
	}
	// Output:
	// request 1: allowed=true remaining=2
	// request 2: allowed=true remaining=1
	// request 3: allowed=true remaining=0
	// request 4: allowed=false remaining=0
}

// A key holds one limit's state: two limits of one algorithm on the same
// key count the same requests. Give each limit its own key.
func Example_keys() {
	store := memory.New()
	ctx := context.Background()
	for range 3 {
		_, _ = store.Allow(ctx, "user-42", floodgate.PerMinute(10))
	}
	shared, _ := store.Allow(ctx, "user-42", floodgate.PerHour(1000))
	fmt.Println("same key:", shared.Remaining)

	for range 3 {
		_, _ = store.Allow(ctx, "per-minute|user-7", floodgate.PerMinute(10))
	}
	own, _ := store.Allow(ctx, "per-hour|user-7", floodgate.PerHour(1000))
	fmt.Println("own keys:", own.Remaining)
	// Output:
	// same key: 996
	// own keys: 999
}

// A worker waits for its turn: Wait sleeps each denial's RetryAfter and
// asks again, and returns at once when the context's deadline would pass
// before the retry.
func ExampleWait() {
	store := memory.New()
	limit := floodgate.PerMinute(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for job := range 3 {
		d, err := floodgate.Wait(ctx, store, "jobs|tenant-7", limit)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			fmt.Printf("job %d: not before the deadline (retry in about %s)\n", job+1, d.RetryAfter.Round(time.Minute))
		case err != nil:
			fmt.Println(err) // the store failed: ErrStoreUnavailable, ...
		default:
			fmt.Printf("job %d: run, %d left\n", job+1, d.Remaining)
		}
	}
	// Output:
	// job 1: run, 1 left
	// job 2: run, 0 left
	// job 3: not before the deadline (retry in about 1m0s)
}

// A request that needs the global and its tenant's limit takes from both
// or from neither: the tenant's denial leaves the global budget whole.
func ExampleAllowAll() {
	store := memory.New()
	global, tenant := floodgate.PerMinute(100), floodgate.PerMinute(1)
	ctx := context.Background()
	for range 2 {
		d, err := floodgate.AllowAll(ctx, store,
			floodgate.BatchItem{Key: "global", Limit: global, Cost: 1},
			floodgate.BatchItem{Key: "tenant-7", Limit: tenant, Cost: 1})
		if err != nil {
			panic(err)
		}
		left, _ := store.AllowN(ctx, "global", global, 0) // a cost of 0 reads the key
		fmt.Println(d.Allowed, left.Remaining)
	}
	// Output:
	// true 99
	// false 99
}

// WaitAll waits for every limit at once, holding none of them meanwhile.
func ExampleWaitAll() {
	store := memory.New()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	items := []floodgate.BatchItem{
		{Key: "global", Limit: floodgate.PerMinute(100), Cost: 1},
		{Key: "tenant-7", Limit: floodgate.PerMinute(1), Cost: 1},
	}
	for range 2 {
		d, err := floodgate.WaitAll(ctx, store, items...)
		fmt.Println(d.Allowed, errors.Is(err, context.DeadlineExceeded))
	}
	// Output:
	// true false
	// false true
}

func ExampleNewTokenBucket() {
	clock := clocktest.NewManual(time.Unix(0, 0))
	store := memory.New(memory.WithClock(clock))
	// Bursts of up to 2, refilled at 1 token every 7 seconds.
	limit := floodgate.NewTokenBucket(2, 1, 7*time.Second)
	ctx := context.Background()
	_, _ = store.AllowN(ctx, "k", limit, 2)
	d, _ := store.Allow(ctx, "k", limit)
	fmt.Println(d.Allowed, d.RetryAfter)
	clock.Advance(d.RetryAfter)
	d, _ = store.Allow(ctx, "k", limit)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// false 7s
	// true 0 14s
}

func ExampleLimit_Validate() {
	err := floodgate.NewLimit(floodgate.FixedWindow, 100, 500*time.Microsecond).Validate()
	fmt.Println(err)
	fmt.Println(errors.Is(err, floodgate.ErrInvalidLimit))
	// Output:
	// floodgate: invalid limit: Window 500µs must be at least 1ms
	// true
}

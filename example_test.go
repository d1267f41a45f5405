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

package clocktest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/memory"
)

// A store on a manual clock: time moves only when the test says so.
func ExampleManual() {
	clock := clocktest.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	limit := floodgate.PerMinute(1)
	ctx := context.Background()

	d, _ := store.Allow(ctx, "k", limit)
	fmt.Println(d.Allowed)
	d, _ = store.Allow(ctx, "k", limit)
	fmt.Println(d.Allowed, d.RetryAfter)
	clock.Advance(d.RetryAfter)
	d, _ = store.Allow(ctx, "k", limit)
	fmt.Println(d.Allowed)
	// Output:
	// true
	// false 1m0s
	// true
}

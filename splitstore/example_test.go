package splitstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/splitstore"
)

// Per-second limits in one store, the others in another: with Redis, two
// redisstore.Store (floodgate's store.per_second, envoyproxy/ratelimit's
// REDIS_PERSECOND). A batch across both is all or nothing.
func Example() {
	clock := clocktest.NewManual(time.Date(2030, 1, 7, 0, 0, 0, 0, time.UTC)) // the system clock, in a real program
	main, perSecond := memory.New(memory.WithClock(clock)), memory.New(memory.WithClock(clock))
	store, err := splitstore.New(main, perSecond)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	burst, hourly := floodgate.PerSecond(1), floodgate.PerHour(100)
	res := make([]floodgate.BatchResult, 2)
	for i := range 2 {
		store.AllowBatch(ctx, []floodgate.BatchItem{{Key: "client", Limit: burst, Cost: 1}, {Key: "client", Limit: hourly, Cost: 1}}, res)
		fmt.Printf("request %d: per-second allowed %v, hourly allowed %v\n", i+1, res[0].Decision.Allowed, res[1].Decision.Allowed)
	}
	d, _ := main.AllowN(ctx, "client", hourly, 0) // read, take nothing
	fmt.Println("hourly remaining in the main store:", d.Remaining)
	d, _ = perSecond.AllowN(ctx, "client", burst, 0)
	fmt.Println("per-second remaining in the per-second store:", d.Remaining)
	// Output:
	// request 1: per-second allowed true, hourly allowed true
	// request 2: per-second allowed false, hourly allowed true
	// hourly remaining in the main store: 99
	// per-second remaining in the per-second store: 0
}

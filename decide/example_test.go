package decide_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// A front end turns a request into checks, one per rule that applies, and
// the Result back into its protocol. Here a login endpoint limits each
// address and each account; the third attempt on the account is denied, and
// the address rule is charged nothing for it.
func ExampleEngine_Decide() {
	engine, err := decide.New(memory.New(), decide.Options{})
	if err != nil {
		panic(err)
	}
	perAddress, perAccount := floodgate.PerMinute(10), floodgate.PerMinute(2)
	for range 3 {
		res := engine.Decide(context.Background(), []decide.Check{
			{Rule: "per-address", Key: decide.StoreKey("", "per-address", "203.0.113.7"), Limit: perAddress},
			{Rule: "per-account", Key: decide.StoreKey("", "per-account", "alice"), Limit: perAccount, Failure: decide.FailClosed},
		})
		most := res.Outcomes[res.Deciding]
		fmt.Println(res.Verdict, res.Deciding, most.Decision.Remaining, res.Outcomes[0].Decision.Remaining)
	}
	// Output:
	// admitted 1 1 9
	// admitted 1 0 8
	// denied 1 0 8
}

// StoreKey namespaces a caller's key by rule, so rules never share state
// whatever bytes the keys hold.
func ExampleStoreKey() {
	fmt.Println(decide.StoreKey("", "login", "user-42"))
	fmt.Println(decide.StoreKey("app:", "a|b", "c"))
	// Output:
	// login|user-42
	// app:a\|b|c
}

// LocalLimit is what one of four instances enforces alone while the store
// is unavailable, under FailLocal with a LocalShare of 1/4.
func ExampleLocalLimit() {
	for _, l := range []floodgate.Limit{
		floodgate.PerMinute(100),
		floodgate.PerMinute(2),
		floodgate.NewTokenBucket(100, 10, time.Second),
	} {
		local, err := decide.LocalLimit(l, 1.0/4)
		if err != nil {
			panic(err)
		}
		fmt.Println(local)
	}
	// Output:
	// 25 per 1m0s (sliding_window_log)
	// 1 per 1m0s (sliding_window_log)
	// capacity 25, 10 per 4s (token_bucket)
}

package decide_test

import (
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate/internal/storekey"

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
			{Rule: "per-address", Key: storekey.Of("", "per-address", "203.0.113.7"), Limit: perAddress},
			{Rule: "per-account", Key: storekey.Of("", "per-account", "alice"), Limit: perAccount, Failure: decide.FailClosed},
		})
		most := res.Outcomes[res.Deciding]
		fmt.Println(res.Verdict, res.Deciding, most.Decision.Remaining, res.Outcomes[0].Decision.Remaining)
	}
	// Output:
	// admitted 1 1 9
	// admitted 1 0 8
	// denied 1 0 8
}

// Package limitcheck holds the checks every store and the decision engine
// make before they touch state: a valid limit, and a cost that can ever fit
// it.
//
// It is a helper room: it imports the root package only.
package limitcheck

import (
	"fmt"

	"github.com/floodgate-rl/floodgate"
)

// Allow validates limit and cost n together, as every store does before it
// touches state, and returns the Decision to report alongside the error
// (Limit set when the limit itself is valid).
func Allow(limit floodgate.Limit, n int64) (floodgate.Decision, error) {
	if err := limit.Validate(); err != nil {
		return floodgate.Decision{}, err
	}
	if err := Cost(limit, n); err != nil {
		return floodgate.Decision{Limit: limit.Quota}, err
	}
	return floodgate.Decision{}, nil
}

// Cost returns nil if a request of cost n can ever fit limit l, and
// otherwise an error matching floodgate.ErrInvalidCost (n < 1) or
// floodgate.ErrCostExceedsLimit (n > Quota).
func Cost(l floodgate.Limit, n int64) error {
	if n < 1 {
		return fmt.Errorf("%w: cost %d must be at least 1", floodgate.ErrInvalidCost, n)
	}
	if n > l.Quota {
		return fmt.Errorf("%w: cost %d is more than the limit's quota %d, so it can never be admitted", floodgate.ErrCostExceedsLimit, n, l.Quota)
	}
	return nil
}

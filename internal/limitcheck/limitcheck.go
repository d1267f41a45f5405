// Package limitcheck holds the checks every store and the decision engine
// make before they touch state: a valid limit, and a cost that can ever fit
// it; and one instance's share of a limit (Share).
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

// Item validates a batch item's limit and cost as Allow does, but for a
// cost of 0, which a batch does not take (floodgate.BatchItem).
func Item(limit floodgate.Limit, n int64) (floodgate.Decision, error) {
	if n == 0 && limit.Validate() == nil {
		return floodgate.Decision{Limit: limit.Quota}, fmt.Errorf("%w: a batch item's cost must be at least 1", floodgate.ErrInvalidCost)
	}
	return Allow(limit, n)
}

// MaxLogCost is the largest cost of one request under a SlidingWindowLog
// limit. The log records one entry per unit of cost in one atomic step (one
// Lua script, which blocks Redis meanwhile), so the cost of one request is
// bounded far below the largest quota (docs/PERFORMANCE.md, "Memory per
// key").
const MaxLogCost = 1 << 16

// Cost returns nil if a request of cost n can ever fit limit l (a cost of
// 0 is a check that takes nothing), and otherwise an error matching
// floodgate.ErrInvalidCost (n < 0, or above MaxLogCost under a
// SlidingWindowLog) or floodgate.ErrCostExceedsLimit (n > Quota).
func Cost(l floodgate.Limit, n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: cost %d must not be negative", floodgate.ErrInvalidCost, n)
	}
	if n > l.Quota {
		return fmt.Errorf("%w: cost %d is more than the limit's quota %d, so it can never be admitted", floodgate.ErrCostExceedsLimit, n, l.Quota)
	}
	if n > MaxLogCost && l.Algorithm == floodgate.SlidingWindowLog {
		return fmt.Errorf("%w: cost %d is more than %d, the most a sliding_window_log takes in one request (it records one entry per unit of cost); use token_bucket or sliding_window_counter for large costs", floodgate.ErrInvalidCost, n, MaxLogCost)
	}
	return nil
}

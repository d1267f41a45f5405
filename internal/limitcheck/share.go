package limitcheck

import (
	"fmt"
	"math"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// shareSlack absorbs the binary rounding of shares such as 1/3, so that
// instances: 3 of a limit of 300 is 100, not 99.
const shareSlack = 1e-9

// Share returns the limit one instance enforces alone for l at share
// (above 0, at most 1; instances: N is a share of 1/N), as the engine's
// local fallback does. It is what a share means for each algorithm:
//
//   - windowed algorithms: the quota times share, rounded down, over the
//     same window;
//   - token bucket: the capacity times share, rounded down, refilled at the
//     rate times share: the same window with the refill times share when
//     that is a whole number of tokens, otherwise the whole refill over the
//     window divided by share, rounded up to the microsecond.
//
// Rounding is down, so N instances at 1/N never admit more than the shared
// limit together, except that a quota or capacity is never below 1 (a
// limit of 2 over 4 instances is 1 each). A share of 1 is l itself. The
// error names the share, or the limit the share would make invalid.
func Share(l floodgate.Limit, share float64) (floodgate.Limit, error) {
	if !(share > 0 && share <= 1) { // also rejects NaN
		return l, fmt.Errorf("local share %v must be above 0 and at most 1", share)
	}
	if err := l.Validate(); err != nil {
		return l, err
	}
	if share == 1 {
		return l, nil
	}
	out := l
	out.Quota = max(1, int64(math.Floor(float64(l.Quota)*share+shareSlack)))
	if l.Algorithm == floodgate.TokenBucket {
		refill := fixedpoint.Refill(l.Quota, l.Refill)
		scaled := float64(refill) * share
		if whole := math.Round(scaled); whole >= 1 && math.Abs(scaled-whole) <= shareSlack*whole {
			out.Refill = int64(whole)
		} else {
			window := float64(l.Window.Microseconds()) / share
			if window > math.MaxInt64/float64(time.Microsecond) {
				return l, fmt.Errorf("local share %v of %s would refill %d tokens per more than %s; use a larger share", share, l, refill, time.Duration(math.MaxInt64))
			}
			out.Refill = refill
			out.Window = time.Duration(math.Ceil(window-1e-6)) * time.Microsecond // 1e-6: the rounding of 1/3
		}
	}
	if err := out.Validate(); err != nil {
		return l, fmt.Errorf("local share %v of %s: %w", share, l, err)
	}
	return out, nil
}

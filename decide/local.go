package decide

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// shareSlack absorbs the binary rounding of shares such as 1/3, so that
// instances: 3 of a limit of 300 is 100, not 99.
const shareSlack = 1e-9

// LocalLimit returns the limit one instance enforces alone for l under
// [FailLocal] at share (above 0, at most 1; instances: N is a share of
// 1/N). It is what a share means for each algorithm:
//
//   - windowed algorithms: the quota times share, rounded down, over the
//     same window;
//   - token bucket: the capacity times share, rounded down, refilled at the
//     rate times share: the same window with the refill times share when
//     that is a whole number of tokens, otherwise the whole refill over the
//     window divided by share, rounded up to the microsecond.
//
// Rounding is down (slower), so N instances at 1/N never admit more than
// the shared limit together, except that a quota or capacity is never
// below 1: a limit of 2 over 4 instances is 1 each, 4 in all. A share of 1
// is l itself. The error names the share, or the limit the share would
// make invalid (a refill period stretched past the longest window).
func LocalLimit(l floodgate.Limit, share float64) (floodgate.Limit, error) {
	if !(share > 0 && share <= 1) { // also rejects NaN
		return l, fmt.Errorf("decide: local share %v must be above 0 and at most 1", share)
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
				return l, fmt.Errorf("decide: local share %v of %s would refill %d tokens per more than %s; use a larger share", share, l, refill, time.Duration(math.MaxInt64))
			}
			out.Refill = refill
			out.Window = time.Duration(math.Ceil(window-1e-6)) * time.Microsecond // 1e-6: the rounding of 1/3
		}
	}
	if err := out.Validate(); err != nil {
		return l, fmt.Errorf("decide: local share %v of %s: %w", share, l, err)
	}
	return out, nil
}

// LocalLimit returns the limit this instance enforces alone for c under
// FailLocal while the store is unavailable: [LocalLimit] of c's Limit at its
// LocalShare (0: the whole limit). Front ends name it in a locally decided
// denial, whose Decision counts against it.
func (c *Check) LocalLimit() (floodgate.Limit, error) { return LocalLimit(c.Limit, c.localShare()) }

// CountedLimit returns the limit that o, c's outcome, counted against, the
// one a denial names: c's local limit ([Check.LocalLimit]) when o.Local
// (this instance decided alone, at its share), otherwise c's Limit.
func (c *Check) CountedLimit(o *Outcome) floodgate.Limit {
	if o.Local {
		if l, err := c.LocalLimit(); err == nil { // valid: it decided
			return l
		}
	}
	return c.Limit
}

// localShare returns the check's share for FailLocal: LocalShare, or 1.
func (c *Check) localShare() float64 {
	if c.LocalShare == 0 {
		return 1
	}
	return c.LocalShare
}

// fallback decides locally every enforced FailLocal check the store could
// not decide: together, all or nothing, in the fallback store. Their
// outcomes keep the outage's error and say Local.
func (e *Engine) fallback(ctx context.Context, checks []Check, out []Outcome) {
	var itemsBuf [8]floodgate.BatchItem
	var idxBuf [8]int
	items, idx := itemsBuf[:0], idxBuf[:0]
	for i := range checks {
		c, o := &checks[i], &out[i]
		if c.Shadow || c.Failure != FailLocal || c.Err != nil && c.Key == "" || o.Verdict != Unavailable {
			continue
		}
		l, err := LocalLimit(c.Limit, c.localShare())
		if err != nil {
			o.set(Outcome{Verdict: Invalid, Err: fmt.Errorf("rule %q: %w", c.Rule, err)})
			continue
		}
		if c.CheckOnly {
			// It takes nothing, so it is not part of the all or nothing:
			// a look at the local state, as allowOne looks at the store's.
			outage := o.Err
			d, err := e.local().AllowN(ctx, c.Key, l, 0)
			setOutcome(o, d, err)
			if o.Verdict == Admitted || o.Verdict == Denied {
				o.Err, o.Local = outage, true
			}
			continue
		}
		if c.cost() > l.Quota {
			// Never admissible here, although it is under the shared limit:
			// denied until the store can decide it.
			o.Verdict, o.Decided, o.Local = Denied, true, true
			o.Decision = floodgate.Decision{Limit: l.Quota, RetryAfter: e.unavailable}
			continue
		}
		items = append(items, floodgate.BatchItem{Key: c.Key, Limit: l, Cost: c.cost()})
		idx = append(idx, i)
	}
	if len(items) == 0 {
		return
	}
	var resultsBuf [8]floodgate.BatchResult
	results := resultsBuf[:0]
	for range items {
		results = append(results, floodgate.BatchResult{})
	}
	e.local().AllowBatch(ctx, items, results)
	denied := false
	for j, i := range idx {
		o := &out[i]
		outage := o.Err
		setOutcome(o, results[j].Decision, results[j].Err)
		if o.Verdict == Admitted || o.Verdict == Denied {
			o.Err, o.Local = outage, true
		}
		denied = denied || o.Verdict == Denied
	}
	if denied { // the batch took nothing
		for _, i := range idx {
			out[i].giveBack(checks[i].cost())
		}
	}
}

// giveBackTo returns the store holding c's cost and the limit it was taken
// under: the fallback store's local limit for an outcome decided locally.
func (e *Engine) giveBackTo(c *Check, o *Outcome) (floodgate.Store, floodgate.Limit) {
	if o.Local {
		l, _ := LocalLimit(c.Limit, c.localShare()) // it was valid when taken
		return e.local(), l
	}
	return e.store, c.Limit
}

package decide

import (
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

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
		l, err := limitcheck.Share(c.Limit, c.localShare())
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
				o.Err, o.Local, o.Limit = outage, true, l
			}
			continue
		}
		if c.cost() > l.Quota {
			// Never admissible here, although it is under the shared limit:
			// denied until the store can decide it.
			o.Verdict, o.Decided, o.Local, o.Limit = Denied, true, true, l
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
			o.Err, o.Local, o.Limit = outage, true, items[j].Limit
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
		return e.local(), o.Limit
	}
	return e.store, c.Limit
}

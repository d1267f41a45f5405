package floodgate

import (
	"context"
	"errors"
	"fmt"
)

// BatchItem is one check of a batch decision: a request of cost Cost against
// Limit for Key.
type BatchItem struct {
	// Key is the key the check counts under.
	Key string
	// Limit is the check's limit.
	Limit Limit
	// Cost is the request's cost, between 1 and Limit.Quota (a check that
	// takes nothing, cost 0, is AllowN's, not a batch's).
	Cost int64
}

// BatchResult is the outcome of one [BatchItem]: its Decision, or the error
// that kept the store from deciding it.
type BatchResult struct {
	// Decision is the store's decision, when Err is nil.
	Decision Decision
	// Err is what kept the store from deciding the item.
	Err error
	// RefundErr is set when the item was admitted, another item was
	// denied, and the store could not give this item's cost back (a Redis
	// Cluster batch across slots whose refund failed): the quota stays
	// taken. Decision is still the item's.
	RefundErr error
}

// BatchStore is a [Store] that decides the checks of one request together,
// all or nothing, in as few round trips as its backend allows. Front ends
// detect it with a type assertion and fall back to one AllowN per check (and
// RefundN when one denies) for stores without it; [AllowAll] does the same
// for a program's own checks.
type BatchStore interface {
	Store
	// AllowBatch decides items as one request and writes item i's outcome to
	// results[i]; len(results) must be at least len(items).
	//
	//   - If every item is admitted, every item is recorded.
	//   - If any item is denied (Allowed false and no error), no item is
	//     recorded: the whole request consumed nothing. The Decision of an
	//     item that did fit is the one its admission would have given
	//     (Allowed true), although nothing was taken.
	//   - If an item fails (an error matching ErrInvalidLimit, ErrInvalidCost,
	//     ErrCostExceedsLimit or ErrStoreUnavailable, or another store error)
	//     and none is denied, the items that were admitted stay recorded: the
	//     caller decides what the failure means and gives them back with
	//     RefundN if it rejects the request.
	//
	// Stores make this atomic wherever they can, so that no other request
	// sees some items taken and others not: the memory store always, the
	// Redis store when the items' keys share a hash slot. The same key may
	// appear more than once: its items are decided in order, each seeing
	// the ones before it.
	AllowBatch(ctx context.Context, items []BatchItem, results []BatchResult)
}

// AllowAll decides items as one request, all or nothing: it admits only if
// every item fits, and a request it does not admit takes nothing from any
// item, so a job that needs a global and a per-tenant limit at once never
// spends the global quota on a request the tenant's limit denies.
//
// With a [BatchStore] it is one AllowBatch call, atomic wherever the store
// is. With another store it calls AllowN for each item in turn and, when
// one denies or fails, gives back with RefundN what the others took: for
// that moment a concurrent request may find those units taken.
//
// The Decision is the deciding item's: when denied, the denying item with
// the longest RetryAfter (by then every denying item fits, unless others
// take the quota meanwhile); when admitted, the item with the least
// Remaining, then the longest ResetAfter. An error names the item (its
// index and key) and wraps the store's, as AllowN's does; an item with an
// invalid limit or a cost outside 1 to its quota is refused before the
// store is asked. A denial whose give-back failed comes with that error:
// the units stay taken until the window moves on.
//
// It is safe for concurrent use, as the store is.
func AllowAll(ctx context.Context, s Store, items ...BatchItem) (Decision, error) {
	return allowAll(ctx, "AllowAll", s, items)
}

// allowAll is AllowAll, its errors naming op.
func allowAll(ctx context.Context, op string, s Store, items []BatchItem) (Decision, error) {
	if d, err := checkItems(op, s, items); err != nil {
		return d, err
	}
	results := make([]BatchResult, len(items))
	asked := len(items)
	bs, batch := s.(BatchStore)
	if batch {
		bs.AllowBatch(ctx, items, results)
	} else {
		for i, it := range items {
			d, err := s.AllowN(ctx, it.Key, it.Limit, it.Cost)
			results[i] = BatchResult{Decision: d, Err: err}
			if err != nil {
				asked = i + 1 // a failure rejects the request: ask no further
				break
			}
		}
	}
	return conclude(ctx, op, s, items, results[:asked], batch)
}

// checkItems refuses, before the store is asked, a request that could
// never be decided.
func checkItems(op string, s Store, items []BatchItem) (Decision, error) {
	if s == nil {
		return Decision{}, fmt.Errorf("floodgate: %s: the store is nil", op)
	}
	if len(items) == 0 {
		return Decision{}, fmt.Errorf("floodgate: %s: no items: pass at least one BatchItem", op)
	}
	for i, it := range items {
		if err := it.Limit.Validate(); err != nil {
			return Decision{}, itemError(op, i, it.Key, err)
		}
		var err error
		switch {
		case it.Cost < 1:
			err = fmt.Errorf("%w: cost %d must be at least 1 (AllowN with a cost of 0 reads a key)", ErrInvalidCost, it.Cost)
		case it.Cost > it.Limit.Quota:
			err = fmt.Errorf("%w: cost %d is more than the limit's quota %d, so it can never be admitted", ErrCostExceedsLimit, it.Cost, it.Limit.Quota)
		}
		if err != nil {
			return Decision{Limit: it.Limit.Quota}, itemError(op, i, it.Key, err)
		}
	}
	return Decision{}, nil
}

// conclude returns the outcome of a request whose items were decided as
// results says (the asked ones: after a failure, a store without batches
// was asked no further), having given back what a request that is not
// admitted took. batch says the results are an AllowBatch's, which took
// nothing when an item denied.
func conclude(ctx context.Context, op string, s Store, items []BatchItem, results []BatchResult, batch bool) (Decision, error) {
	failed, denied, deciding := -1, -1, -1
	for i := range results {
		r := &results[i]
		switch {
		case r.Err != nil:
			if failed < 0 {
				failed = i
			}
		case !r.Decision.Allowed:
			if denied < 0 || r.Decision.RetryAfter > results[denied].Decision.RetryAfter {
				denied = i
			}
		case deciding < 0 || r.Decision.Remaining < results[deciding].Decision.Remaining ||
			r.Decision.Remaining == results[deciding].Decision.Remaining && r.Decision.ResetAfter > results[deciding].Decision.ResetAfter:
			deciding = i
		}
	}
	if failed < 0 && denied < 0 {
		return results[deciding].Decision, nil
	}
	// Give back what the request took: everything admitted, but for a batch
	// that denied, which took nothing (where its own refund failed, the
	// units stay taken: RefundErr).
	var errs []error
	if failed >= 0 {
		errs = append(errs, itemError(op, failed, items[failed].Key, results[failed].Err))
	}
	refundCtx := context.WithoutCancel(ctx) // give back even if the caller has gone
	for i := range results {
		r := &results[i]
		switch {
		case r.RefundErr != nil:
			errs = append(errs, fmt.Errorf("floodgate: %s: item %d (key %q): giving its cost back failed: %w", op, i, items[i].Key, r.RefundErr))
		case r.Err == nil && r.Decision.Allowed && (!batch || denied < 0):
			if err := s.RefundN(refundCtx, items[i].Key, items[i].Limit, items[i].Cost); err != nil {
				errs = append(errs, fmt.Errorf("floodgate: %s: item %d (key %q): giving its cost back failed: %w", op, i, items[i].Key, err))
			}
		}
	}
	if failed >= 0 {
		return results[failed].Decision, errors.Join(errs...)
	}
	return results[denied].Decision, errors.Join(errs...)
}

// itemError is err, of item i (keyed key), in op.
func itemError(op string, i int, key string, err error) error {
	return fmt.Errorf("floodgate: %s: item %d (key %q): %w", op, i, key, err)
}

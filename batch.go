package floodgate

import "context"

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
// RefundN when one denies) for stores without it.
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

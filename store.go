package floodgate

import (
	"context"
	"time"
)

// Decision is the outcome of one rate-limit check.
type Decision struct {
	// Allowed reports whether the request was admitted. A denied request
	// consumed nothing.
	Allowed bool
	// Limit is the limit's Quota: requests per window, or bucket capacity.
	Limit int64
	// Remaining is how many more requests of cost 1 would be admitted right
	// now, after this one. Never negative.
	Remaining int64
	// RetryAfter is 0 when Allowed. Otherwise it is the exact time until a
	// retry of the same cost would be admitted, if nothing else is admitted
	// meanwhile: for the sliding-window log, the moment enough of the oldest
	// entries leave the window.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is fully replenished (the whole
	// quota available again) if no further request is admitted.
	ResetAfter time.Duration
}

// Store decides rate limits for keys. Implementations: the memory store
// (in-process) and the Redis store (shared between instances).
//
// Keys are arbitrary byte strings (an IP, an API key, a user id). A key
// holds one limit's state: limits with the same algorithm and key share
// it, so a changed Quota applies to the existing history, and two limits
// meant to count apart need keys of their own ("per-minute|user-42"). The
// same key under limits of different algorithms is kept apart.
//
// That history lasts until the key is fully replenished under the limit of
// its last write (an admitted request or a refund; a denied request writes
// nothing): then the key reads as never seen under any limit. The memory
// store forgets it at that microsecond. Redis expires it by a TTL rounded
// up to the millisecond on the Redis server's own clock (which the Redis
// store's Config.Clock does not move), so for up to about two milliseconds
// a decision under another limit may still see it. Under the limit that
// wrote it, both stores decide the same either way.
//
// All methods are safe for concurrent use. A store returns an error matching
// ErrInvalidLimit, ErrInvalidCost or ErrCostExceedsLimit for bad arguments
// (with Decision.Limit set and Allowed false), and one matching
// ErrStoreUnavailable when it cannot reach its backend in time.
type Store interface {
	// Allow is AllowN with a cost of 1.
	Allow(ctx context.Context, key string, limit Limit) (Decision, error)
	// AllowN decides whether a request of cost n fits the limit for key, and
	// if so records it. n must be between 0 and limit.Quota, and at most
	// 65,536 for a SlidingWindowLog, which records one entry per unit of
	// cost (a larger n is ErrInvalidCost). A cost of 0 takes nothing
	// (Envoy's hits_addend 0): it is always allowed, reports the key's
	// Remaining and ResetAfter, and changes no state.
	AllowN(ctx context.Context, key string, limit Limit, n int64) (Decision, error)
	// RefundN gives back n units of quota that an admitted request of cost n
	// took from key moments ago, as if it had not been made, so that a
	// request another rule denies consumes nothing. It never raises a key
	// above its full quota: the log drops its n newest entries, the bucket
	// gets n tokens back, and the window counters are decreased in the
	// current window (a refund after the window moved on changes nothing).
	// An ErrStoreUnavailable from a remote store does not say the refund was
	// not made, so a caller that retries may give back twice.
	RefundN(ctx context.Context, key string, limit Limit, n int64) error
	// Reset clears the state of key under limit's algorithm: the whole quota
	// is available again.
	Reset(ctx context.Context, key string, limit Limit) error
}

// Clock tells the current time. Stores and front ends take one so tests can
// move time by hand (clocktest.Manual); when none is given they read the
// system clock.
type Clock interface {
	Now() time.Time
}

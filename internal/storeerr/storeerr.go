// Package storeerr reads a store's error as every part of floodgate reads
// it: the caller's invalid input, an outage (which a rule's failure mode
// answers), or anything else (a store error, which never admits). The
// decision engine classifies its outcomes by it, and the store API's wire
// format its error kinds, so a remote store's client and the server agree
// with the engine.
package storeerr

import (
	"context"
	"errors"

	"github.com/floodgate-rl/floodgate"
)

// Invalid reports whether err is the caller's: an invalid limit or cost,
// or a cost above the quota.
func Invalid(err error) bool {
	return errors.Is(err, floodgate.ErrInvalidLimit) || errors.Is(err, floodgate.ErrInvalidCost) ||
		errors.Is(err, floodgate.ErrCostExceedsLimit)
}

// Outage reports whether err says the store could not decide in time: its
// ErrStoreUnavailable, or a context's deadline or cancellation.
func Outage(err error) bool {
	return errors.Is(err, floodgate.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled)
}

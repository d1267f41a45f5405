package remotestore_test

import (
	"errors"

	"github.com/floodgate-rl/floodgate"
)

// isKind reports whether err matches one of the store's sentinel errors.
func isKind(err error) bool {
	for _, s := range []error{floodgate.ErrInvalidLimit, floodgate.ErrInvalidCost, floodgate.ErrCostExceedsLimit, floodgate.ErrStoreUnavailable} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

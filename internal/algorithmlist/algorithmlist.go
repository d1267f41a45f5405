// Package algorithmlist lists floodgate's algorithms, for the stores'
// per-algorithm tables (scripts, key suffixes), the tests that run every
// algorithm and the error messages and flag help that name them. The one
// list is the root package's: an Algorithm is valid exactly when its
// MarshalText succeeds, and this package asks it, in order, so that the
// root package's API does not carry the enumeration.
package algorithmlist

import (
	"math"

	"github.com/floodgate-rl/floodgate"
)

// All returns every valid algorithm, in declaration order (the order of
// the constants, from floodgate.SlidingWindowLog).
func All() []floodgate.Algorithm {
	var out []floodgate.Algorithm
	for a := floodgate.Algorithm(1); a < math.MaxUint8; a++ {
		if _, err := a.MarshalText(); err != nil {
			break
		}
		out = append(out, a)
	}
	return out
}

// Names returns every algorithm's configuration name, as
// floodgate.Algorithm.String gives it, in the order of All.
func Names() []string {
	all := All()
	out := make([]string, len(all))
	for i, a := range all {
		out[i] = a.String()
	}
	return out
}

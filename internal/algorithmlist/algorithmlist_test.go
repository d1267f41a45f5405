package algorithmlist

import (
	"slices"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// TestAll: the list is the four constants in declaration order, and each
// name parses back to its algorithm.
func TestAll(t *testing.T) {
	want := []floodgate.Algorithm{floodgate.SlidingWindowLog, floodgate.TokenBucket, floodgate.SlidingWindowCounter, floodgate.FixedWindow}
	if got := All(); !slices.Equal(got, want) {
		t.Fatalf("All() = %v, want %v", got, want)
	}
	names := Names()
	if !slices.Equal(names, []string{"sliding_window_log", "token_bucket", "sliding_window_counter", "fixed_window"}) {
		t.Fatalf("Names() = %q", names)
	}
	for i, n := range names {
		if a, err := floodgate.ParseAlgorithm(n); err != nil || a != want[i] {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", n, a, err, want[i])
		}
	}
}

package loadgen

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestSegment: the goroutines' runs are disjoint, within the keys, and one
// key is shared.
func TestSegment(t *testing.T) {
	p := runtime.GOMAXPROCS(0)
	for _, n := range []int{1, p, 10, 100_000} {
		var next atomic.Int64
		seen := make([]int, n)
		for range p {
			lo, size := Segment(&next, n)
			if size < 1 || lo < 0 || lo+size > n {
				t.Fatalf("n=%d: run [%d, %d) outside the keys", n, lo, lo+size)
			}
			for i := lo; i < lo+size; i++ {
				seen[i]++
			}
		}
		for i, c := range seen {
			if n >= p && c > 1 || n < p && c != p {
				t.Fatalf("n=%d: key %d visited by %d goroutines", n, i, c)
			}
		}
	}
}

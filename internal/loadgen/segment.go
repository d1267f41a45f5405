package loadgen

import (
	"runtime"
	"sync/atomic"
)

// Segment returns the run of n keys that the next goroutine of a
// testing.B.RunParallel visits (next counts the goroutines): goroutines take
// disjoint runs, so they never meet on one key's lock (as callers on many
// keys rarely do; goroutines that started apart on one sequence fell into
// step and waited on each other), and each still reads its keys in order.
// Fewer keys than goroutines are shared by all.
func Segment(next *atomic.Int64, n int) (lo, size int) {
	p := runtime.GOMAXPROCS(0)
	if n < p {
		return 0, n
	}
	g := int(next.Add(1)-1) % p
	return g * n / p, n / p
}

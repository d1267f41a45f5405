package bench

import (
	"testing"
)

// BenchmarkMemory compares the in-process contenders (floodgate's memory
// store with the token bucket and the sliding-window log, x/time/rate with
// one limiter per key, sethvargo/go-limiter's memorystore and
// ulule/limiter's memory store), interleaved per workload so each group is
// measured under the same machine conditions. It reports the share of
// decisions that admitted as admitted-%. The driver (cmd/peerbench) runs the
// same benchmarks in rounds and writes docs/PERFORMANCE.md; this is the
// go test way to look at one of them:
//
//	go test -run '^$' -bench 'Memory/100k_keys,_parallel' -benchmem -count 5
func BenchmarkMemory(b *testing.B) {
	for _, w := range MemoryWorkloads {
		for _, c := range MemoryContenders() {
			allow, closeFn := c.New()
			for _, k := range Keys(w.Keys) {
				allow(k)
			}
			var admitted float64
			bench := MemoryBench(allow, w, &admitted)
			b.Run(w.Name+"/"+c.ID, func(b *testing.B) {
				bench(b)
				b.ReportMetric(100*admitted, "admitted-%")
			})
			closeFn()
		}
	}
}

package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// heapFloor is the least heap goal serve keeps the garbage collector at
// (unless GOGC is set). A server's live heap is often small beside what its
// decisions allocate, so at GOGC 100 the collector would run many times a
// second under load, shrinking the idle workers' stacks each time; a large
// heap (the memory store's keys) still grows no more than GOGC 100 allows.
// docs/PERFORMANCE.md ("Envoy RLS against envoyproxy/ratelimit") has the
// measurements.
const heapFloor = 32 << 20

// maxGCPercent bounds the GOGC the floor sets (a live heap of 1.6 MiB).
const maxGCPercent = 2000

// keepHeapFloor sets GOGC, every interval until ctx is done, so that the
// heap goal, live heap × (1 + GOGC/100), is at least floor, and never below
// GOGC 100. It does nothing if the environment sets GOGC: the operator's
// choice stands. GOMEMLIMIT, if set, still bounds the heap.
func keepHeapFloor(ctx context.Context, getenv func(string) string, floor uint64, interval time.Duration) {
	if getenv("GOGC") != "" {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := 100
	for {
		metrics.Read(sample)
		if p := gcPercentFor(sample[0].Value.Uint64(), floor); p != current {
			debug.SetGCPercent(p)
			current = p
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// gcPercentFor returns the GOGC that makes the heap goal of a live heap of
// live bytes at least floor: 100 or more, at most maxGCPercent, in steps of
// 50 so that it changes only when the live heap does.
func gcPercentFor(live, floor uint64) int {
	if live == 0 || live >= floor/2 {
		return 100
	}
	p := int(((floor-live)*100 + live - 1) / live) // rounded up
	p = (p + 49) / 50 * 50
	return min(max(p, 100), maxGCPercent)
}

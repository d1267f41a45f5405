package statsd

import "runtime"

// RuntimeStats reports the Go runtime's memory and scheduler statistics
// under prefix (such as "ratelimit.go"), with the names and kinds of
// lyft/gostats' runtime statistics, which envoyproxy/ratelimit sends:
// alloc, sys, heapAlloc, heapSys, heapIdle, heapInuse, heapReleased,
// heapObjects, nextGC, lastGC, gcCPUPercent and numGoroutine as gauges;
// totalAlloc, mallocs, frees, pauseTotalNs and numGC as counters (its
// lookups counter is never set, so never sent). It reads
// runtime.ReadMemStats once per flush.
func RuntimeStats(prefix string) Source {
	return func(emit func(string, Kind, uint64)) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		for _, s := range []struct {
			name  string
			kind  Kind
			value uint64
		}{
			{"alloc", Gauge, m.Alloc},
			{"totalAlloc", Counter, m.TotalAlloc},
			{"sys", Gauge, m.Sys},
			{"mallocs", Counter, m.Mallocs},
			{"frees", Counter, m.Frees},
			{"heapAlloc", Gauge, m.HeapAlloc},
			{"heapSys", Gauge, m.HeapSys},
			{"heapIdle", Gauge, m.HeapIdle},
			{"heapInuse", Gauge, m.HeapInuse},
			{"heapReleased", Gauge, m.HeapReleased},
			{"heapObjects", Gauge, m.HeapObjects},
			{"nextGC", Gauge, m.NextGC},
			{"lastGC", Gauge, m.LastGC},
			{"pauseTotalNs", Counter, m.PauseTotalNs},
			{"numGC", Counter, uint64(m.NumGC)},
			{"gcCPUPercent", Gauge, uint64(m.GCCPUFraction * 100)},
			{"numGoroutine", Gauge, uint64(runtime.NumGoroutine())},
		} {
			emit(prefix+"."+s.name, s.kind, s.value)
		}
	}
}

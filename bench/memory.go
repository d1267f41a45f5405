package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sethvargo "github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
	"github.com/floodgate-rl/floodgate/memory"
)

// MemQuota is the per-second limit of the in-process comparison: high
// enough that 100,000 keys stay admitted at tens of millions of decisions
// per second (a few hundred per key per second), while one hot key admits
// MemQuota per second and denies the rest.
const MemQuota = 10_000

// A MemoryContender is an in-process limiter.
type MemoryContender struct {
	// ID names it in flags: fg-tb, fg-swl, x-time-rate, sethvargo, ulule.
	ID string
	// Name names it in tables and charts.
	Name string
	// New returns a fresh limiter: allow decides one request for key, and
	// close releases it.
	New func() (allow func(key string) bool, close func())
}

// MemoryContenders lists the in-process contenders, floodgate first.
func MemoryContenders() []MemoryContender {
	ctx := context.Background()
	return []MemoryContender{
		{ID: "fg-tb", Name: "floodgate memory, token bucket", New: func() (func(string) bool, func()) {
			s, l := memory.New(), floodgate.NewTokenBucket(MemQuota, MemQuota, time.Second)
			return func(key string) bool { d, _ := s.Allow(ctx, key, l); return d.Allowed }, func() {}
		}},
		{ID: "fg-swl", Name: "floodgate memory, sliding-window log", New: func() (func(string) bool, func()) {
			s, l := memory.New(), floodgate.NewLimit(floodgate.SlidingWindowLog, MemQuota, time.Second)
			return func(key string) bool { d, _ := s.Allow(ctx, key, l); return d.Allowed }, func() {}
		}},
		{ID: "x-time-rate", Name: "x/time/rate, one per key in a sync.Map", New: func() (func(string) bool, func()) {
			// One limiter per key in a map, the way it is used for per-key
			// limits; a sync.Map keeps reads lock-free.
			var m sync.Map
			return func(key string) bool {
				l, ok := m.Load(key)
				if !ok {
					l, _ = m.LoadOrStore(key, rate.NewLimiter(MemQuota, MemQuota))
				}
				return l.(*rate.Limiter).Allow()
			}, func() {}
		}},
		{ID: "sethvargo", Name: "sethvargo/go-limiter memorystore", New: func() (func(string) bool, func()) {
			s, err := sethvargo.New(&sethvargo.Config{Tokens: MemQuota, Interval: time.Second})
			if err != nil {
				panic(err) // only for a nil or invalid config, which this is not
			}
			return func(key string) bool { _, _, _, ok, _ := s.Take(ctx, key); return ok }, func() { _ = s.Close(ctx) }
		}},
		{ID: "ulule", Name: "ulule/limiter memory store", New: func() (func(string) bool, func()) {
			l := ulule.New(ululememory.NewStore(), ulule.Rate{Period: time.Second, Limit: MemQuota})
			return func(key string) bool { c, _ := l.Get(ctx, key); return !c.Reached }, func() {}
		}},
	}
}

// MemoryWorkload is one in-process workload: requests over Keys distinct
// keys (cycled through, each goroutine from its own offset), from one
// goroutine or from GOMAXPROCS.
type MemoryWorkload struct {
	Name     string
	Keys     int
	Parallel bool
}

// MemoryWorkloads lists the in-process workloads, the target's first.
var MemoryWorkloads = []MemoryWorkload{
	{"100k keys, parallel", 100_000, true},
	{"hot key, parallel", 1, true},
	{"100k keys, serial", 100_000, false},
	{"hot key, serial", 1, false},
}

// MemoryBench returns the benchmark of allow on w; allow must already have
// seen every key (so every key has state). After each call of the
// benchmark function, *allowed holds the share of its decisions that
// admitted.
func MemoryBench(allow func(string) bool, w MemoryWorkload, allowed *float64) func(*testing.B) {
	keys := Keys(w.Keys)
	n := len(keys)
	return func(b *testing.B) {
		b.ReportAllocs()
		var admitted atomic.Int64
		defer func() {
			if b.N > 0 {
				*allowed = float64(admitted.Load()) / float64(b.N)
			}
		}()
		if !w.Parallel {
			ok := int64(0)
			i := 0
			for b.Loop() {
				if allow(keys[i%n]) {
					ok++
				}
				i++
			}
			admitted.Store(ok)
			return
		}
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			lo, size := loadgen.Segment(&next, n)
			i, ok := 0, int64(0)
			for pb.Next() {
				if allow(keys[lo+i%size]) {
					ok++
				}
				i++
			}
			admitted.Add(ok)
		})
	}
}

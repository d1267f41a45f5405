package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
)

// A limiter is one contender: Allow decides one request for key.
type limiter interface {
	Allow(key string) bool
}

// floodgateMemory is floodgate's embedded store with a token bucket of 100
// per second (the same model as x/time/rate).
type floodgateMemory struct {
	store *memory.Store
	limit floodgate.Limit
}

func newFloodgate(alg floodgate.Algorithm) *floodgateMemory {
	return &floodgateMemory{store: memory.New(), limit: floodgate.NewLimit(alg, 100, time.Second)}
}

func (f *floodgateMemory) Allow(key string) bool {
	d, _ := f.store.Allow(context.Background(), key, f.limit)
	return d.Allowed
}

// xrate is golang.org/x/time/rate with one limiter per key in a map, the
// way it is used for per-key limits; a sync.Map keeps reads lock-free.
type xrate struct{ limiters sync.Map }

func (x *xrate) Allow(key string) bool {
	l, ok := x.limiters.Load(key)
	if !ok {
		l, _ = x.limiters.LoadOrStore(key, rate.NewLimiter(100, 100))
	}
	return l.(*rate.Limiter).Allow()
}

func keys(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = "user-" + strconv.Itoa(i)
	}
	return k
}

// BenchmarkMemory interleaves the contenders per workload, so each pair is
// measured under the same machine conditions: one hot key (mostly denied)
// and 100k keys (mostly admitted), serial and parallel.
func BenchmarkMemory(b *testing.B) {
	contenders := []struct {
		name string
		make func() limiter
	}{
		{"floodgate-token-bucket", func() limiter { return newFloodgate(floodgate.TokenBucket) }},
		{"floodgate-sliding-log", func() limiter { return newFloodgate(floodgate.SlidingWindowLog) }},
		{"x-time-rate", func() limiter { return &xrate{} }},
	}
	for _, spread := range []struct {
		name string
		keys []string
	}{{"hot", keys(1)}, {"100k", keys(100_000)}} {
		for _, mode := range []string{"serial", "parallel"} {
			for _, c := range contenders {
				l := c.make()
				for _, k := range spread.keys {
					l.Allow(k)
				}
				n := len(spread.keys)
				b.Run(spread.name+"/"+mode+"/"+c.name, func(b *testing.B) {
					b.ReportAllocs()
					if mode == "serial" {
						i := 0
						for b.Loop() {
							l.Allow(spread.keys[i%n])
							i++
						}
						return
					}
					var next atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						i := int(next.Add(7919))
						for pb.Next() {
							l.Allow(spread.keys[i%n])
							i++
						}
					})
				})
			}
		}
	}
}

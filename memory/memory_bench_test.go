package memory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
)

// benchKeys returns n distinct keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkAllow measures one decision on the memory store for each
// algorithm: one hot key (mostly denied) and 100k keys (mostly admitted),
// serial and parallel. Run with:
//
//	go test ./memory -run '^$' -bench . -benchmem
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	for _, alg := range floodgate.Algorithms() {
		limit := floodgate.NewLimit(alg, 100, time.Minute)
		for _, spread := range []struct {
			name string
			keys []string
		}{{"hot", benchKeys(1)}, {"100k", benchKeys(100_000)}} {
			s := memory.New()
			for _, k := range spread.keys { // warm: every key has state
				_, _ = s.Allow(ctx, k, limit)
			}
			mask := len(spread.keys)
			b.Run(alg.String()+"/"+spread.name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					_, _ = s.Allow(ctx, spread.keys[i%mask], limit)
					i++
				}
			})
			b.Run(alg.String()+"/"+spread.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919)) // spread goroutines over the keys
					for pb.Next() {
						_, _ = s.Allow(ctx, spread.keys[i%mask], limit)
						i++
					}
				})
			})
		}
	}
}

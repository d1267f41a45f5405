package memory_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
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
	for _, alg := range algorithmlist.All() {
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
					lo, size := loadgen.Segment(&next, len(spread.keys))
					i := 0
					for pb.Next() {
						_, _ = s.Allow(ctx, spread.keys[lo+i%size], limit)
						i++
					}
				})
			})
		}
	}
}

// BenchmarkPeerWorkload is the in-process workload of bench/cmd/peerbench
// for floodgate's two contenders there: 100k keys, each warmed first, with
// 10000 per second per key, visited from GOMAXPROCS goroutines. The keys
// are visited in the order they were first seen (as peerbench does: entries
// allocated in that order are then read sequentially) or shuffled (every
// entry a cache miss). Run with:
//
//	go test ./memory -run '^$' -bench PeerWorkload -benchmem
func BenchmarkPeerWorkload(b *testing.B) {
	ctx := context.Background()
	for _, limit := range []floodgate.Limit{
		floodgate.NewTokenBucket(10_000, 10_000, time.Second),
		floodgate.NewLimit(floodgate.SlidingWindowLog, 10_000, time.Second),
	} {
		for _, order := range []string{"inorder", "shuffled"} {
			s := memory.New()
			for _, k := range benchKeys(100_000) {
				_, _ = s.Allow(ctx, k, limit)
			}
			keys := benchKeys(100_000) // other strings, as a caller's would be
			if order == "shuffled" {
				rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			}
			b.Run(limit.Algorithm.String()+"/"+order, func(b *testing.B) {
				b.ReportAllocs()
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					lo, size := loadgen.Segment(&next, len(keys)) // as peerbench spreads its goroutines
					i := 0
					for pb.Next() {
						_, _ = s.Allow(ctx, keys[lo+i%size], limit)
						i++
					}
				})
			})
		}
	}
}

// BenchmarkBatch compares one request's three checks (a token bucket, a
// fixed window and a sliding-window counter, 100k keys each) decided by one
// AllowBatch with the same checks as three AllowN calls, refunding the
// admitted ones when one denies, as a front end does for a store without
// batches. "admitted": no check ever denies; "denied": the third check is on
// an exhausted key, so every request is undone. Run with:
//
//	go test ./memory -run '^$' -bench Batch -benchmem
func BenchmarkBatch(b *testing.B) {
	ctx := context.Background()
	const huge = 60_000_000 // per minute, one per microsecond: never denies
	rules := []floodgate.Limit{
		floodgate.NewLimit(floodgate.TokenBucket, huge, time.Minute),
		floodgate.NewLimit(floodgate.FixedWindow, huge, time.Minute),
		floodgate.NewLimit(floodgate.SlidingWindowCounter, huge, time.Minute),
	}
	keys := benchKeys(100_000)
	for _, outcome := range []string{"admitted", "denied"} {
		s := memory.New()
		for _, k := range keys {
			for _, l := range rules {
				_, _ = s.Allow(ctx, k, l)
			}
		}
		third := func(i int) (string, floodgate.Limit) { return keys[(i+2)%len(keys)], rules[2] }
		if outcome == "denied" {
			hot := floodgate.NewLimit(floodgate.FixedWindow, 1, time.Hour)
			_, _ = s.Allow(ctx, "hot", hot)
			third = func(int) (string, floodgate.Limit) { return "hot", hot }
		}
		request := func(i int, items []floodgate.BatchItem) {
			items[0] = floodgate.BatchItem{Key: keys[i%len(keys)], Limit: rules[0], Cost: 1}
			items[1] = floodgate.BatchItem{Key: keys[(i+1)%len(keys)], Limit: rules[1], Cost: 1}
			k, l := third(i)
			items[2] = floodgate.BatchItem{Key: k, Limit: l, Cost: 1}
		}
		batch := func(items []floodgate.BatchItem, results []floodgate.BatchResult) {
			s.AllowBatch(ctx, items, results)
		}
		allowN := func(items []floodgate.BatchItem, results []floodgate.BatchResult) {
			denied := false
			for j, it := range items {
				d, err := s.AllowN(ctx, it.Key, it.Limit, it.Cost)
				results[j] = floodgate.BatchResult{Decision: d, Err: err}
				denied = denied || err == nil && !d.Allowed
			}
			if denied {
				for j, it := range items {
					if results[j].Decision.Allowed {
						_ = s.RefundN(ctx, it.Key, it.Limit, it.Cost)
					}
				}
			}
		}
		for _, way := range []struct {
			name   string
			decide func([]floodgate.BatchItem, []floodgate.BatchResult)
		}{{"batch", batch}, {"allowN", allowN}} {
			b.Run(outcome+"/"+way.name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				items, results := make([]floodgate.BatchItem, 3), make([]floodgate.BatchResult, 3)
				i := 0
				for b.Loop() {
					request(i, items)
					way.decide(items, results)
					i++
				}
			})
			b.Run(outcome+"/"+way.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					items, results := make([]floodgate.BatchItem, 3), make([]floodgate.BatchResult, 3)
					lo, size := loadgen.Segment(&next, len(keys))
					i := 0
					for pb.Next() {
						request(lo+i%size, items)
						way.decide(items, results)
						i++
					}
				})
			})
		}
	}
}

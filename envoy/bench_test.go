package envoy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
)

// benchConcurrency is the number of callers in flight, as an Envoy fleet
// with many workers would keep.
const benchConcurrency = 64

// benchKeys is the number of distinct descriptor values the callers cycle
// through.
const benchKeys = 10_000

// BenchmarkShouldRateLimit measures ShouldRateLimit through a real gRPC
// server on loopback (generated client, one connection, HTTP/2 streams) with
// 64 callers in flight, each request one descriptor out of 10,000 values,
// against the memory store, the standalone Redis and the Redis Cluster of
// the harness (`make bench` starts it). Every request is admitted (the
// limit is far above the load), so each one is a full store decision. It
// reports decisions/s and the p50 and p99 latency of a call as the client
// sees it, and the process's CPU time per decision (cpu-us/op; Redis's own
// CPU is not included). The "direct" variant calls the service in-process,
// without gRPC, to show what the transport costs.
func BenchmarkShouldRateLimit(b *testing.B) {
	backends := []struct {
		name  string
		store func(b *testing.B) floodgate.Store
	}{
		{"memory", func(*testing.B) floodgate.Store { return memory.New() }},
		{"standalone", func(b *testing.B) floodgate.Store {
			return redisStore(b, []string{redistest.StandaloneAddr(b)}, nil)
		}},
		{"cluster", func(b *testing.B) floodgate.Store { return redisStore(b, redistest.ClusterAddrs(b), nil) }},
	}
	for _, be := range backends {
		for _, alg := range []string{"fixed_window", "sliding_window_log"} {
			rules := fmt.Sprintf("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: %s}\n", alg)
			reqs := make([]*rlsv3.RateLimitRequest, benchKeys)
			for i := range reqs {
				reqs[i] = request("bench", desc(fmt.Sprintf("user=u%d", i)))
			}
			b.Run(be.name+"/"+alg+"/grpc", func(b *testing.B) {
				e := start(b, be.store(b), false, Options{}, rules)
				runPool(b, func(ctx context.Context, i int) error {
					_, err := e.client.ShouldRateLimit(ctx, reqs[i%benchKeys])
					return err
				})
			})
			{
				b.Run(be.name+"/"+alg+"/direct", func(b *testing.B) {
					rs, err := Parse(Source{Name: "bench.yaml", Data: []byte(rules)})
					if err != nil {
						b.Fatal(err)
					}
					svc, err := New(be.store(b), rs, Options{})
					if err != nil {
						b.Fatal(err)
					}
					runPool(b, func(ctx context.Context, i int) error {
						_, err := svc.ShouldRateLimit(ctx, reqs[i%benchKeys])
						return err
					})
				})
			}
		}
	}
}

// runPool makes b.N calls from benchConcurrency goroutines and reports the
// throughput and latency percentiles.
func runPool(b *testing.B, call func(ctx context.Context, i int) error) {
	ctx := context.Background()
	// Warm up: connections, scripts loaded, the first keys in place.
	for i := range 200 {
		if err := call(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	var (
		next    atomic.Int64
		failure atomic.Pointer[error]
		wg      sync.WaitGroup
		lat     = make([][]time.Duration, benchConcurrency)
	)
	cpu0 := processCPU()
	b.ResetTimer()
	begin := time.Now()
	for w := range benchConcurrency {
		lat[w] = make([]time.Duration, 0, b.N/benchConcurrency+1)
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := call(ctx, i); err != nil {
					failure.CompareAndSwap(nil, &err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	b.StopTimer()
	cpu := processCPU() - cpu0
	if err := failure.Load(); err != nil {
		b.Fatal(*err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p int) float64 { return float64(all[(len(all)-1)*p/100]) / float64(time.Microsecond) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(pct(50), "p50-us")
	b.ReportMetric(pct(99), "p99-us")
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
}

// processCPU returns the CPU time (user and system) this process has used:
// per decision, it is less sensitive than throughput to other work on a
// shared machine. For the gRPC variants it includes the client's share.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

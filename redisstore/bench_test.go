package redisstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkAllow measures decisions per second against the harness's
// standalone server and cluster, per algorithm, at 1, 16, 64 and 256
// concurrent callers, over 10,000 identities picked at random, and a script
// that does nothing (null_script) as the floor of the same path. Time comes
// from Redis (no Clock), as in production. Besides ns/op it reports:
//
//	decisions/s       throughput
//	p50-µs, p99-µs    latency of one Allow call
//	redis-cpu-s/100k  Redis CPU time (used_cpu_user+used_cpu_sys from INFO
//	                  cpu, summed over every node, replicas included) per
//	                  100,000 decisions
//
// The keys it leaves expire within a minute. Run it with:
//
//	go test -run '^$' -bench Allow -benchtime 20000x ./redisstore/
func BenchmarkAllow(b *testing.B) {
	backends := []struct {
		name  string
		mode  Mode
		addrs func(testing.TB) []string
	}{
		{"standalone", ModeStandalone, func(tb testing.TB) []string { return []string{redistest.StandaloneAddr(tb)} }},
		{"cluster", ModeCluster, redistest.ClusterAddrs},
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			// Connected as New connects by default (one pipelined
			// connection per node, DefaultFlushDelay), as users get it.
			s, err := New(Config{Addrs: be.addrs(b), Mode: be.mode, KeyPrefix: uniquePrefix(b), Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			client := s.client
			ids := make([]string, 10000)
			for i := range ids {
				ids[i] = "user-" + strconv.Itoa(i)
			}
			for _, l := range benchLimits() {
				allow := func(ctx context.Context, id string) error {
					_, err := s.Allow(ctx, id, l)
					return err
				}
				for _, conc := range []int{1, 16, 64, 256} {
					b.Run(l.Algorithm.String()+"/conc="+strconv.Itoa(conc), func(b *testing.B) {
						benchCalls(b, client, allow, ids, conc)
					})
				}
			}
			// The floor on the same path: a script that only returns a
			// constant decision. Comparing with it makes figures from noisy
			// machines readable.
			null := rueidis.NewLuaScript("return {1, 0, 0, 0}")
			call := func(ctx context.Context, id string) error {
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return null.Exec(ctx, client, []string{s.Key(id, floodgate.TokenBucket)}, nil).Error()
			}
			b.Run("null_script/conc=64", func(b *testing.B) { benchCalls(b, client, call, ids, 64) })
		})
	}
}

// benchLimits are generous enough that most requests are admitted, as in
// normal traffic, with logs that stay listpacks.
func benchLimits() []floodgate.Limit {
	return []floodgate.Limit{
		floodgate.NewLimit(floodgate.SlidingWindowLog, 100, time.Minute),
		floodgate.NewTokenBucket(100, 100, time.Second),
		floodgate.NewLimit(floodgate.SlidingWindowCounter, 100, time.Minute),
		floodgate.NewLimit(floodgate.FixedWindow, 100, time.Minute),
	}
}

// benchCalls runs b.N calls from conc goroutines on random identities and
// reports the metrics documented on BenchmarkAllow.
func benchCalls(b *testing.B, client rueidis.Client, call func(ctx context.Context, id string) error, ids []string, conc int) {
	ctx := context.Background()
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var failed atomic.Int64
	cpu0 := redisCPU(b, client)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			mine := make([]time.Duration, 0, b.N/conc+1)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := call(ctx, ids[r.IntN(len(ids))]); err != nil {
					failed.Add(1)
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := redisCPU(b, client) - cpu0
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls failed", n, b.N)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(cpu.Seconds()*1e5/float64(b.N), "redis-cpu-s/100k")
}

// redisCPU sums used_cpu_user and used_cpu_sys over every node the client
// knows.
func redisCPU(tb testing.TB, client rueidis.Client) time.Duration {
	var total float64
	for _, node := range client.Nodes() {
		info, err := node.Do(context.Background(), node.B().Info().Section("cpu").Build()).ToString()
		if err != nil {
			tb.Fatalf("INFO cpu: %v", err)
		}
		total += infoFloat(info, "used_cpu_user:") + infoFloat(info, "used_cpu_sys:")
	}
	return time.Duration(total * float64(time.Second))
}

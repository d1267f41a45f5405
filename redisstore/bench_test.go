package redisstore

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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

// benchRTTEnv names the round trip BenchmarkBatch adds for its delayed
// backend.
const benchRTTEnv = "FLOODGATE_BENCH_RTT"

// benchRTT returns $FLOODGATE_BENCH_RTT, or 0 when it is unset.
func benchRTT(tb testing.TB) time.Duration {
	v := os.Getenv(benchRTTEnv)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive duration such as 200us", benchRTTEnv, v)
	}
	return d
}

// BenchmarkBatch compares, on the harness's standalone server and cluster,
// a request of three checks decided as one AllowBatch ("batch3"), the same
// three checks as three AllowN in sequence ("seq3"), and a request of one
// check ("one": one AllowN of one of the three, in turn), at 1 and 16
// concurrent callers. The
// three run interleaved, in rounds of 200 requests per caller, so that
// noise from other work on the machine falls on all of them alike. The
// checks are a sliding-window log per address, a token bucket per user and
// a fixed window per tenant, over 10,000 identities picked at random, so
// nearly all are admitted; on the cluster their keys lie in three slots
// ("3 slots", refunded across slots on a denial) or, with the identities
// under one hash tag, in one ("1 slot"). For each it reports, with the
// variant's name in front:
//
//	p50-µs, p99-µs   latency of one request (all its checks)
//	req/s            requests per second over the variant's rounds
//
// and batch3/one-p50, the ratio of the two p50s. Run it with:
//
//	go test -run '^$' -bench Batch -benchtime 20000x ./redisstore/
//
// With FLOODGATE_BENCH_RTT set to a duration (such as 200us), the
// "standalone-delayed" backend also runs: the standalone server behind
// redistest.DelayProxy, which adds about that round trip, as a network
// between the service and Redis would; loopback's is far shorter than any.
func BenchmarkBatch(b *testing.B) {
	backends := []struct {
		name  string
		mode  Mode
		addrs func(testing.TB) []string
		tags  []bool // whether the identities share a hash tag
	}{
		{"standalone", ModeStandalone, func(tb testing.TB) []string { return []string{redistest.StandaloneAddr(tb)} }, []bool{false}},
		{"standalone-delayed", ModeStandalone, func(tb testing.TB) []string {
			rtt := benchRTT(tb)
			if rtt == 0 {
				tb.Skip("set " + benchRTTEnv + " (such as 200us) to add a network round trip")
			}
			return []string{redistest.DelayProxy(tb, redistest.StandaloneAddr(tb), rtt/2)}
		}, []bool{false}},
		{"cluster", ModeCluster, redistest.ClusterAddrs, []bool{false, true}},
	}
	log := floodgate.NewLimit(floodgate.SlidingWindowLog, 100, time.Minute)
	bucket := floodgate.NewTokenBucket(100, 100, time.Second)
	window := floodgate.NewLimit(floodgate.FixedWindow, 1000, time.Minute)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s, err := New(Config{Addrs: be.addrs(b), Mode: be.mode, KeyPrefix: uniquePrefix(b), Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			for _, tagged := range be.tags {
				// items returns request r's checks.
				items := func(r *rand.Rand) []floodgate.BatchItem {
					id := strconv.Itoa(r.IntN(10000))
					addr, user, tenant := "addr-"+id, "user-"+id, "tenant-"+strconv.Itoa(r.IntN(100))
					if tagged {
						addr, user, tenant = "{"+id+"}addr", "{"+id+"}user", "{"+id+"}tenant"
					}
					return []floodgate.BatchItem{{Key: addr, Limit: log, Cost: 1}, {Key: user, Limit: bucket, Cost: 1}, {Key: tenant, Limit: window, Cost: 1}}
				}
				variants := []struct {
					name string
					call func(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) error
				}{
					{"batch3", func(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) error {
						s.AllowBatch(ctx, items, results)
						return results[0].Err
					}},
					{"seq3", func(ctx context.Context, items []floodgate.BatchItem, _ []floodgate.BatchResult) error {
						for _, it := range items {
							if _, err := s.AllowN(ctx, it.Key, it.Limit, it.Cost); err != nil {
								return err
							}
						}
						return nil
					}},
					{"one", func(ctx context.Context, items []floodgate.BatchItem, _ []floodgate.BatchResult) error {
						_, err := s.AllowN(ctx, items[0].Key, items[0].Limit, items[0].Cost)
						return err
					}},
				}
				layout := ""
				if be.name == "cluster" {
					layout = "3 slots/"
					if tagged {
						layout = "1 slot/"
					}
				}
				for _, conc := range []int{1, 16} {
					b.Run(layout+"conc="+strconv.Itoa(conc), func(b *testing.B) {
						const round = 200 // requests per caller and round
						lat := make([][]time.Duration, len(variants))
						spent := make([]time.Duration, len(variants))
						rs := make([]*rand.Rand, conc)
						for g := range rs {
							rs[g] = rand.New(rand.NewPCG(uint64(g), 3))
						}
						var failed atomic.Int64
						b.ResetTimer()
						for done := 0; done < b.N; done += round * conc {
							for v, variant := range variants {
								mine := make([][]time.Duration, conc)
								start := time.Now()
								var wg sync.WaitGroup
								for g := range conc {
									wg.Go(func() {
										results := make([]floodgate.BatchResult, 3)
										for range round {
											its := items(rs[g])
											if v == len(variants)-1 { // one: one of the checks
												i := rs[g].IntN(len(its))
												its = its[i : i+1]
											}
											t0 := time.Now()
											if err := variant.call(context.Background(), its, results); err != nil {
												failed.Add(1)
											}
											mine[g] = append(mine[g], time.Since(t0))
										}
									})
								}
								wg.Wait()
								spent[v] += time.Since(start)
								lat[v] = append(lat[v], slices.Concat(mine...)...)
							}
						}
						b.StopTimer()
						if n := failed.Load(); n > 0 {
							b.Fatalf("%d calls failed", n)
						}
						p50 := make([]float64, len(variants))
						for v, variant := range variants {
							all := lat[v]
							slices.Sort(all)
							p50[v] = float64(all[len(all)/2].Nanoseconds()) / 1e3
							b.ReportMetric(p50[v], variant.name+"-p50-µs")
							b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, variant.name+"-p99-µs")
							b.ReportMetric(float64(len(all))/spent[v].Seconds(), variant.name+"-req/s")
						}
						b.ReportMetric(p50[0]/p50[2], "batch3/one-p50")
						b.ReportMetric(0, "ns/op")
					})
				}
			}
		})
	}
}

// BenchmarkResilience measures what the in-flight bound and the circuit
// breaker cost on the hot path: Allow (token bucket) against the harness's
// standalone server and cluster at 64 and 256 concurrent callers, through
// stores that differ only in them:
//
//	guarded     the defaults: MaxInFlight 256, BreakerFailures 5
//	off         MaxInFlight -1, BreakerFailures -1: the guard counts
//	            nothing and never opens (its routing remains)
//	unguarded   the store's rueidis client used directly, as before the
//	            guard existed (each call still carries its deadline)
//
// The variants of one cell run one after the other, in 5 rounds
// (round=N in the name), so that noise from other work on the machine
// falls on all of them alike. Metrics as for BenchmarkAllow, and
// client-cpu-µs/op, the CPU time of the whole test process (user and
// system) per decision, which the guard's own work would show in. Run it
// with:
//
//	go test -run '^$' -bench Resilience -benchtime 20000x ./redisstore/
func BenchmarkResilience(b *testing.B) {
	backends := []struct {
		name  string
		mode  Mode
		addrs func(testing.TB) []string
	}{
		{"standalone", ModeStandalone, func(tb testing.TB) []string { return []string{redistest.StandaloneAddr(tb)} }},
		{"cluster", ModeCluster, redistest.ClusterAddrs},
	}
	variants := []struct {
		name     string
		inFlight int
		breaker  int
		raw      bool
	}{
		{"guarded", 0, 0, false},
		{"off", -1, -1, false},
		{"unguarded", 0, 0, true},
	}
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	l := floodgate.NewTokenBucket(100, 100, time.Second)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for _, conc := range []int{64, 256} {
				for round := range 5 {
					for _, v := range variants {
						b.Run("conc="+strconv.Itoa(conc)+"/round="+strconv.Itoa(round+1)+"/"+v.name, func(b *testing.B) {
							s, err := New(Config{Addrs: be.addrs(b), Mode: be.mode, KeyPrefix: uniquePrefix(b), Timeout: time.Second, MaxInFlight: v.inFlight, BreakerFailures: v.breaker})
							if err != nil {
								b.Fatal(err)
							}
							defer s.Close()
							raw := s.guard.conn.Load().client
							if v.raw {
								s.client = raw
							}
							allow := func(ctx context.Context, id string) error {
								_, err := s.Allow(ctx, id, l)
								return err
							}
							cpu0 := processCPU()
							benchCalls(b, raw, allow, ids, conc)
							b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "client-cpu-µs/op")
						})
					}
				}
			}
		})
	}
}

// processCPU returns the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGuardCost measures, without Redis, the work the store adds to
// each call for the in-flight bound and the breaker (entering and leaving
// a node: a place taken and given back, the breaker read), and for the
// deadline (converting ctx's deadline to Redis's clock), from GOMAXPROCS
// goroutines on one node, the worst case for contention, beside the
// context.WithTimeout that every call has always made. Run it with:
//
//	go test -run '^$' -bench GuardCost ./redisstore/
func BenchmarkGuardCost(b *testing.B) {
	s := newStore(Config{}, false)
	m := newMonitor(s.guard, "x", nil)
	c := &connection{}
	n := m.node("x")
	n.offset.Store(1_000_000)
	n.clockOK.Store(true)
	c.topo.Store(&topology{nodes: []*node{n}})
	s.guard.conn.Store(c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.Run("bound+breaker", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				own := s.guard.ownDeadline(ctx)
				if err := s.guard.enter(ctx, n, own); err != nil {
					b.Error(err)
					return
				}
				s.guard.leave(ctx, n, nil, n.abandoned.Load())
			}
		})
	})
	// The yardstick: the timeout every call has always set up.
	b.Run("context.WithTimeout", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, cancel := context.WithTimeout(context.Background(), time.Second)
				cancel()
			}
		})
	})
	b.Run("deadline", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if s.deadline(ctx, 0) == "" {
					b.Error("no deadline")
					return
				}
			}
		})
	})
}

package decide_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// denialCounting counts a store's decisions and, of them, its denials.
type denialCounting struct {
	floodgate.Store
	calls, denied atomic.Int64
}

func (c *denialCounting) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	d, err := c.Store.AllowN(ctx, key, l, n)
	c.calls.Add(1)
	if err == nil && !d.Allowed {
		c.denied.Add(1)
	}
	return d, err
}

// floodWindow and floodQuota are the flooded limit: 100 per second, in
// windows short enough for a run to cross many.
const (
	floodWindow = 100 * time.Millisecond
	floodQuota  = 10
)

// BenchmarkFlood floods one identity, far above its limit, through the
// engine: on the memory store, and on the harness's standalone Redis with
// the over-limit cache off and on, interleaved in one run, by 1 and by 64
// callers. It reports decisions/s, the flood as a multiple of the limit, and
// per window of the limit (which is the denials' retry delay: a fixed
// window denies until its end) the store calls and the denials among them,
// the admissions, and the calls that passed the store's timeout (a closed
// loop of 64 callers on a few cores can starve the goroutines waiting for
// Redis of CPU):
//
//	make redis-up && eval "$(scripts/redis-harness.sh env)"
//	for i in 1 2 3; do go test -run '^$' -bench Flood -benchtime 2s ./decide; done
func BenchmarkFlood(b *testing.B) {
	addr := redistest.StandaloneAddr(b)
	rs, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, KeyPrefix: "bench-flood-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Close)
	limit := floodgate.NewLimit(floodgate.FixedWindow, floodQuota, floodWindow)
	run := 0
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		cache bool
	}{
		{"memory", memory.New(), false},
		{"redis/cache=off", rs, false},
		{"redis/cache=on", rs, true},
	} {
		for _, callers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", tc.name, callers), func(b *testing.B) {
				cs := &denialCounting{Store: tc.store}
				e, err := decide.New(cs, decide.Options{Logger: slog.New(slog.DiscardHandler),
					OverLimitCache: decide.CacheOptions{Disabled: !tc.cache}})
				if err != nil {
					b.Fatal(err)
				}
				run++
				check := []decide.Check{{Rule: "flood", Key: "flood|" + strconv.Itoa(run), Limit: limit, Failure: decide.FailClosed}}
				var admitted, unavailable atomic.Int64
				per := b.N / callers
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						var outcomes [1]decide.Outcome
						for range per {
							r := e.DecideInto(context.Background(), check, outcomes[:])
							switch r.Verdict {
							case decide.Admitted:
								admitted.Add(1)
							case decide.Denied:
							case decide.Unavailable: // a call past the store's timeout
								unavailable.Add(1)
							default:
								b.Errorf("%v: %v", r.Verdict, r.Err())
								return
							}
						}
					})
				}
				wg.Wait()
				end := time.Now()
				b.StopTimer()
				w := floodWindow.Microseconds()
				windows := float64(end.UnixMicro()/w - start.UnixMicro()/w + 1)
				secs := end.Sub(start).Seconds()
				decisions := float64(per * callers)
				b.ReportMetric(decisions/secs, "decisions/s")
				b.ReportMetric(decisions/secs/(floodQuota/floodWindow.Seconds()), "x-limit")
				b.ReportMetric(float64(cs.calls.Load())/windows, "store-calls/window")
				b.ReportMetric(float64(cs.denied.Load())/windows, "store-denials/window")
				b.ReportMetric(float64(admitted.Load())/windows, "admitted/window")
				b.ReportMetric(float64(unavailable.Load())/windows, "timeouts/window")
			})
		}
	}
}

// BenchmarkAdmittedCacheCost measures what the over-limit cache costs a
// request it does not answer: one rule, admitted, on the memory store
// behind a wrapper (the engine keeps the cache off for a bare memory
// store), with the cache off and on, interleaved:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench AdmittedCacheCost ./decide; done
func BenchmarkAdmittedCacheCost(b *testing.B) {
	limit := floodgate.NewLimit(floodgate.FixedWindow, 1<<40, time.Second)
	for _, cache := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%v", cache), func(b *testing.B) {
			e, err := decide.New(remote{memory.New()}, decide.Options{Logger: slog.New(slog.DiscardHandler),
				OverLimitCache: decide.CacheOptions{Disabled: !cache}})
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				check := []decide.Check{{Rule: "api", Key: "api|" + strconv.FormatInt(next.Add(1), 10), Limit: limit}}
				var outcomes [1]decide.Outcome
				for pb.Next() {
					if r := e.DecideInto(context.Background(), check, outcomes[:]); !r.Allowed() {
						b.Fatal(r.Verdict)
					}
				}
			})
		})
	}
}

// remote hides that a store is the memory store, as a remote store would
// look to the engine.
type remote struct{ floodgate.BatchStore }

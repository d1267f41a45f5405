package quota_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/quota"
)

// countingStore is the store every replica shares, counting its calls.
type countingStore struct {
	floodgate.Store
	calls atomic.Int64
	down  atomic.Bool
}

func (s *countingStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return floodgate.Decision{}, fmt.Errorf("%w: stopped for the test", floodgate.ErrStoreUnavailable)
	}
	return s.Store.AllowN(ctx, key, l, n)
}

func (*countingStore) InProcess() bool { return false }

// envoyBucket applies shares as Envoy's rate_limit_quota filter does: a
// token bucket replaced (full) whenever the share changes and carried over
// when it is sent again unchanged; an expired or absent share falls back
// to the no-assignment behaviour, here allow all.
type envoyBucket struct {
	mu            sync.Mutex
	window        time.Duration
	has           bool
	blanket       quota.Blanket
	tokens        float64
	per, burst    int64 // the share in force
	filled        time.Time
	expires       time.Time
	allowed, deny int64
}

func (b *envoyBucket) apply(sh quota.Share) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	switch {
	case sh.Blanket == quota.Abandon:
		b.has = false
		return
	case sh.Blanket != quota.None:
		b.has, b.blanket = true, sh.Blanket
	case !b.has || b.blanket != quota.None || sh.Tokens != b.per || sh.Burst != b.burst:
		b.has, b.blanket, b.per, b.burst = true, quota.None, sh.Tokens, sh.Burst
		b.tokens, b.filled = float64(sh.Burst), now
	}
	b.expires = now.Add(sh.TTL)
}

// request decides one request at now.
func (b *envoyBucket) request(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := true
	switch {
	case !b.has || !now.Before(b.expires) || b.blanket == quota.AllowAll:
	case b.blanket == quota.DenyAll:
		ok = false
	default:
		rate := float64(b.per) / b.window.Seconds()
		b.tokens = math.Min(float64(b.burst), b.tokens+rate*now.Sub(b.filled).Seconds())
		b.filled = now
		if ok = b.tokens >= 1; ok {
			b.tokens--
		}
	}
	if ok {
		b.allowed++
	} else {
		b.deny++
	}
	return ok
}

// usage returns and clears what was decided since the last report.
func (b *envoyBucket) usage() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.allowed + b.deny
	b.allowed, b.deny = 0, 0
	return n
}

// scenario is one simulation: clients on replicas with a demand each.
type scenario struct {
	name     string
	replicas int
	clients  int
	demand   func(client int, at time.Duration) float64 // requests per second
	shift    time.Duration                              // when demand changes; 0: never
	overload bool                                       // total demand exceeds the limit
	poisson  bool                                       // requests come at random, not evenly
}

// simResult is what a simulation measured.
type simResult struct {
	windows    []int64       // admitted per window
	converged  time.Duration // after the shift, until every share was within 5% of its fair part
	storeCalls int64
	intervals  int64
}

const (
	simInterval = 500 * time.Millisecond
	simWindow   = 20 * time.Second
	simQuota    = 20000 // 1000 per second
	simRun      = 100 * time.Second
	simTick     = 20 * time.Millisecond
)

// poisson draws from a Poisson distribution of the given mean.
func poisson(r *rand.Rand, mean float64) float64 {
	l, k, p := math.Exp(-mean), 0.0, 1.0
	for {
		if p *= r.Float64(); p <= l {
			return k
		}
		k++
	}
}

func simulate(t *testing.T, sc scenario) simResult {
	store := &countingStore{Store: memory.New()}
	limit := floodgate.NewLimit(floodgate.FixedWindow, simQuota, simWindow)
	b := quota.Bucket{Rule: "hot", Key: "quota|hot", Limit: limit, Failure: decide.FailClosed}
	sharers := make([]*quota.Sharer, sc.replicas)
	for i := range sharers {
		e, err := decide.New(store, decide.Options{Logger: slog.New(slog.DiscardHandler), OverLimitCache: decide.CacheOptions{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := quota.New(e, quota.Options{Interval: simInterval})
		if err != nil {
			t.Fatal(err)
		}
		sharers[i] = s
	}
	start := time.Now()
	var (
		mu      sync.Mutex
		windows = make([]int64, simRun/simWindow)
		sent    = make([]int64, sc.clients) // tokens in force per client
		wg      sync.WaitGroup
	)
	buckets := make([]*envoyBucket, sc.clients)
	for i := range sc.clients {
		eb := &envoyBucket{window: simWindow}
		buckets[i] = eb
		c := sharers[i%sc.replicas].Join(func(_ quota.Bucket, sh quota.Share) {
			eb.apply(sh)
			mu.Lock()
			sent[i] = sh.Tokens
			mu.Unlock()
		})
		phase := time.Duration(i) * simInterval / time.Duration(sc.clients) // reports spread over the interval
		wg.Go(func() {
			defer c.Leave()
			nextReport := start.Add(phase)
			var due float64
			rnd := rand.New(rand.NewPCG(1, uint64(i)))
			for now := time.Now(); now.Sub(start) < simRun; now = time.Now() {
				mean := sc.demand(i, now.Sub(start)) * simTick.Seconds()
				if sc.poisson {
					due += poisson(rnd, mean)
				} else {
					due += mean
				}
				for ; due >= 1; due-- {
					if eb.request(now) {
						mu.Lock()
						windows[now.Sub(start)/simWindow]++
						mu.Unlock()
					}
				}
				if !now.Before(nextReport) {
					c.Report(b, eb.usage())
					nextReport = nextReport.Add(simInterval)
				}
				time.Sleep(simTick)
			}
		})
	}
	res := simResult{converged: -1}
	if sc.shift > 0 {
		wg.Go(func() {
			time.Sleep(sc.shift)
			for step := time.Duration(0); step < 10*simInterval; step += simInterval / 10 {
				var total float64
				for i := range sc.clients {
					total += sc.demand(i, sc.shift)
				}
				var off, fairSum float64
				mu.Lock()
				for i := range sc.clients {
					fair := 0.98 * simQuota * sc.demand(i, sc.shift) / total
					off += math.Abs(float64(sent[i]) - fair)
					fairSum += fair
				}
				mu.Unlock()
				ok := off <= 0.05*fairSum
				if ok {
					res.converged = step
					return
				}
				time.Sleep(simInterval / 10)
			}
		})
	}
	wg.Wait()
	for _, s := range sharers {
		s.Close()
	}
	res.windows = windows
	res.storeCalls = store.calls.Load()
	res.intervals = int64(simRun / simInterval)
	return res
}

// TestSimulation: clients that behave as Envoy's filter does, on one to
// three replicas sharing a store, with skewed and shifting demand. After the
// first window (the first shares take an interval or two, and meanwhile the
// clients admit all), every window admits at most the limit + 2%; when the
// demand exceeds the limit at least 95% of it is used; after a shift the
// shares are back to their fair parts within four intervals; store calls
// are two per bucket per replica per interval, whatever the requests.
func TestSimulation(t *testing.T) {
	scenarios := []scenario{
		{name: "1 client 1 replica overloaded", replicas: 1, clients: 1, overload: true,
			demand: func(int, time.Duration) float64 { return 2000 }},
		{name: "10 clients 2 replicas skewed", replicas: 2, clients: 10, overload: true,
			demand: func(i int, _ time.Duration) float64 { return 30 * float64(i+1) }},
		{name: "50 clients 3 replicas shifting", replicas: 3, clients: 50, overload: true, shift: 50 * time.Second,
			demand: func(i int, at time.Duration) float64 {
				if at >= 50*time.Second {
					i = 49 - i // the heavy clients go light and the light ones heavy
				}
				return 2 + float64(i)
			}},
		{name: "30 clients 2 replicas random arrivals", replicas: 2, clients: 30, overload: true, poisson: true,
			demand: func(i int, _ time.Duration) float64 { return 5 + 3*float64(i) }},
		{name: "20 clients 3 replicas under the limit", replicas: 3, clients: 20,
			demand: func(i int, _ time.Duration) float64 { return 10 + 2*float64(i) }},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res := simulate(t, sc)
				var demand float64
				for i := range sc.clients {
					demand += sc.demand(i, 0)
				}
				t.Logf("admitted per %v window (limit %d): %v; converged after the shift in %v; %d store calls in %d intervals",
					simWindow, simQuota, res.windows, res.converged, res.storeCalls, res.intervals)
				for w, n := range res.windows[1:] {
					if n > simQuota*102/100 {
						t.Errorf("window %d admitted %d, over the limit %d + 2%%", w+1, n, simQuota)
					}
					switch {
					case sc.overload && n < simQuota*95/100:
						t.Errorf("window %d admitted %d: under 95%% of the limit %d with the demand over it", w+1, n, simQuota)
					case !sc.overload && float64(n) < demand*simWindow.Seconds()*0.99:
						t.Errorf("window %d admitted %d of a demand of %.0f under the limit", w+1, n, demand*simWindow.Seconds())
					}
				}
				// A report holds part of the demand before the shift, and a
				// change must stand out of the counting's noise: about four
				// intervals (docs/ENVOY.md).
				if sc.shift > 0 && (res.converged < 0 || res.converged > 4*simInterval) {
					t.Errorf("after the shift the shares converged in %v, want within 4 intervals (%v)", res.converged, 4*simInterval)
				}
				if want := 2 * int64(sc.replicas) * res.intervals; res.storeCalls > want+int64(2*sc.replicas) {
					t.Errorf("%d store calls, want about %d: two per replica per interval", res.storeCalls, want)
				}
			})
		})
	}
}

package quota_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"flag"
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
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// countingStore is a replica's store, counting its calls (in calls, which
// replicas may share).
type countingStore struct {
	floodgate.Store
	calls *atomic.Int64
	down  atomic.Bool
}

func newCounting(s floodgate.Store, calls *atomic.Int64) *countingStore {
	if calls == nil {
		calls = new(atomic.Int64)
	}
	return &countingStore{Store: s, calls: calls}
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
	refills       int64 // token buckets started, full
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
		b.refills++
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
	move     time.Duration                              // when every client moves to the next replica; 0: never
	overload bool                                       // total demand exceeds the limit
	poisson  bool                                       // requests come at random, not evenly
	seed     uint64                                     // of the random arrivals
}

// simResult is what a simulation measured.
type simResult struct {
	windows    []int64       // admitted per window
	converged  time.Duration // after the shift, until every share was within 5% of its fair part
	storeCalls int64
	refills    int64 // token buckets the clients started, full, on a new share
	intervals  int64
}

// timing is a simulation's clock: its interval, the limit's window and
// quota, how long it runs and how often each client acts.
type timing struct {
	interval, window time.Duration
	quota            int64
	run, tick        time.Duration
}

// virtual is the timing under testing/synctest: a limit of 1000 per
// second in 20 s windows, 100 s.
var virtual = timing{interval: 500 * time.Millisecond, window: 20 * time.Second, quota: 20000, run: 100 * time.Second, tick: 20 * time.Millisecond}

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

func simulate(t *testing.T, sc scenario, tm timing, stores []floodgate.Store) simResult {
	simInterval, simWindow, simQuota, simRun, simTick := tm.interval, tm.window, tm.quota, tm.run, tm.tick
	calls := new(atomic.Int64)
	limit := floodgate.NewLimit(floodgate.FixedWindow, simQuota, simWindow)
	b := quota.Bucket{Rule: "hot", Key: "quota|hot", Limit: limit, Failure: decide.FailClosed}
	sharers := make([]*quota.Sharer, sc.replicas)
	for i := range sharers {
		e, err := decide.New(newCounting(stores[i], calls), decide.Options{Logger: slog.New(slog.DiscardHandler), OverLimitCache: decide.CacheOptions{Disabled: true}})
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
		send := func(_ quota.Bucket, sh quota.Share) {
			eb.apply(sh)
			mu.Lock()
			sent[i] = sh.Tokens
			mu.Unlock()
		}
		c := sharers[i%sc.replicas].Join(send)
		phase := time.Duration(i) * simInterval / time.Duration(sc.clients) // reports spread over the interval
		wg.Go(func() {
			defer func() { c.Leave() }()
			moved := sc.move == 0
			nextReport := start.Add(phase)
			var due float64
			rnd := rand.New(rand.NewPCG(sc.seed, uint64(i)))
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
				if !moved && now.Sub(start) >= sc.move { // the stream ends; the Envoy reconnects to the next replica
					c.Leave()
					c, moved = sharers[(i+1)%sc.replicas].Join(send), true
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
			for step := time.Duration(0); step < 10*simInterval; step += simInterval / 100 {
				var total float64
				for i := range sc.clients {
					total += sc.demand(i, sc.shift)
				}
				var off, fairSum float64
				mu.Lock()
				for i := range sc.clients {
					fair := 0.98 * float64(simQuota) * sc.demand(i, sc.shift) / total
					off += math.Abs(float64(sent[i]) - fair)
					fairSum += fair
				}
				mu.Unlock()
				ok := off <= 0.05*fairSum
				if ok {
					res.converged = step
					return
				}
				time.Sleep(simInterval / 100)
			}
		})
	}
	wg.Wait()
	for _, s := range sharers {
		s.Close()
	}
	res.windows = windows
	for _, eb := range buckets {
		eb.mu.Lock()
		res.refills += eb.refills
		eb.mu.Unlock()
	}
	res.storeCalls = calls.Load()
	res.intervals = int64(simRun / simInterval)
	return res
}

var moments = flag.Int("quota.moments", 8, "TestSimulation: the moments of an interval at which the swap is tried")

// TestSimulation: clients that behave as Envoy's filter does, on one to
// three replicas sharing a store, with skewed and shifting demand, evenly
// spaced or at random. After the first window (the first shares take an
// interval or two, and meanwhile the clients admit all), every window
// admits at most the limit + 2%; when the demand exceeds the limit at least
// 95% of it is used; after a shift, at any moment of an interval, the
// shares are within 5% of their fair parts within two intervals; store calls
// are eight per bucket per replica per interval, whatever the requests;
// shares change (each a full bucket) in under 0.4 of a client's intervals.
func TestSimulation(t *testing.T) {
	var scenarios []scenario
	// The swap, at eight moments of a reporting interval (or as many as
	// -quota.moments asks): the heavy clients go light and the light ones
	// heavy.
	for k := range *moments {
		shift := 50*time.Second + time.Duration(k)*virtual.interval/time.Duration(*moments)
		scenarios = append(scenarios, scenario{name: fmt.Sprintf("50 clients 3 replicas shifting at %v", shift), replicas: 3, clients: 50, overload: true, shift: shift,
			demand: func(i int, at time.Duration) float64 {
				if at >= shift {
					i = 49 - i
				}
				return 2 + float64(i)
			}})
	}
	// Random arrivals, each with three seeds.
	for seed := range uint64(3) {
		scenarios = append(scenarios,
			scenario{name: fmt.Sprintf("50 clients 3 replicas shifting random arrivals seed %d", seed), replicas: 3, clients: 50, overload: true, poisson: true, seed: seed,
				demand: func(i int, at time.Duration) float64 { // as above; Poisson noise keeps the shares off fair, so no convergence is timed
					if at >= 50*time.Second {
						i = 49 - i
					}
					return 2 + float64(i)
				}},
			scenario{name: fmt.Sprintf("30 clients 2 replicas random arrivals seed %d", seed), replicas: 2, clients: 30, overload: true, poisson: true, seed: seed,
				demand: func(i int, _ time.Duration) float64 { return 5 + 3*float64(i) }})
	}
	scenarios = append(scenarios, []scenario{
		{name: "1 client 1 replica overloaded", replicas: 1, clients: 1, overload: true,
			demand: func(int, time.Duration) float64 { return 2000 }},
		{name: "10 clients 2 replicas skewed", replicas: 2, clients: 10, overload: true,
			demand: func(i int, _ time.Duration) float64 { return 30 * float64(i+1) }},
		{name: "20 clients 3 replicas under the limit", replicas: 3, clients: 20,
			demand: func(i int, _ time.Duration) float64 { return 10 + 2*float64(i) }},
		{name: "12 clients 3 replicas moving", replicas: 3, clients: 12, overload: true, move: 50 * time.Second,
			demand: func(i int, _ time.Duration) float64 { return 20 * float64(i+1) }},
	}...)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memory.New()
				checkSimulation(t, sc, virtual, simulate(t, sc, virtual, []floodgate.Store{s, s, s}))
			})
		})
	}
}

// TestSimulationRedis: a skewed overload on three replicas, each on its
// own client of the harness's Redis, in real time (windows of 2 s, an
// interval of 100 ms), then every client moving to another replica.
func TestSimulationRedis(t *testing.T) {
	addr := redistest.StandaloneAddr(t)
	var b [8]byte
	_, _ = crand.Read(b[:])
	prefix := "fgtest:quota:" + hex.EncodeToString(b[:]) + ":"
	stores := make([]floodgate.Store, 3)
	for i := range stores {
		s, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, KeyPrefix: prefix, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		stores[i] = s
	}
	tm := timing{interval: 100 * time.Millisecond, window: 2 * time.Second, quota: 2000, run: 8 * time.Second, tick: 10 * time.Millisecond}
	sc := scenario{name: "redis", replicas: 3, clients: 12, overload: true, move: 5 * time.Second,
		demand: func(i int, _ time.Duration) float64 { return 30 * float64(i+1) }}
	checkSimulation(t, sc, tm, simulate(t, sc, tm, stores))
}

// checkSimulation checks a simulation's figures against its scenario.
func checkSimulation(t *testing.T, sc scenario, tm timing, res simResult) {
	t.Helper()
	var demand float64
	for i := range sc.clients {
		demand += sc.demand(i, 0)
	}
	t.Logf("admitted per %v window (limit %d): %v; converged after the shift in %v; %d store calls in %d intervals; %d buckets refilled",
		tm.window, tm.quota, res.windows, res.converged, res.storeCalls, res.intervals, res.refills)
	for w, n := range res.windows[1:] {
		if n > tm.quota*102/100 {
			t.Errorf("window %d admitted %d, over the limit %d + 2%%", w+1, n, tm.quota)
		}
		switch {
		case sc.overload && float64(n) < float64(tm.quota)*0.95:
			t.Errorf("window %d admitted %d: under 95%% of the limit %d with the demand over it", w+1, n, tm.quota)
		case !sc.overload && float64(n) < demand*tm.window.Seconds()*0.99:
			t.Errorf("window %d admitted %d of a demand of %.0f under the limit", w+1, n, demand*tm.window.Seconds())
		}
	}
	// Sampled every hundredth of an interval (docs/ENVOY.md).
	if sc.shift > 0 && (res.converged < 0 || res.converged > 2*tm.interval) {
		t.Errorf("after the shift the shares converged in %v, want within 2 intervals (%v)", res.converged, 2*tm.interval)
	}
	// A changed share refills its client's bucket, which the margin
	// absorbs: noise alone must not change shares at every report (Poisson
	// arrivals refill about 0.3 per client per interval, even ones 0.06).
	if most := 4 * int64(sc.clients) * res.intervals / 10; res.refills > most {
		t.Errorf("%d buckets refilled, want at most %d: 0.4 per client per interval", res.refills, most)
	}
	// Two per replica per round, four rounds per interval.
	if want := 8 * int64(sc.replicas) * res.intervals; res.storeCalls > want+int64(8*sc.replicas) {
		t.Errorf("%d store calls, want about %d: eight per replica per interval", res.storeCalls, want)
	}
}

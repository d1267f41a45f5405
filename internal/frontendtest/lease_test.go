package frontendtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// callCounter counts the decisions each front end's store is asked for.
type callCounter struct {
	floodgate.Store
	calls *int
	mu    *sync.Mutex
}

func (c callCounter) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	c.mu.Lock()
	*c.calls++
	c.mu.Unlock()
	return c.Store.AllowN(ctx, key, l, n)
}

func (c callCounter) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	c.mu.Lock()
	*c.calls++
	c.mu.Unlock()
	c.Store.(floodgate.BatchStore).AllowBatch(ctx, items, results)
}

// leaseRules are a fixed window and a token bucket with a lease, and the
// same in an Envoy rule file.
var leaseRules = []rule{
	{name: "burst", limit: floodgate.NewLimit(floodgate.FixedWindow, 20, time.Minute), lease: &decide.LeaseOptions{MaxShare: 0.5}},
	{name: "api", limit: floodgate.NewTokenBucket(20, 1, time.Hour), lease: &decide.LeaseOptions{MaxShare: 0.5}},
}

const envoyLeaseRules = `domain: fe
response_headers: true
descriptors:
  - key: burst
    rate_limit: {name: burst, unit: minute, requests_per_unit: 20, algorithm: fixed_window, lease: {max_share: 0.5}}
  - key: api
    rate_limit: {name: api, unit: hour, requests_per_unit: 1, capacity: 20, algorithm: token_bucket, lease: {max_share: 0.5}}
`

// TestLeaseEveryFrontEnd: a leased rule through every front end on real
// Redis: the same answers and headers from each, exactly the quota admitted,
// far fewer store calls than requests, and the store's own count the quota.
func TestLeaseEveryFrontEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  redisstore.Mode
		addrs func(testing.TB) []string
	}{
		{"standalone", redisstore.ModeStandalone, func(t testing.TB) []string { return []string{redistest.StandaloneAddr(t)} }},
		{"cluster", redisstore.ModeCluster, redistest.ClusterAddrs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := tc.addrs(t)
			prefix := fmt.Sprintf("fe-lease-%d:", time.Now().UnixNano())
			clock := clocktest.NewManual(time.Unix(1_800_000_000, 0))
			var mu sync.Mutex
			calls := map[string]*int{}
			stores := map[string]*redisstore.Store{}
			newStore := func(name string) floodgate.Store {
				s, err := redisstore.New(redisstore.Config{Mode: tc.mode, Addrs: addrs, KeyPrefix: prefix + name + ":", Timeout: time.Second, Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				n := 0
				calls[name], stores[name] = &n, s
				return callCounter{Store: s, calls: &n, mu: &mu}
			}
			fes := frontEnds(t, newStore, clock, leaseRules, []envoyFrontEnd{{name: "envoy", rules: envoyLeaseRules}})
			for _, name := range []string{"burst", "api"} {
				admittedN := 0
				for i := range 30 {
					want := ask(t, fes, i, step{rules: []string{name}})
					if want.admitted() {
						admittedN++
					}
					if want.admitted() != (i < 20) {
						t.Fatalf("%s request %d: %s, want the first 20 admitted", name, i, want)
					}
				}
				if admittedN != 20 {
					t.Errorf("%s: admitted %d of 30 against a quota of 20", name, admittedN)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for name, n := range calls {
				// 60 requests per front end: blocks of up to 10 units.
				if *n == 0 || *n > 24 {
					t.Errorf("%s: %d store calls for 60 requests, want a block per several", name, *n)
				}
			}
			t.Logf("store calls per front end: %v", func() map[string]int {
				m := map[string]int{}
				for k, v := range calls {
					m[k] = *v
				}
				return m
			}())
		})
	}
}

package envoy

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// countingStore counts the decisions its store is asked for.
type countingStore struct {
	floodgate.Store
	calls atomic.Int64
}

func (s *countingStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	s.calls.Add(1)
	return s.Store.AllowN(ctx, key, l, n)
}

// TestOverLimitCacheEnvoy: with the cache turned on, a descriptor over its
// limit is answered without the store, and is_negative_hits, which goes
// through the engine, clears it.
func TestOverLimitCacheEnvoy(t *testing.T) {
	const rules = "domain: c\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	mem, clock := memoryStore()
	cs := &countingStore{Store: mem}
	e := start(t, cs, true, Options{Clock: clock, OverLimitCache: decide.CacheOptions{MaxBytes: 1 << 20}}, rules)
	const h = time.Hour
	e.call(t, "1", request("c", desc("user=u")), ok("c.user 2/HOUR", 1, h))
	e.call(t, "2", request("c", desc("user=u")), ok("c.user 2/HOUR", 0, h))
	calls := cs.calls.Load()
	for range 3 {
		e.call(t, "over", request("c", desc("user=u")), over("c.user 2/HOUR", h))
	}
	if got := cs.calls.Load() - calls; got != 1 {
		t.Errorf("3 calls over the limit asked the store %d times, want 1", got)
	}
	back := desc("user=u")
	back.IsNegativeHits = true
	e.call(t, "give 1 back", request("c", back), ok("c.user 2/HOUR", 0, 0))
	e.call(t, "after", request("c", desc("user=u")), ok("c.user 2/HOUR", 0, h))
}

package splitstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/storekey"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/splitstore"
)

// twoRedis spawns two redis-servers of its own and returns them with a
// split store over a Redis store on each (main, then per-second), and those
// two stores.
func twoRedis(t *testing.T) (mainSrv, psSrv *redistest.SpawnedServer, s *splitstore.Store, main, ps *redisstore.Store) {
	t.Helper()
	mainSrv, psSrv = redistest.Spawn(t), redistest.Spawn(t)
	open := func(addr string) *redisstore.Store {
		st, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, Mode: redisstore.ModeStandalone, Timeout: 2 * time.Second, LazyConnect: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		deadline := time.Now().Add(10 * time.Second)
		for !st.Health().Connected && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return st
	}
	main, ps = open(mainSrv.Addr), open(psSrv.Addr)
	s, err := splitstore.New(main, ps)
	if err != nil {
		t.Fatal(err)
	}
	return mainSrv, psSrv, s, main, ps
}

// exists reports whether srv holds key.
func exists(t *testing.T, srv *redistest.SpawnedServer, key string) bool {
	t.Helper()
	n, err := srv.Do(t, "EXISTS", key).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestTwoRedisServers: through the engine, a per-second rule's key lands
// in the per-second server and a per-minute rule's in the main one; a
// request with both is all or nothing; and with the per-second server
// gone, only the per-second rule follows its failure mode.
func TestTwoRedisServers(t *testing.T) {
	mainSrv, psSrv, s, main, ps := twoRedis(t)
	engine, err := decide.New(s, decide.Options{OverLimitCache: decide.CacheOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A log keeps its key a whole window after its newest entry, so the
	// EXISTS checks below cannot race a fixed window's end.
	sec, min := floodgate.NewLimit(floodgate.SlidingWindowLog, 2, time.Second), floodgate.PerMinute(5)
	secKey, minKey := storekey.Of("test", "per-second", "client"), storekey.Of("test", "per-minute", "client")
	checks := func(secMode, minMode decide.FailureMode) []decide.Check {
		return []decide.Check{
			{Rule: "per-second", Key: secKey, Limit: sec, Failure: secMode},
			{Rule: "per-minute", Key: minKey, Limit: min, Failure: minMode},
		}
	}

	r := engine.Decide(ctx, checks(decide.FailClosed, decide.FailClosed))
	if r.Verdict != decide.Admitted {
		t.Fatalf("first request: %+v", r)
	}
	for _, c := range []struct {
		srv  *redistest.SpawnedServer
		key  string
		want bool
	}{
		{psSrv, ps.Key(secKey, sec.Algorithm), true},
		{mainSrv, main.Key(secKey, sec.Algorithm), false},
		{mainSrv, main.Key(minKey, min.Algorithm), true},
		{psSrv, ps.Key(minKey, min.Algorithm), false},
	} {
		if got := exists(t, c.srv, c.key); got != c.want {
			t.Fatalf("EXISTS %s on %s = %v, want %v", c.key, c.srv.Addr, got, c.want)
		}
	}

	// All or nothing across the two servers. A stalled test may see the
	// first request leave the window (then one more is admitted): count
	// until one is denied by the per-second rule, within a few seconds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		before, err := main.AllowN(ctx, minKey, min, 0)
		if err != nil {
			t.Fatal(err)
		}
		r = engine.Decide(ctx, checks(decide.FailClosed, decide.FailClosed))
		after, err := main.AllowN(ctx, minKey, min, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict == decide.Denied {
			if r.Deciding != 0 || after.Remaining != before.Remaining {
				t.Fatalf("denied by check %d; per-minute remaining %d before, %d after: the denied request kept quota in the main server", r.Deciding, before.Remaining, after.Remaining)
			}
			break
		}
		if r.Verdict != decide.Admitted || after.Remaining != before.Remaining-1 {
			t.Fatalf("request: %+v; per-minute remaining %d before, %d after", r, before.Remaining, after.Remaining)
		}
		if after.Remaining == 0 || time.Now().After(deadline) {
			t.Fatal("the per-second rule never denied")
		}
	}
	if _, err := main.AllowN(ctx, minKey, min, 0); err != nil {
		t.Fatal(err)
	}

	// The per-second server goes away: its rule follows its failure mode,
	// the per-minute rule is decided by the main server as before.
	psSrv.Kill()
	left := func() int64 {
		d, err := main.AllowN(ctx, minKey, min, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	before := left()
	if before == 0 {
		t.Fatal("no per-minute quota left for the outage cases")
	}
	if r := engine.Decide(ctx, checks(decide.FailClosed, decide.FailClosed)); r.Verdict != decide.Unavailable || r.Deciding != 0 {
		t.Fatalf("fail-closed per-second rule with its server down: %+v, want unavailable from check 0", r)
	}
	if got := left(); got != before {
		t.Fatalf("an unavailable request kept per-minute quota: %d left, want %d", got, before)
	}
	r = engine.Decide(ctx, checks(decide.FailOpen, decide.FailClosed))
	if r.Verdict != decide.Admitted || r.Outcomes[0].Verdict != decide.Unavailable || r.Outcomes[1].Verdict != decide.Admitted || !r.Outcomes[1].Decided {
		t.Fatalf("fail-open per-second rule with its server down: %+v, want admitted, the per-minute rule decided by the store", r)
	}
	if got := left(); got != before-1 {
		t.Fatalf("per-minute remaining %d, want %d (the admitted request counted in the main server)", got, before-1)
	}
	one := []decide.Check{{Rule: "per-minute", Key: minKey, Limit: min, Failure: decide.FailClosed}}
	if r := engine.Decide(ctx, one); r.Verdict != decide.Admitted {
		t.Fatalf("a per-minute request alone with the per-second server down: %+v", r)
	}

	// Readiness: the split store's Reset asks both and names the one down;
	// once its breaker opens, Health shows the per-second node unavailable.
	if err := s.Reset(ctx, "\x00ready", floodgate.PerSecond(1)); !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "per-second store") {
		t.Fatalf("Reset = %v, want the per-second store's outage", err)
	}
	for range 10 {
		_, _ = s.Allow(ctx, "k", floodgate.PerSecond(1))
	}
	h := s.Health()
	if h.Available() || len(h.Nodes) != 2 || !h.Nodes[0].Available || h.Nodes[1].Available || h.Nodes[1].Addr != splitstore.PerSecondPrefix+psSrv.Addr {
		t.Fatalf("health %+v: want the main node available and the per-second node %q not", h, splitstore.PerSecondPrefix+psSrv.Addr)
	}
}

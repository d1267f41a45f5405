package decide_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

func spawnedStore(t *testing.T, addr string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestFallbackRedisInstances: two instances (two engines, two Redis
// clients) share a limit in a real Redis. When the server hangs (SIGSTOP)
// or dies, each admits exactly its share alone; when it answers again,
// both are back on the shared limit.
func TestFallbackRedisInstances(t *testing.T) {
	for _, outage := range []string{"stopped", "killed"} {
		t.Run(outage, func(t *testing.T) {
			server := redistest.Spawn(t)
			const quota, instances, each = 20, 2, 14
			l := floodgate.PerMinute(quota)
			check := []decide.Check{{Rule: "login", Key: "login|alice", Limit: l, Failure: decide.FailLocal, LocalShare: 1.0 / instances}}
			var engines [instances]*decide.Engine
			for i := range engines {
				e, err := decide.New(spawnedStore(t, server.Addr), decide.Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				engines[i] = e
				if r := e.Decide(t.Context(), check); !r.Allowed() || r.Outcomes[0].Local {
					t.Fatalf("instance %d before the outage: %v local %v", i, r.Verdict, r.Outcomes[0].Local)
				}
			}
			if outage == "stopped" {
				server.Stop(t)
			} else {
				server.Kill()
			}
			var wg sync.WaitGroup
			var admitted [instances]int
			for i, e := range engines {
				wg.Go(func() {
					for range each {
						r := e.Decide(context.Background(), check)
						o := r.Outcomes[0]
						if !o.Local || !errors.Is(o.Err, floodgate.ErrStoreUnavailable) {
							t.Errorf("instance %d during the outage: %v local %v err %v, want a local decision", i, r.Verdict, o.Local, o.Err)
						}
						if r.Allowed() {
							admitted[i]++
						}
					}
				})
			}
			wg.Wait()
			for i, n := range admitted {
				if n != quota/instances {
					t.Errorf("instance %d admitted %d during the outage, want its share %d", i, n, quota/instances)
				}
			}
			if outage == "killed" {
				return
			}
			server.Cont(t)
			for i, e := range engines {
				deadline := time.Now().Add(10 * time.Second)
				for {
					r := e.Decide(t.Context(), check)
					if o := r.Outcomes[0]; !o.Local && o.Decided {
						if o.Decision.Limit != quota {
							t.Errorf("instance %d after the outage: limit %d, want the shared %d", i, o.Decision.Limit, quota)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("instance %d still local 10s after SIGCONT", i)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// TestCacheRedis: against a real Redis, whose clock the scripts read, a
// denial is answered from memory until its retry delay on the engine's
// clock, never past the moment Redis would admit (checked by asking Redis
// directly: a denied call takes nothing), and the first requests after it
// reach Redis and are admitted.
func TestCacheRedis(t *testing.T) {
	server := redistest.Spawn(t)
	cs := &counting{Store: spawnedStore(t, server.Addr)}
	e := newEngine(t, cs)
	ctx := t.Context()
	for _, l := range []floodgate.Limit{
		floodgate.NewLimit(floodgate.SlidingWindowLog, 3, 1500*time.Millisecond),
		floodgate.NewTokenBucket(3, 3, 1500*time.Millisecond),
		floodgate.NewLimit(floodgate.SlidingWindowCounter, 3, 1500*time.Millisecond),
		floodgate.NewLimit(floodgate.FixedWindow, 3, 1500*time.Millisecond),
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			key := "cache|" + l.Algorithm.String()
			check := []decide.Check{{Rule: "r", Key: key, Limit: l}}
			var first decide.Result
			for first = e.Decide(ctx, check); first.Allowed(); first = e.Decide(ctx, check) {
			}
			if first.Verdict != decide.Denied || first.Outcomes[0].Cached {
				t.Fatalf("first denial: %v cached %v", first.Verdict, first.Outcomes[0].Cached)
			}
			calls, hits, verified := cs.calls.Load(), 0, 0
			deadline := time.Now().Add(5 * time.Second)
			for {
				r := e.Decide(ctx, check)
				if r.Allowed() {
					break
				}
				if o := r.Outcomes[0]; o.Cached {
					hits++
					if hits%20 == 1 && o.Decision.RetryAfter > 150*time.Millisecond { // generous: the check runs a moment later
						verified++
						if d, err := cs.Store.AllowN(ctx, key, l, 1); err != nil || d.Allowed {
							t.Fatalf("Redis admits (%v, %v) what the cache denies for %v more", d.Allowed, err, o.Decision.RetryAfter)
						}
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("not admitted 5s after a denial of at most 1.5s")
				}
				time.Sleep(200 * time.Microsecond) // a flood, not a busy loop
			}
			// The store saw the admission and, at most, a few denials of the
			// last moments (its clock is a round trip ahead of the cache's).
			if n := cs.calls.Load() - calls; n < 1 || n > 5 {
				t.Errorf("%d store calls from the first denial to the admission, want 1 to 5 (%d cached answers)", n, hits)
			}
			if hits < 10 || verified == 0 {
				t.Errorf("%d cached answers, %d checked against Redis; want many", hits, verified)
			}
		})
	}
}

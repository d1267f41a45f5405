package decide_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestResetReachesOtherInstances: a reset through one engine reaches
// another on the same store through the change channel: its cached denial
// and its lease of the key are gone, and it decides on the reset state.
func TestResetReachesOtherInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sharedStore{Store: memory.New()}
		a, b := instance(t, s), instance(t, s)
		a2, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler)}) // the cache on
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a2.Close(context.Background()) })
		ctx := context.Background()
		hour := floodgate.PerHour(1)
		cached := []decide.Check{{Rule: "r", Key: "c", Limit: hour}}
		window := floodgate.NewLimit(floodgate.FixedWindow, 10, time.Hour)
		leased := leasedCheck(window, &decide.LeaseOptions{MaxShare: 1})
		a2.Decide(ctx, cached)
		a2.Decide(ctx, cached) // denied by the store, and cached
		if r := a2.Decide(ctx, cached); r.Allowed() || !r.Outcomes[0].Cached {
			t.Fatalf("third request: %v cached %v, want a cached denial", r.Verdict, r.Outcomes[0].Cached)
		}
		for range 10 {
			a.Decide(ctx, leased)
			synctest.Wait()
		}
		if r := a.Decide(ctx, leased); r.Allowed() {
			t.Fatal("11th of 10 admitted")
		}
		if err := b.Reset(ctx, "c", hour); err != nil {
			t.Fatal(err)
		}
		if err := b.Reset(ctx, "k", window); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if r := a2.Decide(ctx, cached); !r.Allowed() {
			t.Errorf("after another instance's reset: %v cached %v, want admitted", r.Verdict, r.Outcomes[0].Cached)
		}
		n := 0
		for range 15 {
			if r := a.Decide(ctx, leased); r.Allowed() {
				n++
			}
			synctest.Wait()
		}
		if n != 10 {
			t.Errorf("after another instance's reset, the leased rule admitted %d, want 10", n)
		}
	})
}

// noChannel is a store that decides elsewhere and has no change channel.
type noChannel struct{ floodgate.Store }

// deaf is a store whose change channel loses every message.
type deaf struct{ *memory.Store }

func (deaf) InProcess() bool                                  { return false }
func (deaf) Broadcast(context.Context, string) error          { return nil }
func (deaf) Listen(ctx context.Context, _ func(string)) error { <-ctx.Done(); return ctx.Err() }

// TestMaxAgeOutOfSync: an engine that does not hear its store's change
// channel (there is none, or it loses messages) answers a cached denial at
// most MaxAge after the store gave it, then asks the store again; one in
// sync answers it until its retry delay.
func TestMaxAgeOutOfSync(t *testing.T) {
	for _, tc := range []struct {
		name   string
		store  func(floodgate.Clock) floodgate.Store
		synced bool
	}{
		{"no channel", func(c floodgate.Clock) floodgate.Store { return noChannel{memory.New(memory.WithClock(c))} }, false},
		{"deaf channel", func(c floodgate.Clock) floodgate.Store { return deaf{memory.New(memory.WithClock(c))} }, false},
		{"in sync", func(c floodgate.Clock) floodgate.Store { return &sharedStore{Store: memory.New(memory.WithClock(c))} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
				e, err := decide.New(tc.store(clock), decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now,
					OverLimitCache: decide.CacheOptions{MaxAge: 2 * time.Second}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Close(context.Background()) })
				ctx := context.Background()
				check := []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerHour(1)}}
				e.Decide(ctx, check)
				e.Decide(ctx, check) // denied by the store: the cache's listener starts
				time.Sleep(time.Second)
				synctest.Wait() // heartbeats have gone round
				e.Decide(ctx, check)
				var got []bool
				for range 4 {
					clock.Advance(time.Second)
					got = append(got, e.Decide(ctx, check).Outcomes[0].Cached)
				}
				// Out of sync: every 2s of a denial's age, the store again.
				// In sync: the first denial was cached before the first
				// heartbeat came back, so it too ends at 2s; the next lasts.
				want := []bool{true, false, true, false}
				if tc.synced {
					want = []bool{true, false, true, true}
				}
				if !slices.Equal(got, want) {
					t.Errorf("cached over 4s: %v, want %v", got, want)
				}
			})
		})
	}
}

// TestResetReachesRedisInstances measures how long a reset through one
// instance takes to reach another's over-limit cache on real Redis (two
// engines on two clients), standalone and cluster: the time from the
// reset's return until the other instance admits the key again. It
// asserts a generous bound; docs/PERFORMANCE.md records the figures
// (go test -run TestResetReachesRedisInstances -v ./decide).
func TestResetReachesRedisInstances(t *testing.T) {
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
			prefix := fmt.Sprintf("reach-%d:", time.Now().UnixNano())
			var engines [2]*decide.Engine
			for i := range engines {
				s, err := redisstore.New(redisstore.Config{Mode: tc.mode, Addrs: addrs, KeyPrefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Close(context.Background()) })
				engines[i] = e
			}
			a, b := engines[0], engines[1]
			ctx := context.Background()
			limit := floodgate.PerHour(1)
			var took []time.Duration
			for i := range 40 {
				check := []decide.Check{{Rule: "r", Key: fmt.Sprint("k", i), Limit: limit}}
				a.Decide(ctx, check)
				a.Decide(ctx, check)
				if r := a.Decide(ctx, check); r.Allowed() || !r.Outcomes[0].Cached {
					t.Fatalf("round %d: %v cached %v, want a cached denial", i, r.Verdict, r.Outcomes[0].Cached)
				}
				if i == 0 {
					time.Sleep(600 * time.Millisecond) // the first heartbeats, so a is in sync
				}
				if err := b.Reset(ctx, check[0].Key, limit); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				for {
					if r := a.Decide(ctx, check); r.Allowed() {
						break
					}
					if time.Since(start) > 5*time.Second {
						t.Fatalf("round %d: another instance's reset had not reached this one after 5s", i)
					}
					time.Sleep(100 * time.Microsecond)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			t.Logf("reset reaching another instance: p50 %s, p99 %s, max %s over %d resets",
				took[len(took)/2], took[len(took)*99/100], took[len(took)-1], len(took))
		})
	}
}

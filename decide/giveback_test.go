package decide_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// splitBatch decides a batch as redisstore does across cluster slots (and
// splitstore across its two stores): each item on its own, then, when one
// is denied, a second round trip gives back the admitted ones. hook runs
// between the two, as another request would.
type splitBatch struct {
	*memory.Store
	hook func()
}

func (s *splitBatch) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	denied := false
	for i, it := range items {
		d, err := s.Store.AllowN(ctx, it.Key, it.Limit, it.Cost)
		results[i] = floodgate.BatchResult{Decision: d, Err: err}
		denied = denied || err == nil && !d.Allowed
	}
	if denied {
		if h := s.hook; h != nil {
			s.hook = nil
			h()
		}
		for i, it := range items {
			if results[i].Err == nil && results[i].Decision.Allowed {
				_ = s.Store.RefundN(ctx, it.Key, it.Limit, it.Cost)
			}
		}
	}
}

// eachStore has no AllowBatch: the engine refunds itself.
type eachStore struct {
	floodgate.Store
	hook func()
}

func (s *eachStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	d, err := s.Store.AllowN(ctx, key, l, n)
	if !d.Allowed && key == "J" {
		if h := s.hook; h != nil {
			s.hook = nil
			h()
		}
	}
	return d, err
}

// TestCacheAfterGiveBack: a denial that another request met while a
// request's admitted checks were taken for a moment (a store whose batches
// are not atomic across items, such as a Redis Cluster batch across slots
// or splitstore, gives them back after one item is denied; a store without
// batches, the engine itself) is not left in the over-limit cache after the
// give-back.
func TestCacheAfterGiveBack(t *testing.T) {
	for _, batch := range []bool{true, false} {
		name := "AllowBatch, not atomic across items"
		if !batch {
			name = "no AllowBatch: the engine gives back"
		}
		t.Run(name, func(t *testing.T) {
			clock := clocktest.NewManual(time.Unix(1_900_000_000, 0))
			mem := memory.New(memory.WithClock(clock))
			var store floodgate.Store
			var setHook func(func())
			if batch {
				sb := &splitBatch{Store: mem}
				store, setHook = sb, func(f func()) { sb.hook = f }
			} else {
				es := &eachStore{Store: floodgate.Store(mem)}
				store, setHook = es, func(f func()) { es.hook = f }
			}
			e, err := decide.New(store, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			l := floodgate.PerMinute(1)
			k := decide.Check{Rule: "per-user", Key: "K", Limit: l}
			j := decide.Check{Rule: "per-ip", Key: "J", Limit: l, NoCache: true}
			if r := e.Decide(ctx, []decide.Check{j}); !r.Allowed() {
				t.Fatal("J first")
			}
			var r2 decide.Result
			setHook(func() { r2 = e.Decide(ctx, []decide.Check{k}) })
			r1 := e.Decide(ctx, []decide.Check{k, j})
			if len(r2.Outcomes) == 0 {
				t.Fatal("hook did not run")
			}
			if r1.Verdict != decide.Denied || r2.Verdict != decide.Denied {
				t.Fatalf("the request of K and J: %v, K alone during its give-back: %v; want both denied", r1.Verdict, r2.Verdict)
			}
			clock.Advance(time.Second)
			r3 := e.Decide(ctx, []decide.Check{k})
			if !r3.Allowed() {
				d, _ := mem.AllowN(ctx, "K", l, 0)
				t.Errorf("K after the give-back: %v (cached %v, retry %v), but the store holds %d of %d", r3.Verdict, r3.Outcomes[0].Cached, r3.RetryAfter, d.Remaining, l.Quota)
			}
		})
	}
}

package decide_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/callbound"
	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/memory"
)

// sharedStore stands for Redis: one memory store that several engines
// (instances) share, which says it decides elsewhere, counts its calls and
// can be taken down.
type sharedStore struct {
	*memory.Store
	calls   atomic.Int64
	refunds atomic.Int64
	down    atomic.Bool
}

func (*sharedStore) InProcess() bool { return false }

var errStopped = fmt.Errorf("%w: stopped for the test", floodgate.ErrStoreUnavailable)

func (s *sharedStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return floodgate.Decision{}, errStopped
	}
	return s.Store.AllowN(ctx, key, l, n)
}

func (s *sharedStore) RefundN(ctx context.Context, key string, l floodgate.Limit, n int64) error {
	s.refunds.Add(1)
	if s.down.Load() {
		return errStopped
	}
	return s.Store.RefundN(ctx, key, l, n)
}

// AllowBatch hides the memory store's: the engine asks item by item.
func (s *sharedStore) AllowBatch() {}

// instance is one engine over the shared store, closed at the test's end.
func instance(t *testing.T, s floodgate.Store) *decide.Engine {
	t.Helper()
	e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler), OverLimitCache: decide.CacheOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func leasedCheck(l floodgate.Limit, o *decide.LeaseOptions) []decide.Check {
	return []decide.Check{{Rule: "hot", Key: "k", Limit: l, Failure: decide.FailClosed, Lease: o}}
}

// TestLeaseSpendsInMemory: once its first blocks are fetched, an instance
// decides a steady flow from memory, a store call per many requests, and
// every admission was debited in the store (the store's remaining is the
// quota less what was admitted and what the lease holds).
func TestLeaseSpendsInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sharedStore{Store: memory.New()}
		e := instance(t, s)
		limit := floodgate.NewLimit(floodgate.FixedWindow, 100_000, time.Hour)
		checks := leasedCheck(limit, &decide.LeaseOptions{})
		admitted := 0
		for range 20_000 {
			r := e.Decide(context.Background(), checks)
			if r.Allowed() {
				admitted++
			}
			if !r.Outcomes[0].Leased {
				t.Fatalf("outcome %+v not decided through the lease", r.Outcomes[0])
			}
			time.Sleep(50 * time.Microsecond) // 20k requests/s
			synctest.Wait()                   // a background fetch, if one began, is done
		}
		if admitted != 20_000 {
			t.Fatalf("admitted %d of 20000 under a quota of 100000", admitted)
		}
		if calls := s.calls.Load(); calls > 200 {
			t.Errorf("%d store calls for 20000 requests, want a block per many", calls)
		}
		d, _ := s.Store.AllowN(context.Background(), "k", limit, 0)
		if held := int64(100_000-admitted) - d.Remaining; held < 0 || held > 10_000 {
			t.Errorf("the store has %d remaining after %d admitted: the lease holds %d, want 0..10000 (MaxShare)", d.Remaining, admitted, held)
		}
		t.Logf("%d store calls for %d admitted", s.calls.Load(), admitted)
	})
}

// admission is one admitted request: when, and by which instance.
type admission struct {
	at       time.Duration // since the run's start
	instance int
}

// runInstances sends each instance's requests (one every gap[i], in its
// own goroutine) until d has passed, with instance i taking part between
// join[i] and leave[i], and returns every admission.
func runInstances(t *testing.T, engines []*decide.Engine, checks []decide.Check, gaps, join, leave []time.Duration, d time.Duration) []admission {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	var got []admission
	var wg sync.WaitGroup
	for i, e := range engines {
		wg.Go(func() {
			time.Sleep(join[i])
			for time.Since(start) < min(d, leave[i]) {
				if r := e.Decide(context.Background(), checks); r.Allowed() {
					mu.Lock()
					got = append(got, admission{time.Since(start), i})
					mu.Unlock()
				}
				time.Sleep(gaps[i])
			}
			if leave[i] < d {
				_ = e.Close(context.Background()) // leaves: gives its lease back
			}
		})
	}
	wg.Wait()
	return got
}

// TestLeaseBound checks every admission's timestamp against the bound the
// algorithm states under a lease (docs/ALGORITHMS.md), with three instances,
// skewed load, one joining late and one leaving early:
//   - fixed window: at most the quota in every window, exactly as without;
//   - token bucket: in every interval of length d, at most the capacity
//     plus the refill over d + TTL (units are spent up to TTL after they
//     were taken).
func TestLeaseBound(t *testing.T) {
	gaps := []time.Duration{100 * time.Microsecond, 2 * time.Millisecond, time.Millisecond}
	join := []time.Duration{0, 0, 1500 * time.Millisecond}
	leave := []time.Duration{time.Hour, 2500 * time.Millisecond, time.Hour}
	const run = 5 * time.Second
	opts := &decide.LeaseOptions{Refresh: 50 * time.Millisecond, TTL: 200 * time.Millisecond}
	t.Run("fixed_window", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &sharedStore{Store: memory.New()}
			engines := []*decide.Engine{instance(t, s), instance(t, s), instance(t, s)}
			limit := floodgate.NewLimit(floodgate.FixedWindow, 1000, time.Second)
			// The run starts on a window's edge, so windows are [k s, (k+1) s).
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
			got := runInstances(t, engines, leasedCheck(limit, opts), gaps, join, leave, run)
			perWindow := map[int64]int{}
			for _, a := range got {
				perWindow[int64(a.at/time.Second)]++
			}
			for w, n := range perWindow {
				if n > 1000 {
					t.Errorf("window %d admitted %d, over the quota of 1000", w, n)
				}
			}
			for w := range int64(run / time.Second) {
				if perWindow[w] < 900 {
					t.Errorf("window %d admitted %d of 1000 under a demand of about 11000: stranded more than N blocks", w, perWindow[w])
				}
			}
			t.Logf("per window %v, %d store calls", perWindow, s.calls.Load())
		})
	})
	t.Run("token_bucket", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &sharedStore{Store: memory.New()}
			engines := []*decide.Engine{instance(t, s), instance(t, s), instance(t, s)}
			limit := floodgate.NewTokenBucket(200, 1000, time.Second) // 1000/s, burst 200
			got := runInstances(t, engines, leasedCheck(limit, opts), gaps, join, leave, run)
			// Every interval [a_i, a_j] between two admissions holds j-i+1
			// of them; the bound for its length is capacity + rate*(len+TTL).
			for i := range got {
				for j := i; j < len(got); j++ {
					span := got[j].at - got[i].at
					if span > time.Second {
						break
					}
					bound := 200 + 1000*(span+opts.TTL).Seconds()
					if n := float64(j - i + 1); n > bound+1e-9 {
						t.Fatalf("%v admissions in %s from %s: over the bound %.0f", n, span, got[i].at, bound)
					}
				}
			}
			rate := float64(len(got)) / run.Seconds()
			if rate > 1000+200/run.Seconds()+1 || rate < 900 {
				t.Errorf("admitted %.0f/s against a refill of 1000/s and a demand of about 11000/s", rate)
			}
			t.Logf("admitted %d (%.0f/s), %d store calls", len(got), rate, s.calls.Load())
		})
	})
}

// TestLeaseSkew: three instances, nine tenths of the traffic on one, demand
// above the limit: within two refreshes the busy one gets at least 90% of
// what the others leave, and the limit is used.
func TestLeaseSkew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sharedStore{Store: memory.New()}
		engines := []*decide.Engine{instance(t, s), instance(t, s), instance(t, s)}
		limit := floodgate.NewTokenBucket(100, 1000, time.Second)
		opts := &decide.LeaseOptions{Refresh: 100 * time.Millisecond}
		// Demand 3000/s: 2700/s on the first, 150/s on each other.
		gaps := []time.Duration{370 * time.Microsecond, 6667 * time.Microsecond, 6667 * time.Microsecond}
		never := []time.Duration{time.Hour, time.Hour, time.Hour}
		got := runInstances(t, engines, leasedCheck(limit, opts), gaps, []time.Duration{0, 0, 0}, never, 2*time.Second)
		var busy, others int
		for _, a := range got {
			if a.at < 200*time.Millisecond {
				continue // the first two refreshes
			}
			if a.instance == 0 {
				busy++
			} else {
				others++
			}
		}
		// 1.8 s at 1000/s: 1800 units, of which the others take theirs.
		if total := busy + others; total < 1700 {
			t.Errorf("admitted %d in 1.8s of a 1000/s limit under 3000/s of demand", total)
		}
		if left := 1800 - others; float64(busy) < 0.9*float64(left) {
			t.Errorf("the busy instance got %d of the %d the others left", busy, left)
		}
		t.Logf("busy %d, others %d, %d store calls", busy, others, s.calls.Load())
	})
}

// TestLeaseOutage: when the store goes down, the units held are spent
// first, then the rule's failure mode applies; once it is back, nothing is
// spent twice: the window's total stays within its quota.
func TestLeaseOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sharedStore{Store: memory.New()}
		e := instance(t, s)
		limit := floodgate.NewLimit(floodgate.FixedWindow, 1000, time.Hour)
		checks := leasedCheck(limit, &decide.LeaseOptions{Refresh: time.Second})
		admitted := 0
		decide1 := func() decide.Result {
			r := e.Decide(context.Background(), checks)
			if r.Allowed() {
				admitted++
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			return r
		}
		for range 300 {
			decide1()
		}
		s.down.Store(true)
		var leasedDuring, failed int
		for range 300 {
			r := decide1()
			switch {
			case r.Allowed():
				leasedDuring++
			case r.Verdict == decide.Unavailable:
				failed++
			default:
				t.Fatalf("during the outage: %v %+v", r.Verdict, r.Outcomes[0])
			}
		}
		if leasedDuring == 0 || failed == 0 {
			t.Fatalf("during the outage: %d admitted from the lease, %d by the failure mode; want both", leasedDuring, failed)
		}
		s.down.Store(false)
		for range 2000 {
			decide1()
		}
		if admitted != 1000 {
			t.Errorf("admitted %d in a window of 1000 across an outage, want exactly 1000 (the store's remaining shows no unit spent twice)", admitted)
		}
		d, _ := s.Store.AllowN(context.Background(), "k", limit, 0)
		if d.Remaining != 0 {
			t.Errorf("store remaining %d after 1000 admitted", d.Remaining)
		}
	})
}

// TestLeaseGivesBack: a request a second (unleased) check denies gives its
// leased cost back to the lease; a lease nobody spends from is given back
// to the store after Idle; Close gives back what is held.
func TestLeaseGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sharedStore{Store: memory.New()}
		e := instance(t, s)
		bucket := floodgate.NewTokenBucket(1000, 1, time.Hour) // no refill to speak of
		opts := &decide.LeaseOptions{Refresh: 10 * time.Millisecond, Idle: 100 * time.Millisecond, TTL: time.Minute}
		ctx := context.Background()
		remaining := func() int64 {
			d, _ := s.Store.AllowN(ctx, "k", bucket, 0)
			return d.Remaining
		}
		leased := decide.Check{Rule: "leased", Key: "k", Limit: bucket, Lease: opts}
		for range 50 {
			if r := e.Decide(ctx, []decide.Check{leased}); !r.Allowed() {
				t.Fatalf("%v", r.Verdict)
			}
			synctest.Wait()
		}
		strict := decide.Check{Rule: "strict", Key: "s", Limit: floodgate.PerHour(1)}
		if r := e.Decide(ctx, []decide.Check{leased, strict}); !r.Allowed() {
			t.Fatalf("first strict: %v", r.Verdict)
		}
		synctest.Wait()
		for range 20 {
			if r := e.Decide(ctx, []decide.Check{leased, strict}); r.Allowed() || !r.Outcomes[0].Leased || r.Outcomes[0].Decision.Remaining == 0 {
				t.Fatalf("with strict over: %v %+v", r.Verdict, r.Outcomes[0])
			}
			synctest.Wait()
		}
		// Idle: the sweeper gives the lease back, with the units the 20
		// denied requests spent and returned to it.
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if got := remaining(); got != 1000-51 {
			t.Errorf("after the idle timeout the store has %d, want 1000 - 51 admitted = 949", got)
		}
		for range 10 {
			e.Decide(ctx, []decide.Check{leased})
			synctest.Wait()
		}
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := remaining(); got != 1000-61 {
			t.Errorf("after Close the store has %d, want 1000 - 61 admitted = 939", got)
		}
		if r := e.Decide(ctx, []decide.Check{leased}); !r.Allowed() {
			t.Errorf("after Close: %v, want decisions to go on", r.Verdict)
		}
	})
}

// TestLeaseGivesBackFixedWindow: a fixed window's unspent leased units go
// back to the store while their window lasts (idle, Close), and a block
// whose window has ended gives nothing to the next window.
func TestLeaseGivesBackFixedWindow(t *testing.T) {
	window := floodgate.NewLimit(floodgate.FixedWindow, 1000, time.Minute)
	ctx := context.Background()
	spend := func(t *testing.T, e *decide.Engine, c decide.Check, n int) {
		t.Helper()
		for range n {
			if r := e.Decide(ctx, []decide.Check{c}); !r.Allowed() || !r.Outcomes[0].Leased {
				t.Fatalf("%v %+v", r.Verdict, r.Outcomes[0])
			}
			synctest.Wait()
		}
	}
	t.Run("within the window", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &sharedStore{Store: memory.New()}
			e := instance(t, s)
			remaining := func() int64 { d, _ := s.Store.AllowN(ctx, "k", window, 0); return d.Remaining }
			c := decide.Check{Rule: "fw", Key: "k", Limit: window,
				Lease: &decide.LeaseOptions{Refresh: 10 * time.Millisecond, Idle: 100 * time.Millisecond, TTL: time.Minute}}
			spend(t, e, c, 50)
			if got := remaining(); got >= 950 {
				t.Fatalf("while leased the store has %d: want the block taken beyond the 50 spent", got)
			}
			time.Sleep(200 * time.Millisecond)
			synctest.Wait()
			if got := remaining(); got != 950 {
				t.Errorf("after the idle timeout the store has %d, want 1000 - 50 admitted", got)
			}
			spend(t, e, c, 10)
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if got := remaining(); got != 940 {
				t.Errorf("after Close the store has %d, want 1000 - 60 admitted", got)
			}
		})
	})
	t.Run("after the window", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &sharedStore{Store: memory.New()}
			e := instance(t, s)
			remaining := func() int64 { d, _ := s.Store.AllowN(ctx, "k", window, 0); return d.Remaining }
			c := decide.Check{Rule: "fw", Key: "k", Limit: window,
				Lease: &decide.LeaseOptions{Refresh: 10 * time.Millisecond, Idle: 70 * time.Second, TTL: 5 * time.Minute}}
			// synctest's clock starts on a minute: the window ends at 60 s.
			spend(t, e, c, 50)
			time.Sleep(61 * time.Second)
			if _, err := s.Store.AllowN(ctx, "k", window, 10); err != nil {
				t.Fatal(err)
			}
			time.Sleep(39 * time.Second) // idle at 70 s: the sweeper drops the lease
			synctest.Wait()
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if got := remaining(); got != 990 || s.refunds.Load() != 0 {
				t.Errorf("the next window has %d remaining, want 1000 - 10 and no refund (%d): the ended window's block gives it nothing", got, s.refunds.Load())
			}
		})
	})
}

// TestLeaseReset: a reset through the engine drops the key's lease, and the
// next request leases afresh from the reset state.
func TestLeaseReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sharedStore{Store: memory.New()}
		a, b := instance(t, s), instance(t, s)
		limit := floodgate.NewLimit(floodgate.FixedWindow, 10, time.Hour)
		checks := leasedCheck(limit, &decide.LeaseOptions{MaxShare: 1})
		ctx := context.Background()
		for range 10 {
			a.Decide(ctx, checks)
			synctest.Wait()
		}
		if r := a.Decide(ctx, checks); r.Allowed() {
			t.Fatal("11th of 10 admitted")
		}
		if err := a.Reset(ctx, "k", limit); err != nil {
			t.Fatal(err)
		}
		n := 0
		for range 15 {
			if r := a.Decide(ctx, checks); r.Allowed() {
				n++
			}
			synctest.Wait()
		}
		if n != 10 {
			t.Errorf("after the reset admitted %d, want 10", n)
		}
		if r := b.Decide(ctx, checks); r.Allowed() {
			t.Errorf("another instance admitted beyond the quota")
		}
	})
}

// TestLeaseConcurrent: 64 callers on one hot key over three instances are
// admitted exactly the quota of a fixed window.
func TestLeaseConcurrent(t *testing.T) {
	s := &sharedStore{Store: memory.New()}
	engines := []*decide.Engine{instance(t, s), instance(t, s), instance(t, s)}
	limit := floodgate.NewLimit(floodgate.FixedWindow, 5000, time.Hour)
	checks := leasedCheck(limit, &decide.LeaseOptions{})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for range 200 {
				if r := engines[i%3].Decide(context.Background(), checks); r.Allowed() {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for _, e := range engines {
		_ = e.Close(context.Background())
	}
	d, _ := s.Store.AllowN(context.Background(), "k", limit, 0)
	if admitted.Load() > 5000 || admitted.Load()+d.Remaining > 5000 {
		t.Fatalf("admitted %d with %d remaining in the store, of 5000", admitted.Load(), d.Remaining)
	}
	if admitted.Load() < 5000-3*500 {
		t.Errorf("admitted %d of 5000 under 12800 requests: more stranded than 3 blocks", admitted.Load())
	}
}

// TestLeaseOptionsValidate: bad options and the sliding windows are refused
// with the field named, and the check is Invalid, not admitted.
func TestLeaseOptionsValidate(t *testing.T) {
	bucket := floodgate.NewTokenBucket(10, 1, time.Second)
	for _, tc := range []struct {
		name  string
		opts  decide.LeaseOptions
		limit floodgate.Limit
		field string
	}{
		{"defaults", decide.LeaseOptions{}, bucket, ""},
		{"fixed window", decide.LeaseOptions{}, floodgate.NewLimit(floodgate.FixedWindow, 5, time.Minute), ""},
		{"sliding log", decide.LeaseOptions{}, floodgate.PerMinute(5), "Algorithm"},
		{"sliding counter", decide.LeaseOptions{}, floodgate.NewLimit(floodgate.SlidingWindowCounter, 5, time.Minute), "Algorithm"},
		{"negative refresh", decide.LeaseOptions{Refresh: -time.Second}, bucket, "Refresh"},
		{"ttl below refresh", decide.LeaseOptions{Refresh: time.Second, TTL: time.Millisecond}, bucket, "TTL"},
		{"share above 1", decide.LeaseOptions{MaxShare: 1.5}, bucket, "MaxShare"},
		{"negative share", decide.LeaseOptions{MaxShare: -0.1}, bucket, "MaxShare"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate(tc.limit)
			var fe *fielderr.Error
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.field)
			}
			e := instance(t, &sharedStore{Store: memory.New()})
			r := e.Decide(context.Background(), []decide.Check{{Rule: "r", Key: "k", Limit: tc.limit, Lease: &tc.opts}})
			if r.Verdict != decide.Invalid {
				t.Errorf("Decide = %v, want Invalid", r.Verdict)
			}
		})
	}
}

// gatedStore is a sharedStore whose calls, once gated, block until
// released, noting the bound each carried for the store (callbound).
type gatedStore struct {
	sharedStore
	gated   atomic.Bool
	release chan struct{}
	bounds  chan time.Duration
}

func (s *gatedStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if s.gated.Load() {
		d, _ := callbound.From(ctx)
		s.bounds <- d
		select {
		case <-s.release:
		case <-ctx.Done():
			return floodgate.Decision{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, ctx.Err())
		}
	}
	return s.sharedStore.AllowN(ctx, key, l, n)
}

// TestLeaseFetchInBackground: a fetch in the background may take longer
// than a request's timeout (it carries a bound of its own, at least a
// second, for the store), and a request that runs out of units while it is
// under way waits for it at most half a refresh, then answers the rule's
// failure; once the fetch lands, requests are admitted again.
func TestLeaseFetchInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &gatedStore{sharedStore: sharedStore{Store: memory.New()}, release: make(chan struct{}), bounds: make(chan time.Duration, 8)}
		e := instance(t, s)
		checks := leasedCheck(floodgate.NewLimit(floodgate.FixedWindow, 1_000_000, time.Hour), &decide.LeaseOptions{})
		ctx := context.Background()
		for range 100 { // a steady flow, so that blocks last a while
			for range 100 {
				if r := e.Decide(ctx, checks); !r.Allowed() {
					t.Fatalf("warming up: %+v", r.Outcomes[0])
				}
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
		}
		s.gated.Store(true)
		var bound time.Duration
		admitted := 0
		for bound == 0 {
			r := e.Decide(ctx, checks)
			if !r.Allowed() {
				t.Fatalf("request %d denied before the fetch began: %+v", admitted+1, r.Outcomes[0])
			}
			admitted++
			select {
			case bound = <-s.bounds:
			default:
			}
			if admitted > 1_000_000 {
				t.Fatal("no fetch in the background began")
			}
		}
		if bound < time.Second {
			t.Errorf("the background fetch's bound for the store is %v, want at least 1s", bound)
		}
		// Spend what is held; the first request the units cannot pay waits
		// half a refresh for the fetch under way, then fails closed.
		for {
			began := time.Now()
			r := e.Decide(ctx, checks)
			if r.Allowed() {
				continue
			}
			waited := time.Since(began)
			if err := r.Outcomes[0].Err; !errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Fatalf("a request past the units held: %+v, want a store error", r.Outcomes[0])
			}
			if want := decide.DefaultLeaseRefresh / 2; waited != want {
				t.Errorf("it waited %v for the fetch, want %v", waited, want)
			}
			break
		}
		close(s.release)
		synctest.Wait()
		if r := e.Decide(ctx, checks); !r.Allowed() {
			t.Errorf("after the fetch landed: %+v, want admitted", r.Outcomes[0])
		}
	})
}

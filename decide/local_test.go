package decide_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/limitcheck"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// switchable is a store that is unavailable while down is set, as a Redis
// store is during an outage.
type switchable struct {
	floodgate.BatchStore
	down atomic.Bool
}

var errDown = fmt.Errorf("redisstore: %w: connection refused", floodgate.ErrStoreUnavailable)

func (s *switchable) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if s.down.Load() {
		return floodgate.Decision{}, errDown
	}
	return s.BatchStore.AllowN(ctx, key, l, n)
}

func (s *switchable) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	if s.down.Load() {
		for i := range items {
			results[i] = floodgate.BatchResult{Err: errDown}
		}
		return
	}
	s.BatchStore.AllowBatch(ctx, items, results)
}

func (s *switchable) RefundN(ctx context.Context, key string, l floodgate.Limit, n int64) error {
	if s.down.Load() {
		return errDown
	}
	return s.BatchStore.RefundN(ctx, key, l, n)
}

func (s *switchable) Reset(ctx context.Context, key string, l floodgate.Limit) error {
	if s.down.Load() {
		return errDown
	}
	return s.BatchStore.Reset(ctx, key, l)
}

// failingStore fails every call with err.
type failingStore struct {
	floodgate.Store
	err error
}

func (s failingStore) AllowN(context.Context, string, floodgate.Limit, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, s.err
}

func nan() float64 { return math.NaN() }

// TestFallbackShare: while the store is down, a FailLocal check admits
// exactly its local share, says so, and keeps the outage's error; when the
// store is back, decisions are shared again.
func TestFallbackShare(t *testing.T) {
	for _, tc := range cacheLimits {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktest.NewManual(epoch)
			s := &switchable{BatchStore: memory.New(memory.WithClock(clock))}
			var logs bytes.Buffer
			e, err := decide.New(s, decide.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const share = 0.5
			local, err := limitcheck.Share(tc.limit, share)
			if err != nil {
				t.Fatal(err)
			}
			check := []decide.Check{{Rule: "r", Key: "k", Limit: tc.limit, Cost: 1, Failure: decide.FailLocal, LocalShare: share}}
			s.down.Store(true)
			admitted := int64(0)
			for range 2 * tc.limit.Quota {
				r := e.Decide(ctx, check)
				o := r.Outcomes[0]
				if !o.Local || !r.LocalFallback() || !o.Decided || !errors.Is(o.Err, floodgate.ErrStoreUnavailable) || o.Decision.Limit != local.Quota {
					t.Fatalf("during the outage: %+v, want a local decision under %s with the outage's error", o, local)
				}
				if r.Allowed() {
					admitted++
				} else if r.Verdict != decide.Denied || r.RetryAfter <= 0 {
					t.Fatalf("during the outage: %v retry %v", r.Verdict, r.RetryAfter)
				}
			}
			if admitted != local.Quota {
				t.Errorf("admitted %d during the outage, want the local quota %d", admitted, local.Quota)
			}
			if n := strings.Count(logs.String(), "decides the rule alone"); n != 1 {
				t.Errorf("%d log lines about the fallback, want 1 (throttled):\n%s", n, logs.String())
			}
			s.down.Store(false)
			r := e.Decide(ctx, check)
			if o := r.Outcomes[0]; !r.Allowed() || o.Local || o.Err != nil || o.Decision.Limit != tc.limit.Quota {
				t.Fatalf("after the outage: %v %+v, want the shared decision", r.Verdict, o)
			}
		})
	}
}

// TestFallbackAllOrNothing: checks decided locally are all or nothing, with
// each other and with the store's; a cost the local share can never pay is
// denied until the store is back; a check with no key fails open.
func TestFallbackAllOrNothing(t *testing.T) {
	s := &switchable{BatchStore: memory.New()}
	e := newEngine(t, s)
	ctx := context.Background()
	small := decide.Check{Rule: "small", Key: "s", Limit: floodgate.PerMinute(4), Failure: decide.FailLocal, LocalShare: 0.5}
	big := decide.Check{Rule: "big", Key: "b", Limit: floodgate.PerMinute(10), Failure: decide.FailLocal, LocalShare: 0.5}
	s.down.Store(true)
	admitted := 0
	for range 5 {
		if r := e.Decide(ctx, []decide.Check{big, small}); r.Allowed() {
			admitted++
		} else if r.Verdict != decide.Denied || r.Deciding != 1 {
			t.Fatalf("%v deciding %d, want denied by small", r.Verdict, r.Deciding)
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d with both rules, want small's local 2", admitted)
	}
	admitted = 0
	for range 5 {
		if r := e.Decide(ctx, []decide.Check{big}); r.Allowed() {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("big alone then admitted %d, want 5-2 = 3 (nothing taken by the denied requests)", admitted)
	}
	costly := big
	costly.Key, costly.Cost = "c", 6
	if r := e.Decide(ctx, []decide.Check{costly}); r.Verdict != decide.Denied || !r.Outcomes[0].Local || r.RetryAfter != decide.DefaultUnavailableRetryAfter {
		t.Errorf("cost 6 over a local 5: %v local %v retry %v, want denied locally for %v", r.Verdict, r.Outcomes[0].Local, r.RetryAfter, decide.DefaultUnavailableRetryAfter)
	}
	noKey := small
	noKey.Key, noKey.Err = "", errors.New("no API key")
	if r := e.Decide(ctx, []decide.Check{noKey}); !r.Allowed() || r.Outcomes[0].Local {
		t.Errorf("a FailLocal check with no key: %v local %v, want admitted (open)", r.Verdict, r.Outcomes[0].Local)
	}
	s.down.Store(false)
	if r := e.Decide(ctx, []decide.Check{small}); !r.Allowed() || r.Outcomes[0].Decision.Remaining != 3 {
		t.Errorf("after the outage: %v remaining %d, want the shared 4-1", r.Verdict, r.Outcomes[0].Decision.Remaining)
	}
}

// TestFallbackCheckOnly: a check that takes nothing (Envoy's hits_addend 0)
// under FailLocal, during an outage, looks at the local state: admitted with
// what remains of the local share, beside a check that takes one, and
// never an invalid cost.
func TestFallbackCheckOnly(t *testing.T) {
	s := &switchable{BatchStore: memory.New()}
	e := newEngine(t, s)
	ctx := context.Background()
	take := decide.Check{Rule: "r", Key: "k", Limit: floodgate.PerMinute(8), Failure: decide.FailLocal, LocalShare: 0.25}
	look := take
	look.CheckOnly = true
	s.down.Store(true)
	for i, want := range []int64{2, 2, 1, 1, 0} { // a look sees the state before its request takes
		checks := []decide.Check{look}
		if i == 1 || i == 3 {
			checks = append(checks, take)
		}
		r := e.Decide(ctx, checks)
		o := r.Outcomes[0]
		if r.Verdict == decide.Invalid || !o.Local || !o.Decision.Allowed || o.Decision.Remaining != want {
			t.Fatalf("request %d: %v (%v), look local %v %+v; want admitted locally with %d remaining", i, r.Verdict, r.Err(), o.Local, o.Decision, want)
		}
	}
	if r := e.Decide(ctx, []decide.Check{take}); r.Verdict != decide.Denied || !r.Outcomes[0].Local {
		t.Errorf("a third take of a local 2: %v, want denied locally", r.Verdict)
	}
}

// TestFallbackReset: a cached denial keeps answering during an outage, and
// a Reset through the engine clears it and the local state too.
func TestFallbackReset(t *testing.T) {
	s := &switchable{BatchStore: memory.New()}
	e := newEngine(t, s)
	ctx := context.Background()
	l := floodgate.PerMinute(2)
	check := []decide.Check{{Rule: "r", Key: "k", Limit: l, Failure: decide.FailLocal}}
	for range 2 {
		e.Decide(ctx, check)
	}
	if r := e.Decide(ctx, check); r.Verdict != decide.Denied || r.Outcomes[0].Local {
		t.Fatalf("over the shared limit: %v", r.Verdict)
	}
	s.down.Store(true)
	if r := e.Decide(ctx, check); r.Verdict != decide.Denied || !r.Outcomes[0].Cached {
		t.Fatalf("a cached denial during the outage: %v cached %v", r.Verdict, r.Outcomes[0].Cached)
	}
	if err := e.Reset(ctx, "k", l); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Reset during the outage = %v, want the store's error", err)
	}
	for i := range 3 {
		r := e.Decide(ctx, check)
		if want := i < 2; r.Allowed() != want || !r.Outcomes[0].Local {
			t.Fatalf("local request %d after the reset: %v local %v", i, r.Verdict, r.Outcomes[0].Local)
		}
	}
	if err := e.Reset(ctx, "k", l); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatal(err)
	}
	if r := e.Decide(ctx, check); !r.Allowed() {
		t.Errorf("after a second reset: %v, want the local state cleared", r.Verdict)
	}
}

// TestFallbackBounded: the local fallback's memory store holds at most
// Options.LocalMaxKeys keys, so a flood of new keys during an outage cannot
// grow it without end: a key pushed out by the flood starts afresh. With no
// bound it is kept.
func TestFallbackBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxKeys int
		evicted bool
	}{{"bounded", 256, true}, {"unbounded", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktest.NewManual(epoch)
			s := &switchable{BatchStore: memory.New(memory.WithClock(clock))}
			e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now, LocalMaxKeys: tc.maxKeys})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			s.down.Store(true)
			limit := floodgate.PerHour(1)
			check := func(key string) decide.Result {
				return e.Decide(ctx, []decide.Check{{Rule: "r", Key: key, Limit: limit, Failure: decide.FailLocal, LocalShare: 1}})
			}
			if r := check("victim"); !r.Allowed() || !r.LocalFallback() {
				t.Fatalf("first: %v", r.Verdict)
			}
			if r := check("victim"); r.Allowed() {
				t.Fatal("second within the hour admitted")
			}
			for i := range 20_000 {
				clock.Advance(time.Microsecond) // the flood is more recent than the victim
				check("flood-" + strconv.Itoa(i))
			}
			if r := check("victim"); r.Allowed() != tc.evicted {
				t.Errorf("the victim after 20,000 new keys: admitted %v, want %v", r.Allowed(), tc.evicted)
			}
		})
	}
}

// TestOutcomeLimit: a denial counted by this instance alone names its
// share of the limit; one the store decided, or an outcome with no
// decision, names the rule's own limit.
func TestOutcomeLimit(t *testing.T) {
	l := floodgate.PerMinute(8)
	outage := failingStore{err: floodgate.ErrStoreUnavailable}
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		check decide.Check
		want  floodgate.Limit
	}{
		{"store decided", memory.New(), decide.Check{Rule: "r", Key: "k", Limit: l, Failure: decide.FailLocal, LocalShare: 0.25}, l},
		{"local", outage, decide.Check{Rule: "r", Key: "k", Limit: l, Failure: decide.FailLocal, LocalShare: 0.25}, floodgate.PerMinute(2)},
		{"fail closed", outage, decide.Check{Rule: "r", Key: "k", Limit: l, Failure: decide.FailClosed}, l},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := decide.New(tc.store, decide.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			checks := []decide.Check{tc.check}
			res := e.Decide(t.Context(), checks)
			if got := res.Outcomes[0].Limit; got != tc.want {
				t.Errorf("Outcome.Limit = %v, want %v (outcome %+v)", got, tc.want, res.Outcomes[0])
			}
		})
	}
}

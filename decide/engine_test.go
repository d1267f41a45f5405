package decide_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

var errScript = errors.New("redisstore: script reply malformed")

// faulty wraps a store and fails the calls for the keys in fail with err.
type faulty struct {
	floodgate.Store
	mu      sync.Mutex
	fail    map[string]error
	refunds []string
}

func (f *faulty) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	f.mu.Lock()
	err := f.fail[key]
	f.mu.Unlock()
	if err != nil {
		return floodgate.Decision{}, err
	}
	return f.Store.AllowN(ctx, key, l, n)
}

func (f *faulty) RefundN(ctx context.Context, key string, l floodgate.Limit, n int64) error {
	f.mu.Lock()
	f.refunds = append(f.refunds, key)
	f.mu.Unlock()
	return f.Store.RefundN(ctx, key, l, n)
}

// sequential hides a store's AllowBatch, so the engine takes its one-call-
// per-check path.
type sequential struct{ floodgate.Store }

func newEngine(t *testing.T, s floodgate.Store) *decide.Engine {
	t.Helper()
	e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func remaining(t *testing.T, s floodgate.Store, key string, l floodgate.Limit) int64 {
	t.Helper()
	d, err := s.AllowN(context.Background(), key, l, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed {
		return 0
	}
	if err := s.RefundN(context.Background(), key, l, 1); err != nil {
		t.Fatal(err)
	}
	return d.Remaining + 1
}

// stores returns the store variants every engine test runs on: the memory
// store as it is (a BatchStore when it has AllowBatch) and behind a wrapper
// that hides batches.
func stores() map[string]func() floodgate.Store {
	return map[string]func() floodgate.Store{
		"batch":      func() floodgate.Store { return memory.New() },
		"sequential": func() floodgate.Store { return sequential{memory.New()} },
	}
}

func TestAllOrNothing(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			s := newStore()
			e := newEngine(t, s)
			small, big := floodgate.PerMinute(2), floodgate.PerMinute(10)
			checks := func() []decide.Check {
				return []decide.Check{
					{Rule: "big", Key: "k-big", Limit: big},
					{Rule: "small", Key: "k-small", Limit: small},
					{Rule: "bucket", Key: "k-bucket", Limit: floodgate.NewLimit(floodgate.TokenBucket, 10, time.Minute), Cost: 2},
				}
			}
			ctx := context.Background()
			for i := range 2 {
				r := e.Decide(ctx, checks())
				if !r.Allowed() || r.Deciding != 1 {
					t.Fatalf("request %d: %v deciding %d, want admitted by the most restrictive (1)", i, r.Verdict, r.Deciding)
				}
			}
			r := e.Decide(ctx, checks())
			if r.Verdict != decide.Denied || r.Deciding != 1 || r.RetryAfter <= 0 {
				t.Fatalf("third request: %v deciding %d retry %v, want denied by small", r.Verdict, r.Deciding, r.RetryAfter)
			}
			if got := r.Outcomes[0].Decision.Remaining; got != 8 {
				t.Errorf("big's Remaining in the denied request = %d, want 8 (nothing taken)", got)
			}
			if got, want := remaining(t, s, "k-big", big), int64(8); got != want {
				t.Errorf("big remaining after the denial = %d, want %d", got, want)
			}
			if got, want := remaining(t, s, "k-bucket", floodgate.NewLimit(floodgate.TokenBucket, 10, time.Minute)), int64(6); got != want {
				t.Errorf("bucket remaining after the denial = %d, want %d", got, want)
			}
		})
	}
}

func TestErrorPolicy(t *testing.T) {
	lim := floodgate.PerMinute(1)
	unavailable := fmt.Errorf("%w: dial tcp: connection refused", floodgate.ErrStoreUnavailable)
	tests := []struct {
		name        string
		err         error
		mode        decide.FailureMode
		shadow      bool
		want        decide.Verdict
		wantRefunds int
	}{
		{"script error, fail open", errScript, decide.FailOpen, false, decide.StoreError, 1},
		{"script error, fail closed", errScript, decide.FailClosed, false, decide.StoreError, 1},
		{"outage, fail open", unavailable, decide.FailOpen, false, decide.Admitted, 0},
		{"outage, fail closed", unavailable, decide.FailClosed, false, decide.Unavailable, 1},
		{"deadline, fail closed", context.DeadlineExceeded, decide.FailClosed, false, decide.Unavailable, 1},
		{"script error in a shadow rule", errScript, decide.FailClosed, true, decide.Admitted, 0},
		{"outage in a shadow rule", unavailable, decide.FailClosed, true, decide.Admitted, 0},
		{"invalid limit from the store", floodgate.ErrInvalidLimit, decide.FailOpen, false, decide.Invalid, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &faulty{Store: sequential{memory.New()}, fail: map[string]error{"bad": tt.err}}
			e := newEngine(t, f)
			for i := range 3 {
				r := e.Decide(context.Background(), []decide.Check{
					{Rule: "ok", Key: fmt.Sprint("ok", i), Limit: lim},
					{Rule: "bad", Key: "bad", Limit: lim, Failure: tt.mode, Shadow: tt.shadow},
				})
				if r.Verdict != tt.want {
					t.Fatalf("request %d: verdict %v, want %v (err %v)", i, r.Verdict, tt.want, r.Err())
				}
				if r.Allowed() != (tt.want == decide.Admitted) {
					t.Fatalf("Allowed() = %v with verdict %v", r.Allowed(), r.Verdict)
				}
				if tt.want != decide.Admitted {
					if r.Deciding != 1 || !errors.Is(r.Err(), tt.err) {
						t.Errorf("deciding %d err %v, want check 1 and %v", r.Deciding, r.Err(), tt.err)
					}
					if got := remaining(t, f.Store, fmt.Sprint("ok", i), lim); got != 1 {
						t.Errorf("the admitted rule kept its cost: remaining %d, want 1", got)
					}
				}
				if tt.want == decide.Unavailable && r.RetryAfter != decide.DefaultUnavailableRetryAfter {
					t.Errorf("RetryAfter = %v, want %v", r.RetryAfter, decide.DefaultUnavailableRetryAfter)
				}
			}
			if got := len(f.refunds); got != 3*tt.wantRefunds {
				t.Errorf("%d refunds, want %d", got, 3*tt.wantRefunds)
			}
		})
	}
}

func TestShadow(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			s := newStore()
			e := newEngine(t, s)
			ctx := context.Background()
			enforced, shadow := floodgate.PerMinute(3), floodgate.PerMinute(1)
			checks := []decide.Check{
				{Rule: "enforced", Key: "e", Limit: enforced},
				{Rule: "shadow", Key: "s", Limit: shadow, Shadow: true},
			}
			want := []decide.Verdict{decide.Admitted, decide.Denied, decide.Denied}
			for i, w := range want {
				r := e.Decide(ctx, checks)
				if !r.Allowed() || r.Deciding != 0 {
					t.Fatalf("request %d: %v deciding %d, want admitted, deciding 0", i, r.Verdict, r.Deciding)
				}
				if o := r.Outcomes[1]; !o.Decided || o.Verdict != w {
					t.Fatalf("request %d: shadow outcome %+v, want decided %v", i, o, w)
				}
			}
			// Denied by the enforced rule: the shadow rule is not asked.
			r := e.Decide(ctx, checks)
			if r.Verdict != decide.Denied || r.Deciding != 0 || r.Outcomes[1].Decided {
				t.Fatalf("fourth request: %v deciding %d shadow %+v", r.Verdict, r.Deciding, r.Outcomes[1])
			}
			// A shadow rule alone: decided, never denying, never deciding.
			r = e.Decide(ctx, checks[1:])
			if !r.Allowed() || r.Deciding != -1 || r.Outcomes[0].Verdict != decide.Denied {
				t.Fatalf("shadow alone: %v deciding %d outcome %v", r.Verdict, r.Deciding, r.Outcomes[0].Verdict)
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	s := &faulty{Store: memory.New()}
	e := newEngine(t, s)
	lim := floodgate.PerMinute(5)
	tests := []struct {
		cost int64
		want error
	}{{-1, floodgate.ErrInvalidCost}, {6, floodgate.ErrCostExceedsLimit}}
	for _, tt := range tests {
		r := e.Decide(context.Background(), []decide.Check{
			{Rule: "a", Key: "a", Limit: lim},
			{Rule: "b", Key: "b", Limit: lim, Cost: tt.cost},
		})
		if r.Verdict != decide.Invalid || r.Deciding != 1 || !errors.Is(r.Err(), tt.want) {
			t.Errorf("cost %d: %v deciding %d err %v, want invalid by 1 (%v)", tt.cost, r.Verdict, r.Deciding, r.Err(), tt.want)
		}
		if r.Outcomes[0].Decided {
			t.Errorf("cost %d: the valid check was asked", tt.cost)
		}
	}
	if got := remaining(t, s, "a", lim); got != 5 {
		t.Errorf("remaining %d, want 5: an invalid request took quota", got)
	}
}

func TestDeciding(t *testing.T) {
	e := newEngine(t, memory.New())
	ctx := context.Background()
	// Equal remaining: the longest reset decides.
	r := e.Decide(ctx, []decide.Check{
		{Rule: "minute", Key: "m", Limit: floodgate.PerMinute(5)},
		{Rule: "hour", Key: "h", Limit: floodgate.PerHour(5)},
	})
	if r.Deciding != 1 {
		t.Errorf("deciding %d, want the hour rule (1)", r.Deciding)
	}
	// Two denials: the longer retry decides.
	checks := []decide.Check{
		{Rule: "second", Key: "s2", Limit: floodgate.PerSecond(1)},
		{Rule: "minute", Key: "m2", Limit: floodgate.PerMinute(1)},
	}
	e.Decide(ctx, checks[:1])
	e.Decide(ctx, checks[1:])
	r = e.Decide(ctx, checks)
	if r.Verdict != decide.Denied || r.Deciding != 1 || r.RetryAfter < 59*time.Second {
		t.Errorf("%v deciding %d retry %v, want denied by the minute rule", r.Verdict, r.Deciding, r.RetryAfter)
	}
	if r := e.Decide(ctx, nil); !r.Allowed() || r.Deciding != -1 {
		t.Errorf("no checks: %v deciding %d, want admitted, -1", r.Verdict, r.Deciding)
	}
}

// blocking answers only when its context is done.
type blocking struct{ floodgate.Store }

func (blocking) AllowN(ctx context.Context, _ string, _ floodgate.Limit, _ int64) (floodgate.Decision, error) {
	<-ctx.Done()
	return floodgate.Decision{}, fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, ctx.Err())
}

func TestTimeout(t *testing.T) {
	e, err := decide.New(blocking{memory.New()}, decide.Options{Timeout: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := e.Decide(context.Background(), []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerMinute(1), Failure: decide.FailClosed}})
	if r.Verdict != decide.Unavailable {
		t.Fatalf("verdict %v, want unavailable", r.Verdict)
	}
}

func TestNewRejects(t *testing.T) {
	for _, o := range []decide.Options{{Timeout: -1}, {UnavailableRetryAfter: -1}, {LogInterval: -1}} {
		if _, err := decide.New(memory.New(), o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	if _, err := decide.New(nil, decide.Options{}); err == nil {
		t.Error("New(nil store) accepted")
	}
}

// TestConcurrentExact: 64 goroutines send three-rule requests; every key's
// count equals the number of admitted requests that touched it.
func TestConcurrentExact(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			s := newStore()
			e := newEngine(t, s)
			shared, group, own := floodgate.PerHour(300), floodgate.PerHour(60), floodgate.PerHour(8)
			var mu sync.Mutex
			admitted := map[string]int64{}
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					checks := []decide.Check{
						{Rule: "shared", Key: "shared", Limit: shared},
						{Rule: "group", Key: fmt.Sprint("group", g%8), Limit: group},
						{Rule: "own", Key: fmt.Sprint("own", g), Limit: own},
					}
					for range 12 {
						if r := e.Decide(context.Background(), checks); r.Allowed() {
							mu.Lock()
							for _, c := range checks {
								admitted[c.Key]++
							}
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if name == "sequential" {
				// Without batches a request is not all or nothing at once: one
				// can be denied by a unit a sibling held and gave back a moment
				// later, and if no request comes after the give-back the unit is
				// left. Spend what is left, one request at a time: every unit
				// must be admissible, none lost or counted twice.
				for range 300 - admitted["shared"] {
					if r := e.Decide(context.Background(), []decide.Check{{Rule: "shared", Key: "shared", Limit: shared}}); r.Allowed() {
						admitted["shared"]++
					}
				}
			}
			if admitted["shared"] != 300 {
				t.Errorf("shared admitted %d, want exactly 300", admitted["shared"])
			}
			check := func(key string, l floodgate.Limit) {
				if got, want := remaining(t, s, key, l), l.Quota-admitted[key]; got != want {
					t.Errorf("%s: remaining %d, want %d (admitted %d)", key, got, want, admitted[key])
				}
			}
			check("shared", shared)
			for g := range 8 {
				check(fmt.Sprint("group", g), group)
			}
			for g := range 64 {
				check(fmt.Sprint("own", g), own)
			}
		})
	}
}

// faultyBatch is a BatchStore over the memory store whose items for the keys
// in fail get err, and whose items in refundFail report a failed give-back
// when the batch is denied.
type faultyBatch struct {
	*memory.Store
	fail       map[string]error
	refundFail map[string]bool
	refunds    int
}

func (f *faultyBatch) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	var ok []floodgate.BatchItem
	var idx []int
	for i, it := range items {
		if err := f.fail[it.Key]; err != nil {
			results[i] = floodgate.BatchResult{Err: err}
			continue
		}
		ok, idx = append(ok, it), append(idx, i)
	}
	sub := make([]floodgate.BatchResult, len(ok))
	f.Store.AllowBatch(ctx, ok, sub)
	denied := false
	for j, i := range idx {
		results[i] = sub[j]
		denied = denied || sub[j].Err == nil && !sub[j].Decision.Allowed
	}
	if denied {
		for i, it := range items {
			if f.refundFail[it.Key] && results[i].Err == nil && results[i].Decision.Allowed {
				// As a cross-slot refund that failed: the cost stays taken.
				_, _ = f.Store.AllowN(ctx, it.Key, it.Limit, it.Cost)
				results[i].RefundErr = fmt.Errorf("%w: refund timed out", floodgate.ErrStoreUnavailable)
			}
		}
	}
}

func (f *faultyBatch) RefundN(ctx context.Context, key string, l floodgate.Limit, n int64) error {
	f.refunds++
	return f.Store.RefundN(ctx, key, l, n)
}

// TestBatchErrorPolicy: the error policy holds on the batch path too.
func TestBatchErrorPolicy(t *testing.T) {
	lim := floodgate.PerMinute(1)
	unavailable := fmt.Errorf("%w: connection refused", floodgate.ErrStoreUnavailable)
	t.Run("script error never admits, and the others are given back", func(t *testing.T) {
		f := &faultyBatch{Store: memory.New(), fail: map[string]error{"bad": errScript}}
		e := newEngine(t, f)
		for i := range 3 {
			r := e.Decide(context.Background(), []decide.Check{
				{Rule: "ok", Key: "ok", Limit: lim},
				{Rule: "bad", Key: "bad", Limit: lim, Failure: decide.FailOpen},
			})
			if r.Verdict != decide.StoreError || r.Deciding != 1 {
				t.Fatalf("request %d: %v deciding %d, want a store error from check 1", i, r.Verdict, r.Deciding)
			}
		}
		if f.refunds != 3 {
			t.Errorf("%d refunds, want 3", f.refunds)
		}
		if got := remaining(t, f.Store, "ok", lim); got != 1 {
			t.Errorf("ok kept a cost: remaining %d, want 1", got)
		}
	})
	t.Run("fail-open outage admits, the others are counted", func(t *testing.T) {
		f := &faultyBatch{Store: memory.New(), fail: map[string]error{"down": unavailable}}
		e := newEngine(t, f)
		r := e.Decide(context.Background(), []decide.Check{
			{Rule: "ok", Key: "ok", Limit: lim},
			{Rule: "down", Key: "down", Limit: lim},
		})
		if !r.Allowed() || r.Outcomes[1].Verdict != decide.Unavailable || r.Deciding != 0 {
			t.Fatalf("%v deciding %d outcomes %+v", r.Verdict, r.Deciding, r.Outcomes)
		}
		if got := remaining(t, f.Store, "ok", lim); got != 0 {
			t.Errorf("ok was not counted: remaining %d, want 0", got)
		}
	})
	t.Run("a failed give-back keeps the denial a denial", func(t *testing.T) {
		f := &faultyBatch{Store: memory.New(), refundFail: map[string]bool{"ok": true}}
		e := newEngine(t, f)
		e.Decide(context.Background(), []decide.Check{{Rule: "full", Key: "full", Limit: lim}})
		r := e.Decide(context.Background(), []decide.Check{
			{Rule: "ok", Key: "ok", Limit: floodgate.PerMinute(5)},
			{Rule: "full", Key: "full", Limit: lim},
		})
		if r.Verdict != decide.Denied || r.Deciding != 1 || r.Outcomes[0].RefundErr == nil {
			t.Fatalf("%v deciding %d outcome 0 %+v, want denied by 1 with a RefundErr on 0", r.Verdict, r.Deciding, r.Outcomes[0])
		}
		if f.refunds != 0 {
			t.Errorf("%d refunds by the engine, want 0: the store reported its own failure", f.refunds)
		}
	})
}

// TestCheckErr: a check the front end could not build follows its failure
// mode, and the store is never asked about it.
// TestInvalidBeforeEverything: a cost that can never fit its limit is the
// caller's error even for a check the front end could not send (a server
// shedding load sets Check.Err), under every failure mode; a shadow check's
// invalid cost is reported as what the rule would refuse, and the request
// goes on.
func TestInvalidBeforeEverything(t *testing.T) {
	shed := errors.New("at its limit of concurrent requests")
	lim := floodgate.PerMinute(5)
	for _, mode := range []decide.FailureMode{decide.FailOpen, decide.FailClosed, decide.FailLocal} {
		e := newEngine(t, memory.New())
		r := e.Decide(context.Background(), []decide.Check{{Rule: "open", Key: "a", Limit: lim, Cost: 1000, Failure: mode, Err: shed}})
		if r.Verdict != decide.Invalid || r.Allowed() || !errors.Is(r.Err(), floodgate.ErrCostExceedsLimit) {
			t.Errorf("%s, shed: %v err %v, want invalid (cost exceeds limit)", mode, r.Verdict, r.Err())
		}
	}
	for name, newStore := range stores() {
		t.Run("shadow/"+name, func(t *testing.T) {
			s := newStore()
			e := newEngine(t, s)
			checks := []decide.Check{{Rule: "shadow", Key: "s", Limit: lim, Cost: 50, Shadow: true}}
			r := e.Decide(context.Background(), checks)
			if !r.Allowed() || r.Outcomes[0].Verdict != decide.Invalid || !r.Outcomes[0].WouldDeny() {
				t.Fatalf("shadow alone: %v outcome %+v, want admitted and the shadow invalid", r.Verdict, r.Outcomes[0])
			}
			with := append([]decide.Check{{Rule: "enforced", Key: "e", Limit: lim}}, checks...)
			r = e.Decide(context.Background(), with)
			if !r.Allowed() || !r.Outcomes[1].WouldDeny() {
				t.Errorf("with an enforced rule: %v outcome %+v, want admitted, the shadow would deny", r.Verdict, r.Outcomes[1])
			}
			if got := remaining(t, s, "e", lim); got != 4 {
				t.Errorf("enforced rule has %d left, want 4", got)
			}
		})
	}
}

func TestCheckErr(t *testing.T) {
	noKey := errors.New("no key in the request")
	for _, mode := range []decide.FailureMode{decide.FailOpen, decide.FailClosed} {
		f := &faulty{Store: memory.New(), fail: map[string]error{"": errScript}} // an asked keyless check would be a store error
		e := newEngine(t, f)
		lim := floodgate.PerMinute(5)
		r := e.Decide(context.Background(), []decide.Check{
			{Rule: "ok", Key: "ok", Limit: lim},
			{Rule: "keyless", Limit: lim, Failure: mode, Err: noKey},
		})
		want := map[decide.FailureMode]decide.Verdict{decide.FailOpen: decide.Admitted, decide.FailClosed: decide.Unavailable}[mode]
		if r.Verdict != want || r.Outcomes[1].Verdict != decide.Unavailable || !errors.Is(r.Outcomes[1].Err, noKey) {
			t.Errorf("%s: %v, outcome %+v; want %v", mode, r.Verdict, r.Outcomes[1], want)
		}
		if got, wantLeft := remaining(t, f.Store, "ok", lim), map[bool]int64{true: 4, false: 5}[mode == decide.FailOpen]; got != wantLeft {
			t.Errorf("%s: ok has %d left, want %d", mode, got, wantLeft)
		}
	}
}

// TestCheckOnly: a check-only check takes nothing, never denies, is
// decided whatever the other checks decide and is never refunded; its
// outage follows its failure mode. With and without batches.
func TestCheckOnly(t *testing.T) {
	l := floodgate.PerMinute(3)
	for _, batch := range []bool{true, false} {
		for _, tc := range []struct {
			name        string
			takenBefore int64 // cost taken from the enforced key first
			want        decide.Verdict
		}{
			{"admitted", 0, decide.Admitted},
			{"denied by the enforced check", 3, decide.Denied},
		} {
			t.Run(fmt.Sprintf("batch=%v/%s", batch, tc.name), func(t *testing.T) {
				mem := memory.New()
				f := &faulty{Store: mem}
				var s floodgate.Store = f
				if !batch {
					s = sequential{f}
				}
				e := newEngine(t, s)
				ctx := context.Background()
				if _, err := mem.AllowN(ctx, "peek", l, 2); err != nil {
					t.Fatal(err)
				}
				if tc.takenBefore > 0 {
					if _, err := mem.AllowN(ctx, "x", l, tc.takenBefore); err != nil {
						t.Fatal(err)
					}
				}
				checks := []decide.Check{
					{Rule: "peek", Key: "peek", Limit: l, CheckOnly: true, Cost: 7},
					{Rule: "x", Key: "x", Limit: l},
					{Rule: "y", Key: "y", Limit: l},
				}
				res := e.Decide(ctx, checks)
				if res.Verdict != tc.want {
					t.Fatalf("verdict %v, want %v", res.Verdict, tc.want)
				}
				o := res.Outcomes[0]
				if !o.Decided || o.Verdict != decide.Admitted || o.Decision.Remaining != 1 {
					t.Fatalf("check-only outcome %+v, want decided, admitted, Remaining 1", o)
				}
				for _, k := range f.refunds {
					if k == "peek" {
						t.Fatal("the check-only key was refunded")
					}
				}
				if got := remaining(t, mem, "peek", l); got != 1 {
					t.Fatalf("the check-only key has %d left, want 1 (it took nothing)", got)
				}
			})
		}
	}
	t.Run("outage follows the failure mode", func(t *testing.T) {
		f := &faulty{Store: memory.New(), fail: map[string]error{"peek": floodgate.ErrStoreUnavailable}}
		e := newEngine(t, f)
		res := e.Decide(context.Background(), []decide.Check{
			{Rule: "peek", Key: "peek", Limit: l, CheckOnly: true, Failure: decide.FailClosed},
			{Rule: "x", Key: "x", Limit: l},
		})
		if res.Verdict != decide.Unavailable || res.Deciding != 0 {
			t.Fatalf("verdict %v deciding %d, want Unavailable from the check-only check", res.Verdict, res.Deciding)
		}
	})
}

// TestCallerGone: a check the store could not decide because the caller's
// own context ended (a client's deadline shorter than a round trip, or its
// cancellation) never admits, even under a fail-open rule: otherwise any
// client could pass a fail-open rule by sending a tiny grpc-timeout. The
// engine's own deadline (Options.Timeout) is an outage, and a fail-open rule
// admits then.
func TestCallerGone(t *testing.T) {
	check := []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerMinute(1), Failure: decide.FailOpen}}
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Millisecond)
	}
	cancelled := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Millisecond, cancel)
		return ctx, cancel
	}
	forever := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	for _, tc := range []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		timeout time.Duration
		want    decide.Verdict
	}{
		{"the caller's deadline", short, 0, decide.Unavailable},
		{"the caller went away", cancelled, 0, decide.Unavailable},
		{"the engine's own deadline", forever, 20 * time.Millisecond, decide.Admitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := decide.New(blocking{memory.New()}, decide.Options{Timeout: tc.timeout, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.ctx()
			defer cancel()
			if r := e.Decide(ctx, check); r.Verdict != tc.want || r.Outcomes[0].Verdict != decide.Unavailable {
				t.Errorf("verdict %v (check %v), want %v", r.Verdict, r.Outcomes[0].Verdict, tc.want)
			}
		})
	}
}

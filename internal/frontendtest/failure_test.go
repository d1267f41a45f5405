package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// storeState is what every store of a failure run does.
type storeState int32

const (
	working storeState = iota // decides
	down                      // is unavailable: an outage
	broken                    // fails with an error that is not an outage
)

func (s storeState) String() string { return [...]string{"working", "down", "broken"}[s] }

// errBroken is a broken store's error: a plain error, neither an outage nor
// invalid input, as redisstore's ErrScript is to the engine.
var errBroken = errors.New("frontendtest: the store is broken")

// switchStore is a store that the test switches between working, down and
// broken. Down, it returns floodgate.ErrStoreUnavailable itself, unless
// realOutage: then the store behind it is really unavailable (a Redis the
// test stopped) and it passes every call on.
type switchStore struct {
	inner      floodgate.BatchStore
	state      *atomic.Int32 // a storeState, shared by every store of the run
	realOutage bool
}

var _ floodgate.BatchStore = (*switchStore)(nil)

// fail returns the error the store fails with in its state, or nil.
func (s *switchStore) fail() error {
	switch storeState(s.state.Load()) {
	case down:
		if !s.realOutage {
			return fmt.Errorf("%w: frontendtest: the store is down", floodgate.ErrStoreUnavailable)
		}
	case broken:
		return errBroken
	}
	return nil
}

func (s *switchStore) Allow(ctx context.Context, key string, limit floodgate.Limit) (floodgate.Decision, error) {
	return s.AllowN(ctx, key, limit, 1)
}

func (s *switchStore) AllowN(ctx context.Context, key string, limit floodgate.Limit, n int64) (floodgate.Decision, error) {
	if err := s.fail(); err != nil {
		return floodgate.Decision{}, err
	}
	return s.inner.AllowN(ctx, key, limit, n)
}

func (s *switchStore) RefundN(ctx context.Context, key string, limit floodgate.Limit, n int64) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.inner.RefundN(ctx, key, limit, n)
}

func (s *switchStore) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.inner.Reset(ctx, key, limit)
}

func (s *switchStore) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	if err := s.fail(); err != nil {
		for i := range items {
			results[i] = floodgate.BatchResult{Err: err}
		}
		return
	}
	s.inner.AllowBatch(ctx, items, results)
}

// The failure rules: one per failure mode, and a shadow rule, set to fail
// closed, which a shadow rule never does ("Shadow rules always fail open",
// docs/MIDDLEWARE.md and docs/ENVOY.md).
var failureRules = []rule{
	{name: "open", limit: floodgate.PerMinute(3), failure: decide.FailOpen},
	{name: "closed", limit: floodgate.NewTokenBucket(5, 5, time.Minute), failure: decide.FailClosed},
	{name: "local", limit: floodgate.NewLimit(floodgate.FixedWindow, 4, time.Minute), failure: decide.FailLocal, share: 0.5},
	{name: "shadow", limit: floodgate.NewLimit(floodgate.SlidingWindowCounter, 1, time.Minute), shadow: true, failure: decide.FailClosed},
}

// envoyFailureRules are failureRules as an Envoy rule file, the closed rule
// failing as closedMode (error or closed).
func envoyFailureRules(closedMode string) string {
	return `domain: fe
response_headers: true
descriptors:
  - key: open
    rate_limit: {name: open, unit: minute, requests_per_unit: 3, algorithm: sliding_window_log, failure_mode: open}
  - key: closed
    rate_limit: {name: closed, unit: minute, requests_per_unit: 5, algorithm: token_bucket, failure_mode: ` + closedMode + `}
  - key: local
    rate_limit: {name: local, unit: minute, requests_per_unit: 4, algorithm: fixed_window, failure_mode: local, local_share: 0.5}
  - key: shadow
    shadow_mode: true
    rate_limit: {name: shadow, unit: minute, requests_per_unit: 1, algorithm: sliding_window_counter, failure_mode: closed}
`
}

// envoyFailureFrontEnds are Envoy's service with the closed rule failing
// either way docs/ENVOY.md ("Failure modes") offers for what the other
// front ends call fail-closed, each with the documented mapping:
//
//   - failure_mode error: "the whole call fails with gRPC UNAVAILABLE, and
//     Envoy's failure_mode_deny decides": the other front ends' 503 (gRPC
//     UNAVAILABLE) is a failed call, which carries no response headers.
//   - failure_mode closed: "the descriptor answers OVER_LIMIT": the other
//     front ends' 503 is OVER_LIMIT, with the same headers (Retry-After the
//     engine's unavailable retry delay), and like the 503 without
//     Floodgate-Fallback when the local rule applied beside the closed
//     one: the call decided nothing.
//
// A store error is INTERNAL in both ("fails the call with INTERNAL whatever
// the failure mode"), a failed call without headers.
func envoyFailureFrontEnds() []envoyFrontEnd {
	noHeaders := func(want answer) answer { return answer{verdict: want.verdict, headers: map[string]string{}} }
	return []envoyFrontEnd{
		{name: "envoy, closed as error", rules: envoyFailureRules("error"), expect: func(_ step, want answer) answer {
			if want.verdict == unavailable || want.verdict == storeError {
				return noHeaders(want)
			}
			return want
		}},
		{name: "envoy, closed as closed", rules: envoyFailureRules("closed"), expect: func(st step, want answer) answer {
			switch want.verdict {
			case unavailable:
				return answer{verdict: denied, headers: want.headers}
			case storeError:
				return noHeaders(want)
			}
			return want
		}},
	}
}

// failureStep is a step taken with every store in state.
type failureStep struct {
	state storeState
	step
	want  verdict // what the front ends answer (before an expect mapping)
	local bool    // decided locally: Floodgate-Fallback: local
}

// fsteps returns n steps of rules in state, each answered want, and
// decided locally if the store is down, the local rule applies and the
// request is not answered unavailable by another rule.
func fsteps(state storeState, want verdict, n int, rules ...string) []failureStep {
	var out []failureStep
	local := state == down && slices.Contains(rules, "local") && want != unavailable
	for range n {
		out = append(out, failureStep{state: state, step: step{rules: rules}, want: want, local: local})
	}
	return out
}

// failureSequence takes every rule, alone and beside others, through a
// working store, an outage, a broken store and a working store again. The
// local rule's share is 2 of its 4; what the store counted before the outage
// counts again after it, and nothing decided during it.
func failureSequence() []failureStep {
	var s []failureStep
	add := func(steps ...[]failureStep) {
		for _, st := range steps {
			s = append(s, st...)
		}
	}
	add(
		fsteps(working, admitted, 1, "open"),
		fsteps(working, admitted, 1, "closed"),
		fsteps(working, admitted, 1, "local"),
		fsteps(working, admitted, 1, "shadow"),
		fsteps(working, admitted, 1, "open", "local"),

		fsteps(down, admitted, 2, "open"),
		fsteps(down, unavailable, 2, "closed"),
		fsteps(down, admitted, 2, "local"),
		fsteps(down, denied, 1, "local"),
		fsteps(down, admitted, 2, "shadow"),
		fsteps(down, unavailable, 1, "open", "closed"),
		fsteps(down, admitted, 2, "open", "local"),
		fsteps(down, denied, 1, "open", "local"),
		fsteps(down, denied, 1, "local", "shadow"),
		fsteps(down, admitted, 1, "open", "shadow"),
		fsteps(down, unavailable, 1, "closed", "shadow"),

		fsteps(broken, storeError, 1, "open"),
		fsteps(broken, storeError, 1, "closed"),
		fsteps(broken, storeError, 1, "local"),
		fsteps(broken, admitted, 1, "shadow"),
		fsteps(broken, storeError, 1, "open", "local"),
		fsteps(broken, storeError, 1, "shadow", "closed"),

		fsteps(working, admitted, 2, "open"),
		fsteps(working, denied, 1, "open"),
		fsteps(working, admitted, 4, "closed"),
		fsteps(working, denied, 1, "closed"),
		fsteps(working, admitted, 3, "local"),
		fsteps(working, denied, 1, "local"),
		fsteps(working, admitted, 2, "open", "local"),
		fsteps(working, denied, 1, "open", "local"),
		fsteps(working, admitted, 2, "shadow"),

		// A second outage. The closed and local rules' denials just above
		// are in the over-limit cache (docs/RESILIENCE.md, "Over-limit
		// cache"): it answers them without asking the store, until their
		// retry delay; the closed rule's is 12s, the local rule's 60s.
		[]failureStep{
			{state: down, step: step{rules: []string{"closed"}}, want: denied},
			{state: down, step: step{rules: []string{"local"}}, want: denied},
			{state: down, step: step{advance: 13 * time.Second, rules: []string{"closed"}}, want: unavailable},
		},
		// Client 2's denial by the open rule is cached too (60s, 13s ago):
		// denied whatever the local rule would say.
		[]failureStep{{state: down, step: step{rules: []string{"open", "local"}}, want: denied}},
		// Clients 3 and 4 are new: a share of their own each, on this
		// instance (client 3 for single-rule requests only and client 4 for
		// requests of several rules, as the front ends of one rule take
		// only the former). A request names its rules in the order they
		// are configured in: the middleware lists them in that order in
		// RateLimit-Policy, Envoy in the order of the request's
		// descriptors.
		[]failureStep{
			{state: down, step: step{rules: []string{"local"}, client: 3}, want: admitted, local: true},
			{state: down, step: step{rules: []string{"local"}, client: 3}, want: admitted, local: true},
			{state: down, step: step{rules: []string{"local"}, client: 3}, want: denied, local: true},
			{state: down, step: step{rules: []string{"open", "local"}, client: 4}, want: admitted, local: true},
			{state: down, step: step{rules: []string{"open", "local", "shadow"}, client: 4}, want: admitted, local: true},
			{state: down, step: step{rules: []string{"open", "local", "shadow"}, client: 4}, want: denied, local: true},
		},
		// A minute on, every window has moved on: the cached denials have
		// expired, and the local window is fresh.
		[]failureStep{{state: down, step: step{advance: 61 * time.Second, rules: []string{"local"}}, want: admitted, local: true}},
		fsteps(down, admitted, 1, "local"),
		fsteps(down, denied, 1, "local"),
		fsteps(down, unavailable, 1, "closed", "local"),

		// Back: the shared limits again, in windows that have moved on.
		fsteps(working, admitted, 3, "open"),
		fsteps(working, denied, 1, "open"),
		fsteps(working, admitted, 4, "local"),
		fsteps(working, denied, 1, "local"),
		fsteps(working, admitted, 1, "closed", "local"),
	)
	return s
}

// runFailures sends the failure sequence to every front end, switching
// their stores as each step says (setState), and compares their answers,
// step by step: the verdict, the rate-limit headers and Floodgate-Fallback,
// which every answer decided locally carries, and no other.
func runFailures(t *testing.T, newStore func(name string) floodgate.Store, clock *clocktest.Manual, setState func(storeState)) {
	fes := frontEnds(t, newStore, clock, failureRules, envoyFailureFrontEnds())
	state := working
	for i, st := range failureSequence() {
		if st.state != state {
			setState(st.state)
			state = st.state
		}
		clock.Advance(st.advance)
		want := ask(t, fes, i, st.step)
		if want.verdict != st.want {
			t.Errorf("step %d %v, store %s: %s, want %s", i, st.rules, st.state, want, st.want)
		}
		if err := noShadow(failureRules, st.rules, want); err != "" {
			t.Errorf("step %d %v, store %s: %s: %s", i, st.rules, st.state, err, want)
		}
		if got, ok := want.headers[ratelimitheader.HeaderFallback]; ok != st.local || ok && got != ratelimitheader.FallbackLocal {
			t.Errorf("step %d %v, store %s: %s %q, want it only on a local decision", i, st.rules, st.state, ratelimitheader.HeaderFallback, got)
		}
	}
}

// TestFailuresMemory runs the failure sequence on memory stores behind
// switchStores: an outage and a broken store are the wrapper's errors.
func TestFailuresMemory(t *testing.T) {
	clock := clocktest.NewManual(time.Unix(1_800_000_000, 0))
	var state atomic.Int32
	runFailures(t, func(string) floodgate.Store {
		return &switchStore{inner: memory.New(memory.WithClock(clock)), state: &state}
	}, clock, func(s storeState) { state.Store(int32(s)) })
}

// TestFailuresRedis runs the failure sequence on a Redis server of the
// test's own, which the outage really stops (SIGSTOP): every call of the
// front ends' Redis stores times out, or fails at once from the store's
// open breaker. A broken store is still the wrapper's error.
func TestFailuresRedis(t *testing.T) {
	srv := redistest.Spawn(t)
	clock := clocktest.NewManual(time.Unix(1_800_000_000, 0))
	var state atomic.Int32
	var stores []*redisstore.Store
	stopped := false
	t.Cleanup(func() {
		if stopped {
			srv.Cont(t)
		}
	})
	runFailures(t, func(name string) floodgate.Store {
		// The store's timeout is generous for a loaded machine; one
		// failure opens its breaker, so that an outage costs each store one
		// timeout, not five.
		s, err := redisstore.New(redisstore.Config{Mode: redisstore.ModeStandalone, Addrs: []string{srv.Addr}, KeyPrefix: name + ":",
			Timeout: time.Second, BreakerFailures: 1, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		stores = append(stores, s)
		return &switchStore{inner: s, state: &state, realOutage: true}
	}, clock, func(s storeState) {
		switch {
		case s == down:
			srv.Stop(t)
			stopped = true
		case stopped:
			// The outage was real: every store saw the stopped Redis and
			// opened its breaker.
			for i, st := range stores {
				if h := st.Health(); h.Available() {
					t.Errorf("Redis store %d available while its Redis is stopped: %+v", i, h)
				}
			}
			srv.Cont(t)
			stopped = false
			// Each store's breaker closes at its next probe's answer.
			deadline := time.Now().Add(30 * time.Second)
			for _, st := range stores {
				for !st.Health().Available() {
					if time.Now().After(deadline) {
						t.Fatalf("a Redis store still unavailable 30s after SIGCONT: %+v", st.Health())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		state.Store(int32(s))
	})
}

// Package decide is floodgate's one decision path: a store and a request's
// checks (rule, key, cost, shadow, failure mode) in, one [Result] out. Every
// front end (the net/http middleware, the gRPC interceptors, the server's
// API and forward auth, Envoy's rate-limit service, the CLI) translates its
// protocol into checks and the Result back, and decides nothing itself.
//
// The engine owns, once:
//
//   - the error policy: only an outage (an error matching
//     [floodgate.ErrStoreUnavailable], or the decision's deadline) follows a
//     check's [FailureMode]; invalid input is the caller's error
//     ([Invalid]); any other store error never admits ([StoreError]);
//   - shadow checks: decided and reported, never denying, never the
//     deciding check;
//   - all or nothing: a request that is not admitted consumes nothing (one
//     call to a [floodgate.BatchStore], else one per check and refunds);
//   - the deciding check and one deadline ([Options.Timeout]);
//   - the local fallback ([FailLocal]): during an outage a check of that
//     mode is decided in this process at its share of the limit;
//   - the over-limit cache ([CacheOptions]): a denial answers further
//     requests for the same key and limit until its retry delay has passed.
//     [Engine.Reset] and [Engine.Refund] clear it.
package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
	"github.com/floodgate-rl/floodgate/internal/logthrottle"
	"github.com/floodgate-rl/floodgate/internal/storeerr"
	"github.com/floodgate-rl/floodgate/memory"
)

// Defaults for the zero fields of Options.
const (
	// DefaultUnavailableRetryAfter is the retry delay front ends send when a
	// fail-closed check could not be decided.
	DefaultUnavailableRetryAfter = 5 * time.Second
	// DefaultLogInterval is the least time between two log lines about
	// failures.
	DefaultLogInterval = 30 * time.Second
)

// Options configure an Engine. The zero value of each field picks its
// default.
type Options struct {
	// Timeout, if positive, bounds a request's whole decision: the store
	// calls share one deadline, and a decision that passes it counts as an
	// outage. Zero: no deadline beyond the caller's context and the store's
	// own per-call timeout.
	Timeout time.Duration
	// UnavailableRetryAfter is Result.RetryAfter when a fail-closed check
	// could not be decided. Zero: DefaultUnavailableRetryAfter.
	UnavailableRetryAfter time.Duration
	// Logger receives a warning about outages, store errors and failed
	// refunds, at most one line per LogInterval. Nil: slog.Default().
	Logger *slog.Logger
	// LogInterval is the least time between two failure log lines. Zero:
	// DefaultLogInterval.
	LogInterval time.Duration
	// Now tells the time for log throttling, the over-limit cache and the
	// local fallback's memory store: the application's clock, which need
	// not agree with the store's. Nil: time.Now.
	Now func() time.Time
	// OverLimitCache bounds the over-limit cache, or turns it on or off. The
	// zero value: on, with the default bounds, unless the store says it
	// decides in this process (an InProcess method reporting true, as the
	// memory store's does): it answers a denial as fast as the cache would.
	OverLimitCache CacheOptions
	// LocalMaxKeys bounds the keys the local fallback's memory store holds
	// (FailLocal checks during an outage), as memory.WithMaxKeys does, so a
	// flood of new keys during an outage cannot grow it without end.
	// Zero: DefaultLocalMaxKeys; negative: no bound.
	LocalMaxKeys int
	// OnStoreCall, if set, is told the time each call to the store took:
	// op is "allow" (one AllowN, or one AllowBatch for all of a request's
	// checks), "lease", "refund" or "reset". Answers from the over-limit
	// cache and the local fallback make no store call. ctx carries the
	// call's span, if traced (for exemplars).
	OnStoreCall func(ctx context.Context, op string, took time.Duration)
	// TracerProvider, if set, gives the engine's tracer: a span per
	// decision, and a child span per store call (docs/OBSERVABILITY.md).
	// Nil: no spans, at no cost.
	TracerProvider trace.TracerProvider
}

// DefaultLocalMaxKeys is the most keys the local fallback holds by default
// (docs/RESILIENCE.md gives its memory).
const DefaultLocalMaxKeys = 1 << 18

// Engine decides requests against one store. Create it with New; it is safe
// for concurrent use and holds no goroutines.
type Engine struct {
	store       floodgate.Store
	batch       floodgate.BatchStore // store, if it decides batches
	timeout     time.Duration
	unavailable time.Duration
	warn        *logthrottle.Logger
	now         func() time.Time
	start       time.Time       // the engine's creation, the origin of its microseconds
	system      bool            // now is time.Now
	cache       *overLimitCache // nil: off
	leases      leaseTable
	changes     changes
	inProcess   bool                 // the store decides in this process: no cache, no leases
	local       func() *memory.Store // the FailLocal store, made on first use
	localMade   atomic.Bool          // local has been made
	onCall      func(ctx context.Context, op string, took time.Duration)
	tracer      trace.Tracer // nil: no spans
}

// New returns an engine deciding with store. An unusable option is an
// error that names it as Options does (such as
// OverLimitCache.MaxBytes; Store for a nil store), so that front ends
// whose options carry the same names can report it as their own.
func New(store floodgate.Store, opts Options) (*Engine, error) {
	if store == nil {
		return nil, fmt.Errorf("decide: %w", &fielderr.Error{Field: "Store", Value: "<nil>", Reason: "is required"})
	}
	for _, d := range []struct {
		field, zero string
		d           time.Duration
	}{
		{"Timeout", "no deadline of the engine's own: the store bounds each call", opts.Timeout},
		{"UnavailableRetryAfter", "the default " + DefaultUnavailableRetryAfter.String(), opts.UnavailableRetryAfter},
		{"LogInterval", "the default " + DefaultLogInterval.String(), opts.LogInterval},
	} {
		if d.d < 0 {
			return nil, fmt.Errorf("decide: %w", &fielderr.Error{Field: d.field, Value: d.d.String(), Reason: "must not be negative (0: " + d.zero + ")"})
		}
	}
	if opts.UnavailableRetryAfter == 0 {
		opts.UnavailableRetryAfter = DefaultUnavailableRetryAfter
	}
	if opts.LogInterval == 0 {
		opts.LogInterval = DefaultLogInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	systemClock := opts.Now == nil
	if systemClock {
		opts.Now = time.Now
	}
	cache, err := newCache(opts.OverLimitCache)
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	l, ok := store.(inProcess)
	local := ok && l.InProcess()
	if local && !opts.OverLimitCache.Enabled {
		cache = nil // it decides a denial as fast as the cache would answer it
	}
	e := &Engine{
		store:       store,
		timeout:     opts.Timeout,
		unavailable: opts.UnavailableRetryAfter,
		warn:        logthrottle.New(opts.Logger, opts.LogInterval, opts.Now),
		now:         opts.Now,
		start:       opts.Now(),
		system:      systemClock,
		cache:       cache,
		inProcess:   local,
		onCall:      opts.OnStoreCall,
	}
	maxAge := opts.OverLimitCache.MaxAge
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	e.changes.init(store, maxAge)
	e.leases.ctx, e.leases.cancel = context.WithCancel(context.Background())
	localKeys := opts.LocalMaxKeys
	if localKeys == 0 {
		localKeys = DefaultLocalMaxKeys
	}
	e.local = sync.OnceValue(func() *memory.Store {
		defer e.localMade.Store(true)
		return memory.New(memory.WithClock(clockFunc(opts.Now)), memory.WithMaxKeys(localKeys))
	})
	e.batch, _ = store.(floodgate.BatchStore)
	if opts.TracerProvider != nil {
		e.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	return e, nil
}

// inProcess is implemented by stores that decide in this process, for which
// the over-limit cache would only repeat the store at the same speed.
type inProcess interface{ InProcess() bool }

// UnavailableRetryAfter returns the retry delay of a request that a
// fail-closed check could not decide (Options.UnavailableRetryAfter).
func (e *Engine) UnavailableRetryAfter() time.Duration { return e.unavailable }

// Decide decides a request's checks and returns the result. It never panics
// and never admits on a store error that is not an outage.
func (e *Engine) Decide(ctx context.Context, checks []Check) Result {
	return e.DecideInto(ctx, checks, nil)
}

// DecideInto is Decide with the Outcomes written to outcomes when it is long
// enough (a new slice otherwise): front ends on a hot path keep that buffer
// on the stack.
func (e *Engine) DecideInto(ctx context.Context, checks []Check, outcomes []Outcome) Result {
	if len(outcomes) < len(checks) {
		outcomes = make([]Outcome, len(checks))
	}
	r := Result{Deciding: -1, Checks: checks, Outcomes: outcomes[:len(checks)]}
	clear(r.Outcomes)
	ctx, span := e.startDecision(ctx, checks)
	e.decide(ctx, checks, &r)
	for i := range r.Outcomes {
		if o := &r.Outcomes[i]; !o.Local {
			o.Limit = checks[i].Limit
		}
	}
	if span != nil {
		r.SpanContext = span.SpanContext()
		endDecision(span, &r)
	}
	return r
}

func (e *Engine) decide(ctx context.Context, checks []Check, r *Result) {
	if len(checks) == 0 {
		return
	}
	caller := ctx
	if e.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	// Invalid costs are the caller's error: found before the store is asked,
	// so nothing is taken for a request that could never be decided.
	enforced, shadows := 0, 0
	// An invalid cost is found even for a check the front end could not
	// send (Check.Err, such as a server shedding load): a cost that can
	// never fit is the caller's error under every failure mode.
	for i := range checks {
		c := &checks[i]
		if c.Blocked {
			r.Outcomes[i] = blocked(c)
			continue
		}
		if err := checkCost(c); err != nil {
			if c.OverQuotaDenies && errors.Is(err, floodgate.ErrCostExceedsLimit) && c.Limit.Validate() == nil {
				r.Outcomes[i] = Outcome{Verdict: Denied, Decided: true, Decision: floodgate.Decision{Limit: c.Limit.Quota}, Err: err, final: true}
				continue
			}
			r.Outcomes[i] = Outcome{Verdict: Invalid, Err: err}
			if c.Shadow {
				e.report(ctx, c, &r.Outcomes[i]) // would refuse it: said, never denying
			}
			continue
		}
		if c.Err != nil {
			r.Outcomes[i] = Outcome{Verdict: Unavailable, Err: c.Err}
			continue
		}
		switch {
		case c.CheckOnly:
		case c.Shadow:
			shadows++
		default:
			enforced++
		}
	}
	if !e.verdictSoFar(checks, r) {
		return
	}
	var now int64
	if e.cache != nil {
		now = e.micros()
		var hit bool
		if hit, now = e.cached(ctx, checks, r.Outcomes, now); hit {
			enforced = 0 // denied from memory: the store is not asked
		}
		// End the flights this request joined even if a store call
		// panics, so that no key's callers are left waiting.
		defer e.finishFlights(checks, r.Outcomes)
	}
	if enforced > 0 && e.anyLeased(checks) {
		if e.decideLeased(ctx, checks, r.Outcomes) {
			enforced = 0 // denied from a lease: the others are not asked
		} else {
			enforced = unsettled(checks, r.Outcomes)
		}
	}
	// Check-only checks (a cost of 0) read the store: they take nothing,
	// so nothing about them is cached or given back.
	for i := range checks {
		if c := &checks[i]; c.CheckOnly && !r.Outcomes[i].settled() {
			e.allowOne(ctx, c, &r.Outcomes[i])
			r.Outcomes[i].taken = false
		}
	}
	switch {
	case enforced == 1:
		for i := range checks {
			if !checks[i].Shadow && !checks[i].CheckOnly && !r.Outcomes[i].settled() {
				e.allowOne(ctx, &checks[i], &r.Outcomes[i])
			}
		}
	case enforced > 1 && e.batch != nil:
		e.allowBatch(ctx, checks, r.Outcomes)
	case enforced > 1:
		e.allowEach(ctx, checks, r.Outcomes)
	}
	outage := anyUnavailable(r.Outcomes)
	if outage {
		e.fallback(ctx, checks, r.Outcomes)
	}
	if e.cache != nil {
		if enforced > 0 {
			e.remember(checks, r.Outcomes, now, false)
		}
		e.finishFlights(checks, r.Outcomes)
	}
	e.conclude(ctx, checks, r, caller.Err() != nil)
	// Shadow checks are skipped after an outage of an enforced one: they
	// would wait out the store's timeout a second time.
	if r.Verdict == Admitted && shadows > 0 && !outage {
		e.decideShadows(ctx, checks, r.Outcomes)
	}
}

// decideShadows decides the shadow checks of an admitted request.
func (e *Engine) decideShadows(ctx context.Context, checks []Check, out []Outcome) {
	var now int64
	if e.cache != nil {
		now = e.micros()
	}
	for i := range checks {
		c, o := &checks[i], &out[i]
		if !c.Shadow || c.CheckOnly || o.settled() {
			continue
		}
		if e.cache == nil || !e.cachedOne(c, o, now) {
			e.allowOne(ctx, c, o)
		}
		e.report(ctx, c, o)
	}
	if e.cache != nil {
		e.remember(checks, out, now, true)
	}
}

// verdictSoFar sets r's verdict from what the enforced checks decided alone
// before the store is asked (an invalid cost first, then a denial no retry
// can lift), and reports whether the store should still be asked.
func (e *Engine) verdictSoFar(checks []Check, r *Result) bool {
	for _, v := range [...]Verdict{Invalid, Denied} {
		for i := range checks {
			if o := &r.Outcomes[i]; o.Verdict == v && !checks[i].Shadow && (v == Invalid || o.final) {
				r.Verdict, r.Deciding = v, i
				return false
			}
		}
	}
	return true
}

// blocked is the outcome of a Blocked check: a denial no retry can lift,
// or for a check-only one nothing over.
func blocked(c *Check) Outcome {
	if c.CheckOnly {
		return Outcome{Verdict: Admitted, Decided: true, Decision: floodgate.Decision{Allowed: true}, final: true}
	}
	return Outcome{Verdict: Denied, Decided: true, final: true}
}

// settled reports whether the check needs no store call: it failed before
// one, decided alone, or was decided through its lease.
func (o *Outcome) settled() bool { return o.Err != nil || o.final || o.Leased }

func checkCost(c *Check) error {
	if c.CheckOnly {
		return nil // the store validates the limit
	}
	if err := limitcheck.Cost(c.Limit, c.cost()); err != nil {
		return fmt.Errorf("rule %q: %w", c.Rule, err)
	}
	return nil
}

// allowOne asks the store about one check.
func (e *Engine) allowOne(ctx context.Context, c *Check, o *Outcome) {
	cctx, call := e.callStart(ctx, "allow", 1)
	d, err := e.store.AllowN(cctx, c.Key, c.Limit, c.cost())
	e.called(cctx, "allow", call, err)
	setOutcome(o, d, err)
}

// allowBatch asks a BatchStore about every enforced check at once.
func (e *Engine) allowBatch(ctx context.Context, checks []Check, out []Outcome) {
	var itemsBuf [8]floodgate.BatchItem
	var resultsBuf [8]floodgate.BatchResult
	var idxBuf [8]int
	items, results, idx := itemsBuf[:0], resultsBuf[:0], idxBuf[:0]
	for i := range checks {
		if c := &checks[i]; !c.Shadow && !c.CheckOnly && !out[i].settled() {
			items = append(items, floodgate.BatchItem{Key: c.Key, Limit: c.Limit, Cost: c.cost()})
			results = append(results, floodgate.BatchResult{})
			idx = append(idx, i)
		}
	}
	cctx, call := e.callStart(ctx, "allow", len(items))
	e.batch.AllowBatch(cctx, items, results)
	var err error
	for j := range results {
		if err = results[j].Err; err != nil {
			break
		}
	}
	e.called(cctx, "allow", call, err)
	for j, i := range idx {
		setOutcome(&out[i], results[j].Decision, results[j].Err)
		out[i].RefundErr = results[j].RefundErr
	}
	// A denied batch took nothing (but for items with a RefundErr). A store
	// that is not atomic across its items took the admitted ones for a
	// moment, so a denial another request met meanwhile must not stay
	// cached.
	if anyDenied(out, checks) {
		for j, i := range idx {
			if out[i].RefundErr == nil {
				out[i].giveBack(checks[i].cost())
			} else {
				out[i].taken = false
			}
			if results[j].Err == nil && results[j].Decision.Allowed && e.cache != nil {
				e.cache.invalidateOwn(checks[i].Key, checks, out)
			}
		}
	}
}

// allowEach asks a store without batches about each enforced check in turn.
// It goes on past a denial, so the request's retry delay accounts for every
// rule that denies, and stops at a failure that rejects the request.
func (e *Engine) allowEach(ctx context.Context, checks []Check, out []Outcome) {
	for i := range checks {
		c := &checks[i]
		if c.Shadow || c.CheckOnly || out[i].settled() {
			continue
		}
		e.allowOne(ctx, c, &out[i])
		if o := &out[i]; o.Err != nil && rank(c, o) > 0 {
			return
		}
	}
}

func anyUnavailable(out []Outcome) bool {
	for i := range out {
		if out[i].Verdict == Unavailable {
			return true
		}
	}
	return false
}

// anyDenied reports whether an enforced check was denied: a shadow check
// decided alone before the store (Blocked, over its quota) may already say
// Denied, and denies nothing.
func anyDenied(out []Outcome, checks []Check) bool {
	for i := range out {
		if out[i].Verdict == Denied && !checks[i].CheckOnly && !checks[i].Shadow {
			return true
		}
	}
	return false
}

// setOutcome classifies a store's answer for one check.
func setOutcome(o *Outcome, d floodgate.Decision, err error) {
	switch {
	case err == nil && d.Allowed:
		o.set(Outcome{Decision: d, Verdict: Admitted, Decided: true, taken: true})
	case err == nil:
		o.set(Outcome{Decision: d, Verdict: Denied, Decided: true})
	case storeerr.Invalid(err):
		o.set(Outcome{Verdict: Invalid, Err: err})
	case storeerr.Outage(err):
		o.set(Outcome{Verdict: Unavailable, Err: err})
	default:
		o.set(Outcome{Verdict: StoreError, Err: err})
	}
}

// The ranks of request verdicts: the caller's error first, then a store
// error, a denial (its retry delay is exact), and an outage of a FailError,
// then a FailClosed check.
const (
	rankInvalid    = 5
	rankStoreError = 4
	rankDenied     = 3
	rankFailError  = 2
	rankFailClosed = 1
)

// rank returns the rank of a check's outcome; 0 for one that admits.
func rank(c *Check, o *Outcome) int {
	switch {
	case o.Verdict == Invalid:
		return rankInvalid
	case o.Verdict == StoreError:
		return rankStoreError
	case o.Verdict == Denied:
		return rankDenied
	case o.Verdict == Unavailable && c.Mode() == FailError:
		return rankFailError
	case o.Verdict == Unavailable && c.Mode() == FailClosed:
		return rankFailClosed
	}
	return 0
}

// conclude sets the request's verdict from the enforced checks' outcomes,
// logs failures, and gives back what a request that is not admitted took.
// When the caller's own context has ended (gone), a check the store could
// not decide fails closed, not open: a client must not pass a fail-open
// rule by sending a deadline shorter than a round trip. One decided
// locally (FailLocal) keeps its local decision.
func (e *Engine) conclude(ctx context.Context, checks []Check, r *Result, gone bool) {
	best, bestRank := -1, 0
	for i := range checks {
		c, o := &checks[i], &r.Outcomes[i]
		if c.Shadow {
			continue
		}
		e.report(ctx, c, o)
		k := rank(c, o)
		if k == 0 && gone && o.Verdict == Unavailable && !o.Local {
			k = rankFailClosed
		}
		switch {
		case k > bestRank:
			best, bestRank = i, k
		case k == rankDenied && bestRank == rankDenied && o.Decision.RetryAfter > r.Outcomes[best].Decision.RetryAfter:
			best = i
		}
	}
	if best >= 0 {
		o := &r.Outcomes[best]
		r.Deciding, r.Verdict = best, o.Verdict
		switch o.Verdict {
		case Denied:
			r.RetryAfter = o.Decision.RetryAfter
		case Unavailable:
			r.RetryAfter = e.unavailable
		}
		e.refund(ctx, checks, r.Outcomes)
		return
	}
	for i := range checks {
		o := &r.Outcomes[i]
		if checks[i].Shadow || !o.Decided || o.final {
			continue
		}
		if m := r.Deciding; m < 0 || o.Decision.Remaining < r.Outcomes[m].Decision.Remaining ||
			o.Decision.Remaining == r.Outcomes[m].Decision.Remaining && o.Decision.ResetAfter > r.Outcomes[m].Decision.ResetAfter {
			r.Deciding = i
		}
	}
}

// report logs a check's failure, unless the caller went away.
func (e *Engine) report(ctx context.Context, c *Check, o *Outcome) {
	switch {
	case o.Verdict == Invalid && c.Shadow:
		e.warn.Warn(ctx, "floodgate: a shadow rule would refuse this request as invalid; the request goes on",
			slog.String("rule", c.Rule), slog.String("error", o.Err.Error()))
	case o.Err == nil || o.Verdict == Invalid || errors.Is(o.Err, context.Canceled):
	case o.Local:
		e.warn.Warn(ctx, "floodgate: rate-limit store unavailable; this instance decides the rule alone at its local share",
			slog.String("rule", c.Rule), slog.String("failure_mode", c.Mode().String()),
			slog.Float64("local_share", c.localShare()), slog.String("error", o.Err.Error()))
	case o.Verdict == Unavailable:
		e.warn.Warn(ctx, "floodgate: rate-limit rule cannot decide; applying its failure mode",
			slog.String("rule", c.Rule), slog.String("failure_mode", c.Mode().String()), slog.String("error", o.Err.Error()))
	default:
		msg := "floodgate: rate-limit store error; the request is not admitted"
		if c.Shadow {
			msg = "floodgate: rate-limit store error in a shadow rule"
		}
		e.warn.Warn(ctx, msg, slog.String("rule", c.Rule), slog.String("error", o.Err.Error()))
	}
}

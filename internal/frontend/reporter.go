package frontend

import (
	"fmt"
	"sync/atomic"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// Reporter counts a library front end's decided requests (for its Stats)
// and reports their failures and shadow denials to the front end's hooks,
// as httplimit's middleware and grpclimit's interceptors both do. R is the
// front end's request, as its hooks take it (an *http.Request, a call's
// context). Make it with [NewReporter]; it is safe for concurrent use.
type Reporter[R any] struct {
	name     string
	onError  func(R, string, error)
	onShadow func(R, string, floodgate.Decision)

	denied, shadowed, unavail, storeErrs, keyErrs, local atomic.Uint64
}

// Counts is what a [Reporter] has counted since it was made.
type Counts struct {
	// Denied counts denied requests.
	Denied uint64
	// ShadowDenied counts shadow checks that would have denied.
	ShadowDenied uint64
	// Unavailable counts requests a fail-closed check could not decide.
	Unavailable uint64
	// StoreErrors counts checks the store failed or timed out for (not
	// because the caller went away), and failed refunds.
	StoreErrors uint64
	// KeyErrors counts checks whose key could not be found.
	KeyErrors uint64
	// LocalFallback counts requests of which a check was decided by the
	// local fallback.
	LocalFallback uint64
	// CacheHits counts checks denied from the engine's over-limit cache:
	// [CountsOf] fills it, a Reporter's own Counts leave it zero.
	CacheHits uint64
}

// CountsOf returns what rp has counted of f's requests, with the cache
// hits of f's engine: a front end's Stats.
func CountsOf[R any](f *Front, rp *Reporter[R]) Counts {
	c := rp.Counts()
	c.CacheHits = f.Engine.CacheStats().Hits
	return c
}

// NewReporter returns a Reporter for the front end called name (its
// package name, which begins the errors it reports), calling onError for
// each failure and onShadow for each shadow denial; either may be nil.
func NewReporter[R any](name string, onError func(R, string, error), onShadow func(R, string, floodgate.Decision)) *Reporter[R] {
	return &Reporter[R]{name: name, onError: onError, onShadow: onShadow}
}

// Report counts req, decided as res: its verdict (Denied, Unavailable),
// whether a check was decided locally, and each check's event ([EventOf])
// and failed refund; callerGone says that req's context has ended. onError
// gets, with the rule's name, a key function's error as the check holds
// it, a store error as "name: rule "r": store: err" and a failed refund as
// "name: err"; onShadow a shadow check's decision.
func (rp *Reporter[R]) Report(req R, callerGone bool, res *decide.Result) {
	for i := range res.Outcomes {
		o, rule := &res.Outcomes[i], res.Checks[i].Rule
		switch EventOf(res, i, callerGone) {
		case KeyFailed:
			rp.keyErrs.Add(1)
			if rp.onError != nil {
				rp.onError(req, rule, o.Err)
			}
		case StoreFailed:
			rp.storeErrs.Add(1)
			if rp.onError != nil {
				rp.onError(req, rule, fmt.Errorf("%s: rule %q: store: %w", rp.name, rule, o.Err))
			}
		case ShadowDenied:
			rp.shadowed.Add(1)
			if rp.onShadow != nil {
				rp.onShadow(req, rule, o.Decision)
			}
		}
		if o.RefundErr != nil {
			rp.storeErrs.Add(1)
			if rp.onError != nil {
				rp.onError(req, rule, fmt.Errorf("%s: %w", rp.name, o.RefundErr))
			}
		}
	}
	if res.LocalFallback() {
		rp.local.Add(1)
	}
	switch res.Verdict {
	case decide.Denied:
		rp.denied.Add(1)
	case decide.Unavailable:
		rp.unavail.Add(1)
	}
}

// Counts returns the counts.
func (rp *Reporter[R]) Counts() Counts {
	return Counts{
		Denied:        rp.denied.Load(),
		ShadowDenied:  rp.shadowed.Load(),
		Unavailable:   rp.unavail.Load(),
		StoreErrors:   rp.storeErrs.Load(),
		KeyErrors:     rp.keyErrs.Load(),
		LocalFallback: rp.local.Load(),
	}
}

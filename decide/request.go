// Check, Outcome and Result: a request as the engine takes it, and its
// decision as it returns it.

package decide

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate"
)

// Check is one rule's part in a request.
type Check struct {
	// Rule names the check in results, logs and headers.
	Rule string
	// Key is the store key: front ends build it with one scheme, the
	// namespace, the escaped rule name and the key.
	Key string
	// Limit is the rule's limit; front ends validate it when they load
	// their rules.
	Limit floodgate.Limit
	// Cost is the request's cost under the rule; 0 means 1.
	Cost int64
	// Blocked checks admit nothing (Envoy's requests_per_unit: 0): the
	// check denies whatever its cost, without the store, and no retry can
	// lift it; a check-only one finds nothing over and admits. Limit is not
	// used.
	Blocked bool
	// OverQuotaDenies makes a cost above Limit's quota, which no retry can
	// admit, a denial (Envoy answers OVER_LIMIT) instead of the caller's
	// error (Invalid). The Outcome's Err says why.
	OverQuotaDenies bool
	// CheckOnly checks take nothing (Envoy's hits_addend 0): the store
	// reports what the key holds (a cost of 0, see floodgate.Store.AllowN),
	// and the check never denies, whatever the enforced checks decide. An
	// outage follows its failure mode as for any check. Cost is ignored.
	CheckOnly bool
	// Failure says what an outage means for this check. A shadow check
	// always fails open.
	Failure FailureMode
	// LocalShare is the share of Limit this instance enforces alone under
	// FailLocal while the store is unavailable: 1/N for N instances. Zero
	// means 1, the whole limit. Front ends check it when they load their
	// rules.
	LocalShare float64
	// NoCache keeps the check out of the over-limit cache: every request
	// asks the store.
	NoCache bool
	// Lease, if set, decides the check from quota this instance leases
	// from the store in blocks (LeaseOptions), not with a store call per
	// request. It applies to enforced checks that take something; over a
	// store that decides in this process, the store is asked directly.
	Lease *LeaseOptions
	// Shadow checks are decided and reported but never deny, never fail
	// closed, and are never the deciding check. They are decided only for
	// requests the enforced checks admit, and consume quota only then.
	Shadow bool
	// Err, if set, is why the front end could not ask the store about the
	// check (its key could not be found in the request, or the front end
	// is shedding load): the store is not asked, and the check counts as
	// one the store could not decide, so its failure mode applies; under
	// FailLocal a check with a Key is then decided locally.
	Err error
}

// cost returns the check's cost: Cost, or 1 when Cost is 0.
func (c *Check) cost() int64 {
	if c.CheckOnly {
		return 0
	}
	if c.Cost == 0 {
		return 1
	}
	return c.Cost
}

// Mode returns the failure mode that applies to the check: its Failure, or
// FailOpen for a shadow check.
func (c *Check) Mode() FailureMode {
	if c.Shadow {
		return FailOpen
	}
	return c.Failure
}

// Outcome is what happened to one Check.
type Outcome struct {
	// Decision is the store's decision; meaningful when Verdict is Admitted
	// or Denied and Decided is true.
	Decision floodgate.Decision
	// Verdict is this check's own: Admitted, Denied (for a shadow check:
	// would have denied), Unavailable (the store could not decide, whatever
	// the failure mode), StoreError or Invalid.
	Verdict Verdict
	// Decided reports that Decision is valid: the store answered, or the
	// over-limit cache, the local fallback or the check alone (Blocked, a
	// cost above the quota under OverQuotaDenies) decided. A check that
	// was not asked (a shadow check of a request that was not
	// admitted; with a store that has no batches, a check after the one that
	// denied) has Decided false and no Err. When the request was not
	// admitted, an admitted check's cost was given back, and its
	// Decision.Remaining says what remains now.
	Decided bool
	// Err is the error behind Unavailable, StoreError and Invalid; for a
	// Denied check of OverQuotaDenies, the cost no retry can admit.
	Err error
	// RefundErr is the error from giving back this check's cost when the
	// request was not admitted (the quota stays taken); nil normally.
	RefundErr error
	// Local reports that the store was unavailable and the check, of mode
	// FailLocal, was decided by this instance alone at its share of the
	// limit: Decision is the local one (its Limit the local quota), Err
	// the outage.
	Local bool
	// Cached reports that Decision is a denial from the over-limit cache:
	// the store was not asked.
	Cached bool
	// Leased reports that the check was decided through its lease: an
	// admission spent from units this instance holds (Decision's Remaining
	// and ResetAfter are then estimates), a denial from the store's last
	// refusal or from the fetch of a block, or a fetch's failure.
	Leased bool
	// Limit is the limit Decision counted against, the one a denial
	// names: the check's Limit, or its local share of it when Local.
	Limit floodgate.Limit

	taken bool    // the store holds this check's cost, to give back if the request is not admitted
	final bool    // decided by the check alone, before the store (Blocked, OverQuotaDenies)
	epoch uint64  // the key's cache shard epoch before the store was asked
	entry *denial // the expired cache entry in whose flight this check asks the store, if any
	in    *flight // that flight
	lease *lease  // the lease an admitted check spent from, to give back to
}

// WouldDeny reports whether the check did not admit its cost: the store
// denied it, or the cost can never fit its limit (Invalid). For a shadow
// check it is what the rule would have done, had it been enforced.
func (o *Outcome) WouldDeny() bool {
	return o.Decided && o.Verdict == Denied || o.Verdict == Invalid
}

// Result is the decision on a whole request.
type Result struct {
	// Verdict is the request's: Admitted, or why not.
	Verdict Verdict
	// Deciding is the index of the check the Verdict comes from: for
	// Denied, the denying check with the longest retry delay (one no retry
	// can lift first); for Unavailable, StoreError and Invalid, the failing
	// check (for Unavailable, a FailError one first, of those asked: a
	// store without batches is asked no more after a failure); for
	// Admitted, the
	// most restrictive decided enforced check (the least remaining, then the
	// longest reset), or -1 when none was decided.
	Deciding int
	// Checks are the request's checks, as Decide took them.
	Checks []Check
	// Outcomes holds one Outcome per Check, in order.
	Outcomes []Outcome
	// RetryAfter is when a retry may succeed: for Denied the deciding
	// decision's exact RetryAfter (0 when no retry can: a Blocked check, a
	// cost above the quota), for Unavailable the engine's
	// UnavailableRetryAfter, otherwise 0.
	RetryAfter time.Duration
	// SpanContext is the decision's span's (Options.TracerProvider), for
	// exemplars and logs; the zero value when not traced.
	SpanContext trace.SpanContext
}

// Allowed reports whether the request is admitted.
func (r *Result) Allowed() bool { return r.Verdict == Admitted }

// LocalFallback reports whether an enforced check was decided by the local
// fallback ([Outcome.Local]). Front ends count such requests and say so in
// an answer that decided the request (not in one a fail-closed check left
// undecided).
func (r *Result) LocalFallback() bool {
	for i := range r.Outcomes {
		if r.Outcomes[i].Local {
			return true
		}
	}
	return false
}

// Err returns the error behind an Unavailable, StoreError or Invalid
// verdict: the deciding check's; nil otherwise. (The Result holds no error
// of its own, so front ends can keep it and its Outcomes on the stack.)
func (r *Result) Err() error {
	if r.Verdict == Admitted || r.Verdict == Denied || r.Deciding < 0 {
		return nil
	}
	return r.Outcomes[r.Deciding].Err
}

// set makes o n, keeping the over-limit cache's notes on o (the key's
// epoch, a flight to finish).
func (o *Outcome) set(n Outcome) {
	n.epoch, n.entry, n.in = o.epoch, o.entry, o.in
	*o = n
}

// giveBack notes that o's cost is no longer taken: Remaining is what it was
// before the check (exact for every algorithm, as the cost was taken at the
// same moment).
func (o *Outcome) giveBack(cost int64) {
	if o.taken {
		o.taken = false
		o.Decision.Remaining = min(o.Decision.Remaining+cost, o.Decision.Limit)
	}
}

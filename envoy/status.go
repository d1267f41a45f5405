package envoy

import (
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
)

// outcome is what became of a descriptor: the "outcome" label of
// floodgate_envoy_descriptors_total.
type outcome uint8

// The outcomes, in the order of outcomeNames.
const (
	outcomeOK outcome = iota
	outcomeOverLimit
	outcomeShadowOverLimit
	outcomeUnlimited
	outcomeNoRule
	outcomeReplaced
	outcomeBlocked
	outcomeRefunded
	outcomeFailOpen
	outcomeFailClosed
	outcomeFailError
	outcomeError
	outcomeSkipped
	outcomeLocalOK        // failure_mode local: this instance admitted alone
	outcomeLocalOverLimit // failure_mode local: over the instance's share
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "over_limit", "shadow_over_limit", "unlimited", "no_rule", "replaced", "blocked",
	"negative_hits", "fail_open", "fail_closed", "fail_error", "error", "skipped", "local_ok", "local_over_limit"}

// String returns the outcome's label value, such as "over_limit".
func (o outcome) String() string { return outcomeNames[o] }

// local returns the outcome of a check the engine decided locally, under
// failure_mode local while the store was unavailable.
func (o outcome) local() outcome {
	switch o {
	case outcomeOK:
		return outcomeLocalOK
	case outcomeOverLimit:
		return outcomeLocalOverLimit
	}
	return o
}

// statusBuf holds a status and the parts it may point to, so that one
// allocation makes a whole status.
type statusBuf struct {
	st  rlsv3.RateLimitResponse_DescriptorStatus
	lim rlsv3.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// limit points the status's current_limit at the rule's limit.
func (b *statusBuf) limit(r *Rule) {
	b.lim.Name, b.lim.RequestsPerUnit, b.lim.Unit = r.Name, r.RequestsPerUnit, r.Unit
	b.st.CurrentLimit = &b.lim
}

// reset sets the status's duration_until_reset to d, as durationpb.New
// writes it.
func (b *statusBuf) reset(d time.Duration) {
	secs := d / time.Second
	b.dur.Seconds, b.dur.Nanos = int64(secs), int32(d-secs*time.Second)
	b.st.DurationUntilReset = &b.dur
}

// alignedReset sets duration_until_reset to the time from now until the end
// of the rule's clock-aligned unit, as envoyproxy/ratelimit computes every
// duration_until_reset (none for an unknown unit).
func (b *statusBuf) alignedReset(u rlsv3.RateLimitResponse_RateLimit_Unit, now time.Time) {
	w := UnitDuration(u)
	if w <= 0 {
		return
	}
	us := now.UnixMicro()
	b.reset(w - time.Duration(us%w.Microseconds())*time.Microsecond)
}

// status turns a descriptor into its status, built in b, and metric
// outcome. A status the store decided carries its duration_until_reset; one
// that a rule blocks (requests_per_unit 0) or whose cost is above the quota
// carries the time until the rule's clock-aligned unit ends, as the
// reference reports every duration. Outages, give-backs and descriptors the
// store was not asked about carry none: nothing was counted.
func (s *Service) status(d *descriptor, res *decide.Result, now time.Time, b *statusBuf) (*rlsv3.RateLimitResponse_DescriptorStatus, outcome) {
	ok := rlsv3.RateLimitResponse_OK
	over := rlsv3.RateLimitResponse_OVER_LIMIT
	r := d.rule
	st := &b.st
	st.Code = ok
	switch d.kind {
	case kindNoRule:
		return st, outcomeNoRule
	case kindReplaced:
		return st, outcomeReplaced
	case kindUnlimited:
		st.LimitRemaining = math.MaxUint32
		return st, outcomeUnlimited
	}
	b.limit(r)
	switch d.kind {
	case kindNegative:
		if d.err != nil {
			return st, outcomeError
		}
		return st, outcomeRefunded
	case kindBlocked:
		b.alignedReset(r.Unit, now)
		switch {
		case d.peek: // nothing counted: 0 is not over 0
			return st, outcomeOK
		case r.ShadowMode:
			return st, outcomeShadowOverLimit
		}
		d.markOver(st)
		return st, outcomeBlocked
	}
	o := &res.Outcomes[d.check]
	switch {
	case noRetry(res, d.check):
		// A cost above the quota can never be admitted.
		b.alignedReset(r.Unit, now)
		if r.ShadowMode {
			return st, outcomeShadowOverLimit
		}
		d.markOver(st)
		return st, outcomeOverLimit
	case o.Decided:
		st.LimitRemaining = uint32(min(o.Decision.Remaining, math.MaxUint32))
		switch {
		case o.Decision.Allowed:
			switch {
			case o.Decision.ResetAfter > 0:
				b.reset(frontend.Shown(&res.Checks[d.check], o.Decision).ResetAfter)
			case r.Limit.Algorithm == floodgate.FixedWindow:
				// A check-only look at an empty fixed window: the
				// window's end, as the reference reports it.
				b.alignedReset(r.Unit, now)
			}
			return st, outcomeOK
		case r.ShadowMode:
			b.reset(o.Decision.RetryAfter)
			return st, outcomeShadowOverLimit
		}
		b.reset(o.Decision.RetryAfter)
		d.markOver(st)
		return st, outcomeOverLimit
	case o.Verdict == decide.Unavailable:
		s.metrics.storeErrors.Inc()
		switch {
		case d.shadow || d.fail.mode == decide.FailOpen:
			return st, outcomeFailOpen
		case d.fail.mode == decide.FailError:
			st.Code = over // unless it decides the request, which then fails
			return st, outcomeFailError
		}
		st.Code = over
		return st, outcomeFailClosed
	case o.Err != nil:
		// An enforced check's error fails the request; a shadow or quota
		// mode check's (a cost its algorithm does not take in one request)
		// never denies.
		if !r.ShadowMode && !d.quota {
			st.Code = over
		}
		return st, outcomeError
	}
	return st, outcomeSkipped
}

// markOver marks the descriptor's status over its limit: OVER_LIMIT, but for a
// rule in quota mode (the rule's or global), a shadow check to the engine,
// whose status over the quota is OK without a reset, as in the reference.
func (d *descriptor) markOver(st *rlsv3.RateLimitResponse_DescriptorStatus) {
	d.over = true
	if d.quota {
		st.DurationUntilReset = nil
		return
	}
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
}

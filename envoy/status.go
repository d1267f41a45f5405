package envoy

import (
	"errors"
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// Outcomes, the "outcome" label of floodgate_envoy_descriptors_total.
const (
	outcomeOK              = "ok"
	outcomeOverLimit       = "over_limit"
	outcomeShadowOverLimit = "shadow_over_limit"
	outcomeUnlimited       = "unlimited"
	outcomeNoRule          = "no_rule"
	outcomeReplaced        = "replaced"
	outcomeBlocked         = "blocked"
	outcomeRefunded        = "negative_hits"
	outcomeFailOpen        = "fail_open"
	outcomeFailClosed      = "fail_closed"
	outcomeFailError       = "fail_error"
	outcomeError           = "error"
	outcomeSkipped         = "skipped"
)

// status turns a descriptor into its status and metric outcome. A status
// the store decided carries its duration_until_reset; one that a rule
// blocks (requests_per_unit 0) or whose cost is above the quota carries the
// time until the rule's clock-aligned unit ends, as the reference reports
// every duration. Outages, give-backs and descriptors the store was not
// asked about carry none: nothing was counted.
func (s *Service) status(d *descriptor, res *decide.Result, now time.Time) (*rlsv3.RateLimitResponse_DescriptorStatus, string) {
	ok := rlsv3.RateLimitResponse_OK
	over := rlsv3.RateLimitResponse_OVER_LIMIT
	r := d.rule
	switch d.kind {
	case kindNoRule:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}, outcomeNoRule
	case kindReplaced:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}, outcomeReplaced
	case kindUnlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}, outcomeUnlimited
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: currentLimit(r)}
	switch d.kind {
	case kindNegative:
		if d.err != nil {
			return st, outcomeError
		}
		return st, outcomeRefunded
	case kindBlocked:
		st.DurationUntilReset = alignedReset(r.Unit, now)
		switch {
		case d.peek: // nothing counted: 0 is not over 0
			return st, outcomeOK
		case r.ShadowMode:
			return st, outcomeShadowOverLimit
		}
		d.over = true
		st.Code = over
		return st, outcomeBlocked
	}
	o := &res.Outcomes[d.check]
	switch {
	case o.Decided:
		st.LimitRemaining = uint32(min(o.Decision.Remaining, math.MaxUint32))
		switch {
		case o.Decision.Allowed:
			switch {
			case o.Decision.ResetAfter > 0:
				st.DurationUntilReset = durationpb.New(o.Decision.ResetAfter)
			case r.Limit.Algorithm == floodgate.FixedWindow:
				// A check-only look at an empty fixed window: the
				// window's end, as the reference reports it.
				st.DurationUntilReset = alignedReset(r.Unit, now)
			}
			return st, outcomeOK
		case r.ShadowMode:
			st.DurationUntilReset = durationpb.New(o.Decision.RetryAfter)
			return st, outcomeShadowOverLimit
		}
		d.over = true
		st.Code = over
		st.DurationUntilReset = durationpb.New(o.Decision.RetryAfter)
		return st, outcomeOverLimit
	case o.Verdict == decide.Invalid && errors.Is(o.Err, floodgate.ErrCostExceedsLimit):
		// A cost above the quota can never be admitted.
		st.DurationUntilReset = alignedReset(r.Unit, now)
		if r.ShadowMode {
			return st, outcomeShadowOverLimit
		}
		d.over = true
		st.Code = over
		return st, outcomeOverLimit
	case o.Verdict == decide.Unavailable:
		s.metrics.storeErrors.Inc()
		switch {
		case r.ShadowMode || d.quota || s.shadow || d.fail.mode == decide.FailOpen:
			return st, outcomeFailOpen
		case d.fail.call:
			st.Code = over // unless it decides the request, which then fails
			return st, outcomeFailError
		}
		st.Code = over
		return st, outcomeFailClosed
	case o.Err != nil:
		if !r.ShadowMode {
			st.Code = over // the request then fails: it is not admitted
		}
		return st, outcomeError
	}
	return st, outcomeSkipped
}

// alignedReset is the time from now until the end of the clock-aligned
// unit, as envoyproxy/ratelimit computes every duration_until_reset.
func alignedReset(u rlsv3.RateLimitResponse_RateLimit_Unit, now time.Time) *durationpb.Duration {
	w := UnitDuration(u)
	if w <= 0 {
		return nil
	}
	us := now.UnixMicro()
	return durationpb.New(w - time.Duration(us%w.Microseconds())*time.Microsecond)
}

// currentLimit is a rule's limit as the answer reports it.
func currentLimit(r *Rule) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
}

package envoy

import (
	"errors"
	"net/http"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// inHeaders reports whether a descriptor may appear in a response header,
// of either family (responseHeaders, peerHeaders): a rule with a limit that
// the store decided or that blocks, and not shadow. Shadow is the flag the
// engine's check got (the rule's shadow_mode, global SHADOW_MODE or quota
// mode), so nothing the engine decided as shadow reaches a header.
func (d *descriptor) inHeaders() bool {
	return (d.kind == kindCheck || d.kind == kindBlocked) && !d.shadow
}

// responseHeaders returns the rate-limit headers of a decided request, with
// the values the HTTP middleware sends for the same decisions:
// RateLimit-Policy lists every limited rule that applied and is not shadow
// (inHeaders); RateLimit and X-RateLimit-* describe the engine's deciding
// check; Retry-After comes with a denial, or alone when a fail-closed rule
// could not decide. A request that no retry can admit (a blocking rule, a
// cost above a quota) gets RateLimit-Policy only.
//
// The policies are listed by descriptor rather than by check, since several
// descriptors may share a rule and a blocked one has no check; a rule whose
// name cannot be a Structured Fields String gets the X-RateLimit-* fields
// only.
func (s *Service) responseHeaders(ds []descriptor, res *decide.Result) []*corev3.HeaderValue {
	h := http.Header{}
	v := frontend.Headers(res) // the descriptors say which are listed
	if i := v.Deciding; i >= 0 && noRetry(res, i) {
		v.Deciding, v.Decision = -1, floodgate.Decision{} // policies only
	}
	switch res.Verdict {
	case decide.Unavailable:
		frontend.WriteUnavailable(h, res)
	case decide.Admitted, decide.Denied, decide.Invalid:
		var (
			list  ratelimitheader.List
			names []string
			most  *ratelimitheader.Policy
			mode  = ratelimitheader.Both
		)
		for i := range ds {
			dd := &ds[i]
			if !dd.inHeaders() {
				continue
			}
			p, ok := policyOf(dd.rule)
			if name := dd.rule.policyName(); ok && !slices.Contains(names, name) {
				names = append(names, name)
				list.Add(p)
			}
			if dd.kind == kindCheck && dd.check == v.Deciding {
				most = p
				if !ok {
					// A name that cannot be a Structured Fields String: the
					// IETF fields cannot name the rule.
					mode = ratelimitheader.Legacy
				}
			}
		}
		ratelimitheader.Write(h, mode, list.String(), most, v.Decision, s.now())
	}
	var out []*corev3.HeaderValue
	for _, k := range ratelimitheader.Order {
		for _, v := range h[k] {
			out = append(out, &corev3.HeaderValue{Key: k, Value: v})
		}
	}
	if v.Local {
		// As the middleware says it: the store was unavailable, and this
		// instance decided alone at its local share.
		out = append(out, &corev3.HeaderValue{Key: ratelimitheader.HeaderFallback, Value: ratelimitheader.FallbackLocal})
	}
	return out
}

// policyOf returns a rule's header pieces, and false if its name cannot be
// sent in a header.
func policyOf(r *Rule) (*ratelimitheader.Policy, bool) {
	if r.override && r.policy == (ratelimitheader.Policy{}) && r.policyErr == nil {
		r.compilePolicy()
	}
	return &r.policy, r.policyErr == nil
}

// noRetry reports whether check i of res denies and no retry can lift it: a
// rule that blocks (requests_per_unit 0), or a cost above its quota.
func noRetry(res *decide.Result, i int) bool {
	o := &res.Outcomes[i]
	return o.Verdict == decide.Denied && (res.Checks[i].Blocked || errors.Is(o.Err, floodgate.ErrCostExceedsLimit))
}

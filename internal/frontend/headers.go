package frontend

import (
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// WriteHeaders sets on h, in mode, the rate-limit headers of res, whose
// checks' rules have the header pieces policies (one per check, in order),
// as the header view says ([Headers]): the RateLimit-Policy of every check but the
// shadow ones, the other fields for the deciding check, Retry-After when it
// denied, and Floodgate-Fallback when a check was decided locally. It sets
// the policies of the shadow checks to nil, and returns the view, for a
// front end that adds its own fields (gRPC's retry pushback). now is the
// time the reset fields count from.
func WriteHeaders(h http.Header, mode ratelimitheader.Mode, now time.Time, policies []*ratelimitheader.Policy, res *decide.Result) HeaderView {
	v := Headers(res)
	for i := range v.Unlisted {
		policies[i] = nil
	}
	d := ratelimitheader.Decided{Policies: policies, Deciding: v.Deciding, Decision: v.Decision, Local: v.Local}
	d.Write(h, mode, now)
	return v
}

// WriteUnavailable sets on h what every HTTP front end's answer to a
// request that a fail-closed check could not decide (res.Verdict
// Unavailable) carries: Retry-After of res.RetryAfter, the engine's
// UnavailableRetryAfter. It sets nothing for another request.
func WriteUnavailable(h http.Header, res *decide.Result) {
	if res.Verdict == decide.Unavailable {
		h[ratelimitheader.HeaderRetryAfter] = []string{ratelimitheader.RetryAfter(res.RetryAfter)}
	}
}

package frontend

import (
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// WriteHeaders sets on h, in mode, the rate-limit headers of res as its
// header view says ([Headers]), given each check's header pieces in
// policies: RateLimit-Policy of every non-shadow check, the other fields
// for the deciding check, Retry-After when it denied, and
// Floodgate-Fallback when a check was decided locally. It sets the shadow
// checks' policies to nil and returns the view, for a front end that adds
// its own fields. The reset fields count from now.
func WriteHeaders(h http.Header, mode ratelimitheader.Mode, now time.Time, policies []*ratelimitheader.Policy, res *decide.Result) HeaderView {
	v := Headers(res)
	for i := range v.Unlisted {
		policies[i] = nil
	}
	d := ratelimitheader.Decided{Policies: policies, Deciding: v.Deciding, Decision: v.Decision, Local: v.Local}
	d.Write(h, mode, now)
	return v
}

// WriteUnavailable sets Retry-After (res.RetryAfter) on h for a request a
// fail-closed check could not decide (res.Verdict Unavailable), and nothing
// for another request.
func WriteUnavailable(h http.Header, res *decide.Result) {
	if res.Verdict == decide.Unavailable {
		h[ratelimitheader.HeaderRetryAfter] = []string{ratelimitheader.RetryAfter(res.RetryAfter)}
	}
}

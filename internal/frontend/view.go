package frontend

import (
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// HeaderView is what the rate-limit headers of a decided request describe,
// the same for every front end: which checks RateLimit-Policy lists, the
// check whose decision RateLimit, X-RateLimit-* and Retry-After give, and
// whether the answer says it was decided locally.
type HeaderView struct {
	// Deciding is the index of the check the RateLimit, X-RateLimit-* and
	// Retry-After fields describe: the Result's deciding check when the
	// request was admitted or denied, -1 otherwise (nothing was decided,
	// or the request is not answered with a decision). It is never a
	// shadow check.
	Deciding int
	// Decision is the deciding check's decision; zero when Deciding is -1.
	Decision floodgate.Decision
	// Local reports that the request was admitted or denied and an
	// enforced check of it was decided by the local fallback
	// ([decide.Result.LocalFallback]): the answer says so. An answer that
	// decided nothing (a fail-closed check could not decide) does not.
	Local bool

	checks []decide.Check
}

// Headers returns the header view of r.
func Headers(r *decide.Result) HeaderView {
	v := HeaderView{Deciding: -1, checks: r.Checks}
	if r.Verdict == decide.Admitted || r.Verdict == decide.Denied {
		v.Local = r.LocalFallback()
		if r.Deciding >= 0 {
			v.Deciding, v.Decision = r.Deciding, Shown(&r.Checks[r.Deciding], r.Outcomes[r.Deciding].Decision)
		}
	}
	return v
}

// Shown returns d, check c's decision, as every front end shows it: a
// sliding-window log's reset at most its window. The log stamps the
// entries of requests in one microsecond at consecutive microseconds, so
// that each has a time of its own, and a burst's newest entry leaves the
// window a few microseconds after its length: rounded up to the
// millisecond or second a front end shows, that would be past the window
// (3600001 ms, or 3601 s, for an hour). RetryAfter, the wait after which a
// retry of the same cost is admitted, is left exact.
func Shown(c *decide.Check, d floodgate.Decision) floodgate.Decision {
	if c.Limit.Algorithm == floodgate.SlidingWindowLog {
		d.ResetAfter = min(d.ResetAfter, c.Limit.Window)
	}
	return d
}

// Listed reports whether check i appears in RateLimit-Policy: every check
// of the request but the shadow ones, which never appear in a header.
func (v *HeaderView) Listed(i int) bool {
	return i < len(v.checks) && !v.checks[i].Shadow
}

// Unlisted is the index of each check that Listed does not report, for
// front ends that give the encoder one entry per check and leave these
// out.
func (v *HeaderView) Unlisted(yield func(int) bool) {
	for i := range v.checks {
		if v.checks[i].Shadow && !yield(i) {
			return
		}
	}
}

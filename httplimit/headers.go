package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// HeaderMode selects the rate-limit headers on responses. Whatever the mode,
// a denied request gets Retry-After. Every front end (the middleware, the
// server, Envoy's service) encodes them the same way.
type HeaderMode = ratelimitheader.Mode

const (
	// HeadersBoth sends the IETF and the X-RateLimit headers (the zero
	// value).
	HeadersBoth = ratelimitheader.Both
	// HeadersIETF sends RateLimit-Policy and RateLimit, the fields of
	// draft-ietf-httpapi-ratelimit-headers-11 in Structured Fields syntax:
	//
	//	RateLimit-Policy: "per-ip";q=100;w=60, "per-key";q=1000;w=3600
	//	RateLimit: "per-ip";r=42;t=35
	//
	// RateLimit-Policy lists every rule that applies to the request; q is
	// the quota and w the window in seconds (for a token bucket, q is the
	// capacity and w the time to refill it from empty, so q/w is the
	// refill rate). Windows below a second are rounded up to w=1.
	// RateLimit describes the most restrictive rule: r is what remains, and
	// t is, on an admitted request, the seconds until the rule's quota is
	// whole again and, on a denied one, the Retry-After delay (the draft
	// asks that Retry-After not point earlier than the end of t).
	HeadersIETF = ratelimitheader.IETF
	// HeadersLegacy sends X-RateLimit-Limit (the quota), X-RateLimit-Remaining
	// and X-RateLimit-Reset (when the quota is whole again, in Unix epoch
	// seconds, as GitHub sends it), for the most restrictive rule.
	HeadersLegacy = ratelimitheader.Legacy
	// HeadersNone sends no rate-limit headers except Retry-After.
	HeadersNone = ratelimitheader.None
)

// quotaProblem renders a rule's 429 body once, at New.
func quotaProblem(name string, l floodgate.Limit) []byte {
	body, err := json.Marshal(problem.Quota(http.StatusTooManyRequests, name, l.String(), false))
	if err != nil { // cannot happen: every field marshals
		body = []byte(`{"type":"` + problem.QuotaExceeded + `","status":429}`)
	}
	return append(body, '\n')
}

// writeProblem answers the default 429.
func (ru *rule) writeProblem(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = []string{problem.ContentType}
	h["Content-Length"] = []string{strconv.Itoa(len(ru.problem))}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(ru.problem)
}

// writeLocalProblem answers the 429 of a denial this instance decided alone
// (failure mode local), naming the local limit it counted against.
func (ru *rule) writeLocalProblem(w http.ResponseWriter, local floodgate.Limit) {
	w.Header()["Cache-Control"] = []string{"no-store"}
	problem.Write(w, problem.Quota(http.StatusTooManyRequests, ru.name, local.String(), true))
}

// writeUnavailable answers 503 (with Retry-After, frontend.WriteUnavailable)
// for res, a request a fail-closed rule could not decide.
func writeUnavailable(w http.ResponseWriter, res *decide.Result) {
	frontend.WriteUnavailable(w.Header(), res)
	w.Header()["Cache-Control"] = []string{"no-store"}
	problem.Error(w, http.StatusServiceUnavailable, "The rate-limit store cannot decide right now, and this route fails closed. Retry after the number of seconds in Retry-After.")
}

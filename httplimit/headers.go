package httplimit

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/problem"
)

// HeaderMode selects the rate-limit headers on responses. Whatever the mode,
// a denied request gets Retry-After.
type HeaderMode uint8

const (
	// HeadersBoth sends the IETF and the X-RateLimit headers (the zero
	// value).
	HeadersBoth HeaderMode = iota
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
	HeadersIETF
	// HeadersLegacy sends X-RateLimit-Limit (the quota), X-RateLimit-Remaining
	// and X-RateLimit-Reset (when the quota is whole again, in Unix epoch
	// seconds, as GitHub sends it), for the most restrictive rule.
	HeadersLegacy
	// HeadersNone sends no rate-limit headers except Retry-After.
	HeadersNone
)

// String returns the mode's name, such as "both".
func (m HeaderMode) String() string {
	switch m {
	case HeadersBoth:
		return "both"
	case HeadersIETF:
		return "ietf"
	case HeadersLegacy:
		return "legacy"
	case HeadersNone:
		return "none"
	}
	return fmt.Sprintf("HeaderMode(%d)", m)
}

// Canonical header keys, assigned to the header map directly.
const (
	hPolicy    = "Ratelimit-Policy" // RateLimit-Policy
	hRateLimit = "Ratelimit"        // RateLimit
	hLimit     = "X-Ratelimit-Limit"
	hRemaining = "X-Ratelimit-Remaining"
	hReset     = "X-Ratelimit-Reset"
	hRetry     = "Retry-After"
)

// sfMaxInteger is the largest Structured Fields Integer (RFC 9651 3.3.1).
const sfMaxInteger = 999_999_999_999_999

// policyItem serializes a rule's name as a Structured Fields String, and
// its RateLimit-Policy list member, with the Structured Fields library.
func policyItem(name string, l floodgate.Limit) (sfName, member string, err error) {
	sfName, err = httpsfv.Marshal(httpsfv.NewItem(name))
	if err != nil {
		return "", "", err
	}
	it := httpsfv.NewItem(name)
	it.Params.Add("q", l.Quota)
	it.Params.Add("w", policyWindow(l))
	member, err = httpsfv.Marshal(httpsfv.List{it})
	return sfName, member, err
}

// policyWindow returns a limit's w parameter in whole seconds (at least 1):
// the window, or for a token bucket the time to refill from empty.
func policyWindow(l floodgate.Limit) int64 {
	us := l.Window.Microseconds()
	if l.Algorithm == floodgate.TokenBucket {
		// ceil(Quota * Window / Refill), exact where it fits in 64 bits.
		div := uint64(l.RefillTokens()) * 1e6
		if hi, lo := bits.Mul64(uint64(l.Quota), uint64(us)); hi == 0 {
			q := lo / div // below 2^64 / 10^6: fits an int64
			if lo%div != 0 {
				q++
			}
			return clampSF(int64(q))
		}
		return clampSF(int64(math.Ceil(float64(l.Quota) * float64(us) / float64(div))))
	}
	return clampSF(ceilSeconds(l.Window))
}

func clampSF(n int64) int64 { return max(1, min(n, sfMaxInteger)) }

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds returns a Retry-After delay: whole seconds rounded up,
// never below 1.
func retryAfterSeconds(d time.Duration) int64 { return max(1, ceilSeconds(d)) }

func formatSeconds(n int64) string { return strconv.FormatInt(n, 10) }

// writeHeaders sets the rate-limit headers: RateLimit-Policy lists the
// non-shadow rules in out, and the other headers describe decision d of
// rule most (none if most is nil).
func (l *Limiter) writeHeaders(h http.Header, out []outcome, most *rule, d floodgate.Decision) {
	if l.headers == HeadersNone {
		return
	}
	ietf, legacy := l.headers != HeadersLegacy, l.headers != HeadersIETF
	policy := ""
	if ietf {
		policy = policyList(out)
	}
	if most == nil {
		if policy != "" {
			h[hPolicy] = []string{policy}
		}
		return
	}
	// Every value is cut from one string, and every header's []string from
	// one array: three allocations in all.
	var arr [160]byte
	b := arr[:0]
	var ends [5]int
	if ietf {
		// RateLimit: the name was serialized by the Structured Fields
		// library; the parameters are Integers, which serialize as their
		// decimal digits (RFC 9651 4.1.4), in range since quotas are below
		// 2^41 and windows below 367 days.
		b = append(b, most.sfName...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, effectiveWindow(d), 10)
	}
	ends[0] = len(b)
	if legacy {
		b = strconv.AppendInt(b, d.Limit, 10)
		ends[1] = len(b)
		b = strconv.AppendInt(b, d.Remaining, 10)
		ends[2] = len(b)
		b = strconv.AppendInt(b, l.resetAt(d), 10)
		ends[3] = len(b)
	}
	all := string(b)
	vals := make([]string, 0, 5)
	set := func(key, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[key] = vals[n-1 : n : n]
	}
	if ietf {
		if policy != "" {
			set(hPolicy, policy)
		}
		set(hRateLimit, all[:ends[0]])
	}
	if legacy {
		set(hLimit, all[ends[0]:ends[1]])
		set(hRemaining, all[ends[1]:ends[2]])
		set(hReset, all[ends[2]:ends[3]])
	}
}

// policyList joins the RateLimit-Policy members of the non-shadow rules.
func policyList(out []outcome) string {
	first, count, size := "", 0, 0
	for i := range out {
		if ru := out[i].rule; !ru.shadow {
			if count == 0 {
				first = ru.policy
			}
			count++
			size += len(ru.policy) + 2
		}
	}
	if count <= 1 {
		return first // no allocation for the common single rule
	}
	var b strings.Builder
	b.Grow(size)
	for i := range out {
		if ru := out[i].rule; !ru.shadow {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(ru.policy)
		}
	}
	return b.String()
}

// effectiveWindow returns the RateLimit t parameter: the draft's effective
// window, within which the client can use no more than r. For an admitted
// request it is the time until the quota is whole again (exact for a fixed
// window, an upper bound for the others, which replenish gradually); for a
// denied one it is the Retry-After delay, since the draft asks that
// Retry-After not point earlier than the end of the effective window.
func effectiveWindow(d floodgate.Decision) int64 {
	if d.Allowed {
		return ceilSeconds(d.ResetAfter)
	}
	return retryAfterSeconds(d.RetryAfter)
}

// resetAt returns when d's quota is whole again, in Unix seconds rounded up.
func (l *Limiter) resetAt(d floodgate.Decision) int64 {
	return ceilUnix(l.clock.Now().Add(d.ResetAfter))
}

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// WriteHeaders sets the rate-limit headers that the middleware sends for
// one rule, named name with limit l, that decided d at time now, in mode
// mode; and Retry-After if d denied the request. It is for front ends that
// decide one rule themselves, such as a forward-auth endpoint. The error
// reports a name that cannot be a Structured Fields String (a character
// outside printable ASCII).
func WriteHeaders(h http.Header, mode HeaderMode, name string, l floodgate.Limit, d floodgate.Decision, now time.Time) error {
	sfName, policy, err := policyItem(name, l)
	if err != nil {
		return fmt.Errorf("httplimit: rule name %q: %w", name, err)
	}
	lim := &Limiter{headers: mode, clock: floodgate.NewManualClock(now)}
	ru := &rule{name: name, limit: l, sfName: sfName, policy: policy}
	lim.writeHeaders(h, []outcome{{rule: ru}}, ru, d)
	if !d.Allowed {
		h.Set(hRetry, formatSeconds(retryAfterSeconds(d.RetryAfter)))
	}
	return nil
}

// quotaTitle is the title of the quota-exceeded problem type, as the draft
// registers it.
const quotaTitle = "Request cannot be satisfied as assigned quota has been exceeded"

// quotaProblem renders a rule's 429 body once, at New.
func quotaProblem(name string, l floodgate.Limit) []byte {
	body, err := json.Marshal(problem.Details{
		Type:             problem.QuotaExceeded,
		Title:            quotaTitle,
		Status:           http.StatusTooManyRequests,
		Detail:           fmt.Sprintf("The request exceeds the quota of policy %q: %s. Retry after the number of seconds in Retry-After.", name, l),
		ViolatedPolicies: []string{name},
	})
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

// writeUnavailable answers 503 for a fail-closed rule that could not decide.
func writeUnavailable(w http.ResponseWriter) {
	w.Header()["Cache-Control"] = []string{"no-store"}
	problem.Error(w, http.StatusServiceUnavailable, "The rate-limit store cannot decide right now, and this route fails closed. Retry after the number of seconds in Retry-After.")
}

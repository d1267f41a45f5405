// Package ratelimitheader encodes floodgate's rate-limit response headers
// once, for every front end: the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers, Structured Fields), the common
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, and
// Retry-After. The middleware and the server write them to their responses,
// Envoy's service to response_headers_to_add; for the same decisions all of
// them send byte-identical values.
package ratelimitheader

import (
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// Mode selects the rate-limit headers. Whatever the mode, a denied request
// gets Retry-After.
type Mode uint8

// The modes; see httplimit.HeaderMode, which documents them for users.
const (
	Both Mode = iota
	IETF
	Legacy
	None
)

var modeNames = [...]string{Both: "both", IETF: "ietf", Legacy: "legacy", None: "none"}

// String returns the mode's name, such as "both".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("HeaderMode(%d)", m)
}

// Valid reports whether m is one of the modes.
func (m Mode) Valid() bool { return m <= None }

// ParseMode returns the mode named s: both, ietf, legacy or none.
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if s == name {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("header mode %q is not one of both, ietf, legacy, none", s)
}

// Canonical header keys, assigned to header maps directly.
const (
	HeaderPolicy     = "Ratelimit-Policy" // RateLimit-Policy
	HeaderRateLimit  = "Ratelimit"        // RateLimit
	HeaderLimit      = "X-Ratelimit-Limit"
	HeaderRemaining  = "X-Ratelimit-Remaining"
	HeaderReset      = "X-Ratelimit-Reset"
	HeaderRetryAfter = "Retry-After"
	// HeaderFallback, with the value FallbackLocal, says that the store
	// was unavailable and this instance decided alone, at its local share
	// of the limit (a FailLocal rule): the other headers describe that
	// local limit.
	HeaderFallback = "Floodgate-Fallback"
)

// FallbackLocal is HeaderFallback's value.
const FallbackLocal = "local"

// Order lists the headers in the order front ends that emit a list (Envoy's
// response_headers_to_add) send them.
var Order = [...]string{HeaderPolicy, HeaderRateLimit, HeaderLimit, HeaderRemaining, HeaderReset, HeaderRetryAfter}

// sfMaxInteger is the largest Structured Fields Integer (RFC 9651 3.3.1).
const sfMaxInteger = 999_999_999_999_999

// Policy is one rule's header pieces, serialized once when the rule is
// loaded.
type Policy struct {
	name   string // the name as a Structured Fields String
	member string // its RateLimit-Policy list member
}

// NewPolicy serializes a rule named name of quota q and window w seconds.
// The error reports a name that cannot be a Structured Fields String (a
// character outside printable ASCII).
func NewPolicy(name string, q, w int64) (Policy, error) {
	sfName, err := httpsfv.Marshal(httpsfv.NewItem(name))
	if err != nil {
		return Policy{}, fmt.Errorf("rule name %q: %w", name, err)
	}
	it := httpsfv.NewItem(name)
	it.Params.Add("q", clamp(q, 0))
	it.Params.Add("w", clamp(w, 1))
	member, err := httpsfv.Marshal(httpsfv.List{it})
	if err != nil {
		return Policy{}, fmt.Errorf("rule name %q: %w", name, err)
	}
	return Policy{name: sfName, member: member}, nil
}

// ForLimit is NewPolicy with a limit's quota and [Window].
func ForLimit(name string, l floodgate.Limit) (Policy, error) {
	return NewPolicy(name, l.Quota, Window(l))
}

// Window returns a limit's w parameter in whole seconds, rounded up: the
// window, or for a token bucket the time to refill from empty (so q/w is the
// refill rate).
func Window(l floodgate.Limit) int64 {
	if l.Algorithm != floodgate.TokenBucket {
		return CeilSeconds(l.Window)
	}
	// ceil(Quota * Window / Refill), exact where it fits in 64 bits.
	us := uint64(l.Window.Microseconds())
	div := uint64(fixedpoint.Refill(l.Quota, l.Refill)) * 1e6
	if hi, lo := bits.Mul64(uint64(l.Quota), us); hi == 0 {
		return int64((lo + div - 1) / div) // lo < 2^64 - div: the quota is below 2^41
	}
	return int64(min(math.Ceil(float64(l.Quota)*float64(us)/float64(div)), sfMaxInteger))
}

func clamp(n, lo int64) int64 { return max(lo, min(n, sfMaxInteger)) }

// CeilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// RetryAfterSeconds returns a Retry-After delay: whole seconds rounded up,
// never below 1.
func RetryAfterSeconds(d time.Duration) int64 { return max(1, CeilSeconds(d)) }

// RetryAfter formats a Retry-After value for d.
func RetryAfter(d time.Duration) string { return strconv.FormatInt(RetryAfterSeconds(d), 10) }

// List builds a RateLimit-Policy value from the policies that applied to a
// request. The zero value is empty; one policy costs no allocation.
type List struct {
	first string
	b     strings.Builder
	n     int
}

// Add appends p.
func (l *List) Add(p *Policy) {
	switch l.n {
	case 0:
		l.first = p.member
	case 1:
		l.b.WriteString(l.first)
		fallthrough
	default:
		l.b.WriteString(", ")
		l.b.WriteString(p.member)
	}
	l.n++
}

// String returns the field value; "" for no policy.
func (l *List) String() string {
	if l.n <= 1 {
		return l.first
	}
	return l.b.String()
}

// Write sets the rate-limit headers of mode on h: RateLimit-Policy to
// policies (the List's value), and, if most is not nil, the others for the
// deciding rule most and its decision d, with X-RateLimit-Reset computed
// from now; and Retry-After if d denied the request.
//
// RateLimit's t is, on an admitted request, the seconds until the rule's
// quota is whole again and, on a denied one, the Retry-After delay (the
// draft asks that Retry-After not point earlier than the end of t).
func Write(h http.Header, mode Mode, policies string, most *Policy, d floodgate.Decision, now time.Time) {
	if most != nil && !d.Allowed {
		h[HeaderRetryAfter] = []string{strconv.FormatInt(RetryAfterSeconds(d.RetryAfter), 10)}
	}
	if mode == None {
		return
	}
	ietf, legacy := mode != Legacy, mode != IETF
	if most == nil {
		if ietf && policies != "" {
			h[HeaderPolicy] = []string{policies}
		}
		return
	}
	// Every value is cut from one string, and every header's []string from
	// one array: three allocations in all.
	var arr [160]byte
	b := arr[:0]
	var ends [4]int
	if ietf {
		// The parameters are Integers, which serialize as their decimal
		// digits (RFC 9651 4.1.4), in range since quotas are below 2^41 and
		// windows below 367 days.
		b = append(b, most.name...)
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
		b = strconv.AppendInt(b, ceilUnix(now.Add(d.ResetAfter)), 10)
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
		if policies != "" {
			set(HeaderPolicy, policies)
		}
		set(HeaderRateLimit, all[:ends[0]])
	}
	if legacy {
		set(HeaderLimit, all[ends[0]:ends[1]])
		set(HeaderRemaining, all[ends[1]:ends[2]])
		set(HeaderReset, all[ends[2]:ends[3]])
	}
}

// Decided is a request the engine decided, as its rate-limit headers
// describe it, in plain values: which checks are listed, which one decides
// and whether one was decided locally, with each check's Policy.
type Decided struct {
	// Policies holds the Policy of each of the request's checks, in order:
	// nil for a check that is not listed in RateLimit-Policy (a shadow
	// one, which never appears in a header).
	Policies []*Policy
	// Deciding is the index of the check the other fields describe, -1
	// for none; Decision is its decision.
	Deciding int
	Decision floodgate.Decision
	// Local adds HeaderFallback: FallbackLocal.
	Local bool
}

// Write sets d's headers of mode on h, as [Write] does: RateLimit-Policy
// lists the Policies that are not nil, the other fields describe the
// deciding check, and HeaderFallback comes with Local.
func (d *Decided) Write(h http.Header, mode Mode, now time.Time) {
	var list List
	if mode == Both || mode == IETF {
		for _, p := range d.Policies {
			if p != nil {
				list.Add(p)
			}
		}
	}
	if d.Local {
		h[HeaderFallback] = []string{FallbackLocal}
	}
	var most *Policy
	if d.Deciding >= 0 {
		most = d.Policies[d.Deciding]
	}
	Write(h, mode, list.String(), most, d.Decision, now)
}

// effectiveWindow returns the RateLimit t parameter: for an admitted
// request the time until the quota is whole again (exact for a fixed
// window, an upper bound for the others, which replenish gradually); for a
// denied one the Retry-After delay.
func effectiveWindow(d floodgate.Decision) int64 {
	if d.Allowed {
		return CeilSeconds(d.ResetAfter)
	}
	return RetryAfterSeconds(d.RetryAfter)
}

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

package envoy

import (
	"math"
	"math/bits"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
)

// Header names sent in response_headers_to_add.
const (
	headerPolicy    = "RateLimit-Policy"
	headerRateLimit = "RateLimit"
	headerLimit     = "X-RateLimit-Limit"
	headerRemaining = "X-RateLimit-Remaining"
	headerReset     = "X-RateLimit-Reset"
	headerRetry     = "Retry-After"
)

// sfMaxInteger is the largest Structured Fields Integer (RFC 9651 3.3.1).
const sfMaxInteger = 999_999_999_999_999

// responseHeaders describes a request's limits for the client:
// RateLimit-Policy lists every limited, non-shadow rule that applied, and
// the other headers describe the most restrictive one (the one over the
// limit, else the one with the least remaining, else the longest reset).
func responseHeaders(checks []check, resp *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	var (
		policy  httpsfv.List
		seen    = map[string]bool{}
		most    = -1
		mostSt  *rlsv3.RateLimitResponse_DescriptorStatus
		mostDur time.Duration
	)
	for i := range checks {
		c := &checks[i]
		st := resp.Statuses[i]
		r := c.rule
		if r == nil || r.Unlimited || r.ShadowMode || c.negative || st.GetCurrentLimit() == nil {
			continue
		}
		if c.err != nil && st.GetCode() == rlsv3.RateLimitResponse_OK {
			continue // failed open: nothing known to report
		}
		name := r.policyName()
		if !seen[name] {
			seen[name] = true
			it := httpsfv.NewItem(name)
			it.Params.Add("q", policyQuota(r))
			it.Params.Add("w", policyWindow(r))
			policy = append(policy, it)
		}
		dur := st.GetDurationUntilReset().AsDuration()
		better := mostSt == nil
		if !better {
			over, mostOver := st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT, mostSt.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
			switch {
			case over != mostOver:
				better = over
			case over:
				better = dur > mostDur
			default:
				better = st.GetLimitRemaining() < mostSt.GetLimitRemaining() ||
					st.GetLimitRemaining() == mostSt.GetLimitRemaining() && dur > mostDur
			}
		}
		if better {
			most, mostSt, mostDur = i, st, dur
		}
	}
	if most < 0 {
		return nil
	}
	var out []*corev3.HeaderValue
	add := func(k, v string) { out = append(out, &corev3.HeaderValue{Key: k, Value: v}) }
	if p, err := httpsfv.Marshal(policy); err == nil {
		add(headerPolicy, p)
	}
	r := checks[most].rule
	it := httpsfv.NewItem(r.policyName())
	it.Params.Add("r", int64(mostSt.GetLimitRemaining()))
	hasReset := mostSt.GetDurationUntilReset() != nil
	if hasReset {
		it.Params.Add("t", clampSF(ceilSeconds(mostDur)))
	}
	if v, err := httpsfv.Marshal(httpsfv.List{it}); err == nil {
		add(headerRateLimit, v)
	}
	add(headerLimit, strconv.FormatInt(policyQuota(r), 10))
	add(headerRemaining, strconv.FormatUint(uint64(mostSt.GetLimitRemaining()), 10))
	if hasReset {
		add(headerReset, strconv.FormatInt(ceilSeconds(mostDur), 10))
	}
	if mostSt.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && hasReset {
		add(headerRetry, strconv.FormatInt(max(1, ceilSeconds(mostDur)), 10))
	}
	return out
}

// policyQuota is a rule's q: its quota, or capacity for a token bucket (0
// for a rule that blocks everything).
func policyQuota(r *Rule) int64 {
	if r.blocked() {
		return 0
	}
	return r.Limit.Quota
}

// policyWindow is a rule's w in whole seconds (at least 1): its unit, or
// for a token bucket the time to refill from empty.
func policyWindow(r *Rule) int64 {
	l := r.Limit
	if r.blocked() || l.Algorithm != floodgate.TokenBucket {
		return clampSF(ceilSeconds(UnitDuration(r.Unit)))
	}
	us := l.Window.Microseconds()
	div := uint64(l.RefillTokens()) * 1e6
	if hi, lo := bits.Mul64(uint64(l.Quota), uint64(us)); hi == 0 {
		return clampSF(int64((lo-1)/div + 1))
	}
	return clampSF(int64(math.Ceil(float64(l.Quota) * float64(us) / float64(div))))
}

func clampSF(n int64) int64 { return max(1, min(n, sfMaxInteger)) }

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

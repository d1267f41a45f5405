package envoy

import (
	"math"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// count records one descriptor's outcome, in floodgate's metrics and in
// the reference's, with labels bounded by the configuration (see
// metricKeyOf and unknownLabel). cached says the over-limit cache answered
// the descriptor, which the reference counts as over_limit and
// over_limit_with_local_cache. dom is the request's domain in set, nil if
// unknown.
func (s *Service) count(set *ruleSet, dom *domain, desc *ratelimitv3.RateLimitDescriptor, d *descriptor,
	st *rlsv3.RateLimitResponse_DescriptorStatus, o outcome, cached bool) {
	r := d.rule
	if r == nil || d.kind == kindReplaced {
		sr := s.unknown
		if dom != nil {
			sr = set.noRule[dom]
		}
		s.metrics.outcome(sr, o).Inc()
		return
	}
	sr := set.rule[r]
	if key := s.metricKeyOf(r, desc); sr == nil || key != r.Key {
		// A limit override, or a key made of the request's values.
		sr = newSeries(r.Domain, key)
	}
	s.metrics.outcome(sr, o).Inc()
	if d.kind == kindUnlimited || d.kind == kindNegative {
		return // the reference does not count them
	}
	pc := s.metrics.peerStats(sr)
	add := func(stat int, n uint64) {
		if n > 0 {
			pc.n[stat].Add(n)
		}
	}
	// The reference's arithmetic (limiter.BaseRateLimiter): its counter
	// before and after this request's hits, from what remains.
	q, h, rem := uint64(r.RequestsPerUnit), uint64(d.cost), uint64(min(st.GetLimitRemaining(), r.RequestsPerUnit))
	near := uint64(math.Floor(float64(float32(q) * float32(s.near))))
	add(statTotalHits, h)
	switch {
	case o == outcomeLocalOK:
		add(statWithinLimit, h) // against the local share: no near_limit
	case o == outcomeLocalOverLimit:
		add(statOverLimit, h)
	case cached && o == outcomeOverLimit:
		add(statOverLimit, h)
		add(statOverLimitWithLocalCache, h)
	case o == outcomeOverLimit, o == outcomeBlocked, o == outcomeShadowOverLimit:
		before := q - rem
		after := before + h
		if before >= q {
			add(statOverLimit, h)
		} else {
			add(statOverLimit, after-q)
			add(statNearLimit, q-max(near, before))
		}
		if r.ShadowMode { // the rule's own: global SHADOW_MODE counts in global_shadow_mode only
			if before >= q {
				add(statShadowMode, h)
			} else {
				add(statShadowMode, after-q)
			}
		}
	case o == outcomeOK:
		after := q - rem
		before := after - min(h, after)
		if after > near {
			if before >= near {
				add(statNearLimit, h)
			} else {
				add(statNearLimit, after-near)
			}
		}
		add(statWithinLimit, h)
	}
}

// metricKeyOf names a matched descriptor in metrics as the reference does:
// the rule's key, or for detailed_metric and value_to_metric rules and limit
// overrides the key made of the request's values, while fewer than
// maxDynamicKeys are in use (past it, the configured key).
func (s *Service) metricKeyOf(r *Rule, desc *ratelimitv3.RateLimitDescriptor) string {
	var dynamic, static string
	switch {
	case r.override:
		dynamic, static = r.Key, keysOnly(r.Domain, desc)
	case r.DetailedMetric:
		dynamic, static = detailedKey(r, desc), r.Key
	case r.toMetric:
		dynamic, static = valueToMetricKey(r, desc), r.Key
	default:
		return r.Key
	}
	if dynamic == static || s.metrics.dynamic.admit(dynamic) {
		return dynamic
	}
	return static
}

// keysOnly is domain.key.key...: a limit override's bounded name.
func keysOnly(domainName string, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domainName)
	for _, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
	}
	return b.String()
}

// detailedKey is the reference's detailed_metric key: every entry as
// key_value, a share_threshold entry as key_pattern.
func detailedKey(r *Rule, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(r.Domain)
	for i, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		v := e.GetValue()
		if i < len(r.levels) && r.levels[i].share != "" {
			v = r.levels[i].share
		}
		b.WriteByte('_')
		b.WriteString(v)
	}
	return b.String()
}

// valueToMetricKey is the reference's value_to_metric key: the configured
// path, with the request's value at the levels that set value_to_metric
// (but for share_threshold wildcards, which keep their pattern).
func valueToMetricKey(r *Rule, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(r.Domain)
	for i, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		v := ""
		if i < len(r.levels) {
			l := r.levels[i]
			wildcard := strings.HasSuffix(l.value, "*")
			switch {
			case l.share != "":
				v = l.share
			case wildcard && l.toMetric, l.value == "" && l.toMetric:
				v = e.GetValue()
			default:
				v = l.value
			}
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

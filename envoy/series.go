package envoy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// series are the counters of one descriptor's label values: its
// floodgate_envoy_descriptors_total by outcome and, for a rule, the
// reference's statistics. Each counter is looked up in its vector on first
// use and kept, so a descriptor of a configured rule costs no label hashing
// per request; counters never used are never created, so the exported
// series are the same as without the cache.
type series struct {
	domain, key string // the labels domain and descriptor
	outcomes    [numOutcomes]atomic.Pointer[prometheus.Counter]
	peer        atomic.Pointer[peerCounters]
}

// newSeries returns the series of a descriptor counted under domain and
// key (the rule's metric key, or "" when no rule applies).
func newSeries(domain, key string) *series {
	return &series{domain: domain, key: key}
}

// outcome returns the descriptors counter of outcome o.
func (m *metrics) outcome(sr *series, o outcome) prometheus.Counter {
	if c := sr.outcomes[o].Load(); c != nil {
		return *c
	}
	c := m.descriptors.WithLabelValues(sr.domain, sr.key, o.String())
	sr.outcomes[o].Store(&c)
	return c
}

// peerStats returns the counters of the reference's statistics of sr's
// key (which must not be "").
func (m *metrics) peerStats(sr *series) *peerCounters {
	if c := sr.peer.Load(); c != nil {
		return c
	}
	c := m.stats.get(sr.domain, sr.key)
	sr.peer.Store(c)
	return c
}

// ruleSet is the rules in force with the series of their configured
// descriptors, swapped together by SetRules.
type ruleSet struct {
	rules  *Rules
	rule   map[*Rule]*series   // a rule's series under its domain and key
	noRule map[*domain]*series // a known domain's descriptors without a rule
}

// newRuleSet resolves the series of every rule of r (which must not be
// nil).
func newRuleSet(r *Rules) *ruleSet {
	rs := &ruleSet{rules: r, rule: map[*Rule]*series{}, noRule: make(map[*domain]*series, len(r.domains))}
	for _, d := range r.domains {
		rs.noRule[d] = newSeries(d.name, "")
		d.root.each(func(rule *Rule) {
			if _, ok := rs.rule[rule]; !ok {
				rs.rule[rule] = newSeries(rule.Domain, rule.Key)
			}
		})
	}
	return rs
}

// each calls fn with every rule of the table and the tables below it.
func (t keyTable) each(fn func(*Rule)) {
	for _, kn := range t {
		nodes := append([]*node{kn.any}, kn.wildcards...)
		for _, n := range kn.exact {
			nodes = append(nodes, n)
		}
		for _, n := range nodes {
			if n == nil {
				continue
			}
			if n.rule != nil {
				fn(n.rule)
			}
			n.children.each(fn)
		}
	}
}

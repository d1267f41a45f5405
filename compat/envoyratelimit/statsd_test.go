package envoyratelimit

import (
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/statsd/statsdtest"
)

// statsdTag is the EXTRA_TAGS both services run with, and the suffix it
// gives every name.
const (
	statsdTag    = "suite:sidebyside"
	statsdSuffix = ".__suite=sidebyside"
)

// statsdFlush is both services' STATS_FLUSH_INTERVAL.
const statsdFlush = 200 * time.Millisecond

// statsdSink is a statsd server on a real UDP socket that a service under
// test pushes to.
type statsdSink struct{ *statsdtest.Sink }

func newStatsdSink(t *testing.T) *statsdSink { return &statsdSink{statsdtest.Listen(t)} }

// env is the statistics environment of a service pushing to s.
func (s *statsdSink) env() []string {
	return []string{"USE_STATSD=true", "DISABLE_STATS=false", "STATSD_PROTOCOL=udp", "STATSD_HOST=127.0.0.1",
		"STATSD_PORT=" + strconv.Itoa(s.Port()),
		"STATS_FLUSH_INTERVAL=" + statsdFlush.String(), "EXTRA_TAGS=" + statsdTag}
}

// snapshot returns the service's counters' totals by name (not the Go
// runtime's, which change at every flush).
func (s *statsdSink) snapshot() map[string]uint64 {
	m := s.Counters()
	maps.DeleteFunc(m, func(name string, _ uint64) bool {
		return !strings.HasPrefix(name, "ratelimit.service.") && !strings.HasPrefix(name, "ratelimit_server.")
	})
	return m
}

// settle waits until the sinks' totals have not changed for a few flushes
// (both services have pushed what the requests counted), within a
// generous bound.
func settle(t *testing.T, sinks ...*statsdSink) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last []map[string]uint64
	stable := 0
	for stable < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("statsd totals never settled")
		}
		time.Sleep(statsdFlush)
		now := make([]map[string]uint64, len(sinks))
		for i, s := range sinks {
			now[i] = s.snapshot()
		}
		if last != nil && slices.EqualFunc(last, now, maps.Equal) && len(now[0]) > 0 {
			stable++
		} else {
			stable = 0
		}
		last = now
	}
}

// noteStats records the statistics keys of a step's descriptors whose
// counts may differ: those a Difference applies to (floodgate counts what
// it did not consume as not consumed), and those whose hits exceed the
// whole quota (floodgate never asks the store about them).
func (ps *pair) noteStats(s step, rs []*envoy.Rule, hits []uint64, peek []bool, want []expected) {
	for i, r := range rs {
		if r == nil || !want[i].limited {
			continue
		}
		key := r.Key
		if r.DetailedMetric {
			var b strings.Builder
			b.WriteString(s.domain)
			for _, e := range s.descs[i] {
				k, v, _ := strings.Cut(e, "=")
				b.WriteString("." + k + "_" + v)
			}
			key = b.String()
		}
		if r.ShadowMode {
			ps.shadowKeys[key] = true
		}
		note := func(df string) {
			if ps.statsKeys[key] == nil {
				ps.statsKeys[key] = map[string]bool{}
			}
			ps.statsKeys[key][df] = true
		}
		if want[i].differs != "" {
			note(want[i].differs)
		}
		if !peek[i] && hits[i] > uint64(r.RequestsPerUnit) && r.RequestsPerUnit > 0 {
			note("never-fits-stats")
		}
	}
}

// diffStats compares the ratelimit.service.rate_limit.* names and totals
// the two services pushed: the same names, with the same totals, but
// where a listed Difference applies: the names of domains no file
// configures (statsd-domain-not-found); over_limit and near_limit of the
// keys in statsKeys, and also within_limit (and shadow_mode, for shadow
// rules) under denied-consumes-nothing. total_hits are always equal.
func (ps *pair) diffStats(t *testing.T, peer, fg *statsdSink, diffs map[string]int) {
	t.Helper()
	settle(t, peer, fg)
	pt, ft := peer.snapshot(), fg.snapshot()
	for _, s := range []*statsdSink{peer, fg} {
		if bad := s.Bad(); len(bad) > 0 {
			t.Errorf("lines not in statsd form: %q", bad)
		}
	}
	names := map[string]bool{}
	for _, m := range []map[string]uint64{pt, ft} {
		for name := range m {
			base, ok := strings.CutSuffix(name, statsdSuffix)
			if !ok {
				t.Errorf("%s: no EXTRA_TAGS suffix %s", name, statsdSuffix)
			}
			if strings.HasPrefix(base, "ratelimit.service.rate_limit.") {
				names[base] = true
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no ratelimit.service.rate_limit.* statistics pushed")
	}
	matched := 0
	for _, name := range slices.Sorted(maps.Keys(names)) {
		p, pok := pt[name+statsdSuffix]
		f, fok := ft[name+statsdSuffix]
		if p == f && pok == fok {
			matched++
			continue
		}
		key := strings.TrimPrefix(name, "ratelimit.service.rate_limit.")
		stat := key[strings.LastIndexByte(key, '.')+1:]
		key = key[:len(key)-len(stat)-1]
		why, df := ps.statsKeys[key], ""
		switch {
		case stat == "domain_not_found" && pok && !fok:
			df = "statsd-domain-not-found"
		case stat == "total_hits", stat == "over_limit_with_local_cache":
			// every hit counts in both; no local cache here
		case stat == "shadow_mode" && !ps.shadowKeys[key]:
			// only rules in shadow_mode count it, in both
		case why["never-fits-stats"] && (stat == "over_limit" || stat == "near_limit"):
			df = "never-fits-stats"
		case why["denied-consumes-nothing"]:
			df = "denied-consumes-nothing"
		}
		if df != "" {
			diffs[df]++
			t.Logf("statsd %s: peer %d, floodgate %d (deliberate: %s)", name, p, f, df)
			continue
		}
		t.Errorf("statsd %s: peer %d (pushed %v), floodgate %d (pushed %v)", name, p, pok, f, fok)
	}
	t.Logf("statsd: %d of %d ratelimit.service.rate_limit.* names with equal totals", matched, len(names))
	for _, name := range []string{"ratelimit.service.config_load_success", "ratelimit_server.ShouldRateLimit.total_requests"} {
		if p, f := pt[name+statsdSuffix], ft[name+statsdSuffix]; p != f || p == 0 {
			t.Errorf("statsd %s: peer %d, floodgate %d", name, p, f)
		}
	}
	// The other names: all the peer's but for UnsentStats, and no other.
	for _, d := range []struct {
		who        string
		from, to   map[string]string
		unsentOnly bool
	}{{"the peer", peer.Types(), fg.Types(), true}, {"floodgate", fg.Types(), peer.Types(), false}} {
		for name, typ := range d.from {
			base := strings.TrimSuffix(name, statsdSuffix)
			if _, ok := d.to[name]; ok || strings.HasPrefix(base, "ratelimit.service.rate_limit.") {
				continue
			}
			if df := unsent(base); d.unsentOnly && df != "" {
				diffs[df]++
				continue
			}
			t.Errorf("statsd %s (|%s) pushed by %s only", base, typ, d.who)
		}
	}
}

// unsent returns the UnsentStats name that covers a statsd name, or "".
func unsent(name string) string {
	for _, u := range UnsentStats {
		if ok, _ := path.Match(u.Name, name); ok {
			return u.Name
		}
	}
	return ""
}

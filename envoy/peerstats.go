package envoy

import (
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// peerCounters are the reference's per-rule statistics of one metric key:
// the one count behind both its Prometheus series (ratelimit_service_*)
// and its statsd names (Service.PeerStats).
type peerCounters struct {
	domain, key1, key2 string // the Prometheus labels
	name               string // the statsd name without the statistic: ratelimit.service.rate_limit.<key>
	n                  [peerStats]atomic.Uint64
}

// peerTable holds the peerCounters of every metric key counted: the
// configured rules' keys, and the per-request keys (detailed_metric,
// value_to_metric, limit overrides), which metricKeyOf bounds.
type peerTable struct {
	byKey sync.Map // metric key -> *peerCounters
}

// get returns the counters of a key of domain, creating them on first use.
func (t *peerTable) get(domain, key string) *peerCounters {
	if c, ok := t.byKey.Load(key); ok {
		return c.(*peerCounters)
	}
	clean := sanitizeStatName(key)
	rest := strings.TrimPrefix(clean, sanitizeStatName(domain)+".")
	c := &peerCounters{domain: domain, name: "ratelimit.service.rate_limit." + clean}
	c.key1, c.key2, _ = strings.Cut(rest, ".")
	if i := strings.IndexByte(c.key2, '.'); i >= 0 {
		c.key2 = c.key2[:i]
	}
	v, _ := t.byKey.LoadOrStore(key, c)
	return v.(*peerCounters)
}

// each calls fn with every key's counters.
func (t *peerTable) each(fn func(*peerCounters)) {
	t.byKey.Range(func(_, v any) bool { fn(v.(*peerCounters)); return true })
}

// ipv4 is the reference's pattern of an IPv4 address in a stat name.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStatName is the reference's utils.SanitizeStatName: ':' and '|'
// become '_', and so do the dots of IPv4 addresses (a request's values in
// a detailed_metric key), so that they do not split the name. Control
// characters become '_' too (the reference keeps them): a newline in a
// request's value would end the statsd line and start one of the caller's.
func sanitizeStatName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == ':' || r == '|' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// peerCollector exports a peerTable as the reference's Prometheus mapping
// names it: ratelimit_service_rate_limit_<stat>{domain, key1, key2}, the
// keys with the same labels summed. A series is exported once counted.
type peerCollector struct{ t *peerTable }

var peerDescs = func() (d [peerStats]*prometheus.Desc) {
	for i, name := range peerStatNames {
		d[i] = prometheus.NewDesc("ratelimit_service_rate_limit_"+name,
			"envoyproxy/ratelimit's ratelimit.service.rate_limit.<domain>.<key>."+name+" (hits), labelled as its Prometheus mapping labels it: "+
				"domain, and the first two parts of the rule's key (key1, key2).",
			[]string{"domain", "key1", "key2"}, nil)
	}
	return d
}()

// Describe implements prometheus.Collector.
func (c peerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range peerDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c peerCollector) Collect(ch chan<- prometheus.Metric) {
	sums := map[[3]string]*[peerStats]uint64{}
	c.t.each(func(pc *peerCounters) {
		l := [3]string{pc.domain, pc.key1, pc.key2}
		s := sums[l]
		if s == nil {
			s = new([peerStats]uint64)
			sums[l] = s
		}
		for i := range s {
			s[i] += pc.n[i].Load()
		}
	})
	for l, s := range sums {
		for i, v := range s {
			if v > 0 {
				if m, err := prometheus.NewConstMetric(peerDescs[i], prometheus.CounterValue, float64(v), l[0], l[1], l[2]); err == nil {
					ch <- m // (an error is a label value that is not UTF-8, which gRPC and /json refuse anyway)
				}
			}
		}
	}
}

// PeerStats calls emit with each of envoyproxy/ratelimit's statistics the
// service keeps, named as the reference names them in statsd (without its
// EXTRA_TAGS), with its total since the service started: they are all
// counters. They are the counts behind the ratelimit_service_* Prometheus
// series, not a second count:
//
//   - ratelimit.service.rate_limit.<key>.{total_hits, over_limit, near_limit,
//     within_limit, shadow_mode, over_limit_with_local_cache}, under each
//     metric key counted (bounded as the Prometheus series are);
//   - ratelimit.service.config_load_success and config_load_error;
//   - ratelimit.service.global_shadow_mode;
//   - ratelimit.service.call.should_rate_limit.redis_error and service_error;
//   - ratelimit_server.ShouldRateLimit.total_requests.
//
// It is safe to call while the service serves.
func (s *Service) PeerStats(emit func(name string, total uint64)) {
	m := s.metrics
	totals := map[string]uint64{}
	m.stats.each(func(pc *peerCounters) {
		for i, name := range peerStatNames {
			totals[pc.name+"."+name] += pc.n[i].Load()
		}
	})
	for name, total := range totals {
		emit(name, total)
	}
	emit("ratelimit.service.config_load_success", counterTotal(m.loadSuccess, ""))
	emit("ratelimit.service.config_load_error", counterTotal(m.loadError, ""))
	emit("ratelimit.service.global_shadow_mode", counterTotal(m.globalShadow, ""))
	emit("ratelimit.service.call.should_rate_limit.redis_error", counterTotal(m.callErrors, "redis_error"))
	emit("ratelimit.service.call.should_rate_limit.service_error", counterTotal(m.callErrors, "service_error"))
	emit("ratelimit_server.ShouldRateLimit.total_requests", counterTotal(m.requests, ""))
}

// counterTotal reads the sum of the counters c exports, only those with a
// label of value label if it is not "".
func counterTotal(c prometheus.Collector, label string) uint64 {
	ch := make(chan prometheus.Metric, 8)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for metric := range ch {
		var d dto.Metric
		if metric.Write(&d) != nil || d.Counter == nil {
			continue
		}
		if label != "" && !hasLabelValue(&d, label) {
			continue
		}
		sum += d.Counter.GetValue()
	}
	return uint64(sum)
}

func hasLabelValue(d *dto.Metric, v string) bool {
	for _, l := range d.GetLabel() {
		if l.GetValue() == v {
			return true
		}
	}
	return false
}

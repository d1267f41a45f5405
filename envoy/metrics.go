package envoy

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// metrics are the service's Prometheus collectors, registered on the
// Registerer the caller passes (no global state).
type metrics struct {
	requests     *prometheus.CounterVec
	requestsOK   lazyCounter // requests{code="ok"}
	requestsOver lazyCounter // requests{code="over_limit"}
	descriptors  *prometheus.CounterVec
	duration     prometheus.Histogram
	storeErrors  prometheus.Counter
	refundErrors prometheus.Counter

	// envoyproxy/ratelimit's statistics, named as its Prometheus mapping
	// names them; the per-rule ones are kept in stats, exported by
	// peerCollector, and sent by statsd (Service.PeerStats).
	stats        peerTable
	loadSuccess  prometheus.Counter
	loadError    prometheus.Counter
	callErrors   *prometheus.CounterVec
	globalShadow prometheus.Counter

	dynamic dynamicKeys // the detailed_metric and value_to_metric keys seen

	// The quota service's (StreamRateLimitQuotas).
	quotaStreams prometheus.Gauge
	quotaReports prometheus.Counter
	quotaActions prometheus.Counter
}

// lazyCounter is one counter of a vector, looked up once, on first use (so
// that it is exported only once counted, as WithLabelValues would).
type lazyCounter struct {
	vec    *prometheus.CounterVec
	labels []string
	c      atomic.Pointer[prometheus.Counter]
}

// Inc adds one.
func (l *lazyCounter) Inc() {
	c := l.c.Load()
	if c == nil {
		v := l.vec.WithLabelValues(l.labels...)
		c = &v
		l.c.Store(c)
	}
	(*c).Inc()
}

// The reference's per-rule statistics, in the order of peerStatNames.
const (
	statTotalHits = iota
	statOverLimit
	statNearLimit
	statWithinLimit
	statShadowMode
	statOverLimitWithLocalCache
	peerStats
)

var peerStatNames = [peerStats]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode", "over_limit_with_local_cache"}

// maxDynamicKeys bounds the distinct per-request metric keys (the rules with
// detailed_metric or value_to_metric name their series by the request's
// values): past it, such rules count under their configured key.
const maxDynamicKeys = 1000

// dynamicKeys remembers the per-request metric keys in use, up to
// maxDynamicKeys.
type dynamicKeys struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// admit reports whether key may name a series: it is known, or there is
// room for one more.
func (k *dynamicKeys) admit(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen[key]; ok {
		return true
	}
	if len(k.seen) >= maxDynamicKeys {
		return false
	}
	if k.seen == nil {
		k.seen = map[string]struct{}{}
	}
	k.seen[key] = struct{}{}
	return true
}

// Values of the "code" label of floodgate_envoy_requests_total besides the
// gRPC error codes.
const (
	codeOK        = "ok"
	codeOverLimit = "over_limit"
)

// unknownLabel is the domain label of requests for domains no file
// configures, so callers cannot grow the metrics without bound.
const unknownLabel = "(unknown)"

// codeLabel names a gRPC error code in snake case, such as
// "invalid_argument".
func codeLabel(c codes.Code) string {
	switch c {
	case codes.InvalidArgument:
		return "invalid_argument"
	case codes.Unavailable:
		return "unavailable"
	case codes.Internal:
		return "internal"
	case codes.Canceled:
		return "canceled"
	case codes.DeadlineExceeded:
		return "deadline_exceeded"
	}
	return "other"
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_envoy_requests_total",
			Help: "ShouldRateLimit calls by result: ok, over_limit, or the gRPC error (invalid_argument, unavailable, internal).",
		}, []string{"code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_envoy_descriptors_total",
			Help: "Request descriptors by domain, matched rule (its key, as envoyproxy/ratelimit names it in its statistics) and outcome: " +
				"ok, over_limit, shadow_over_limit, unlimited, blocked, no_rule, replaced, negative_hits, fail_open, fail_closed, fail_error, error, " +
				"skipped (not asked: another descriptor decided the request first), local_ok, local_over_limit (failure_mode local: decided by this instance alone while the store was unavailable).",
		}, []string{"domain", "descriptor", "outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floodgate_envoy_request_duration_seconds",
			Help:    "Time to answer ShouldRateLimit, store calls included.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_store_errors_total",
			Help: "Descriptors the store could not decide in time (the rule's failure mode answered, or this instance alone under failure_mode local), and is_negative_hits give-backs that failed.",
		}),
		refundErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_refund_errors_total",
			Help: "Requests not admitted whose refund failed, so they kept quota one of their descriptors took.",
		}),
	}
	m.requestsOK.vec, m.requestsOK.labels = m.requests, []string{codeOK}
	m.requestsOver.vec, m.requestsOver.labels = m.requests, []string{codeOverLimit}
	m.loadSuccess = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_config_load_success", Help: "Rule folders loaded (at start and on each reload), as envoyproxy/ratelimit counts them."})
	m.loadError = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_config_load_error", Help: "Rule reloads that failed and kept the rules in force, as envoyproxy/ratelimit counts them."})
	m.callErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_service_should_rate_limit_error",
		Help: "ShouldRateLimit calls that failed, as envoyproxy/ratelimit counts them: redis_error (the store), service_error (the request)."},
		[]string{"err_type"})
	m.globalShadow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_global_shadow_mode", Help: "Requests over the limit answered OK because of the global shadow mode (SHADOW_MODE)."})
	m.quotaStreams = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_envoy_quota_streams", Help: "Envoy streams open on the quota service (StreamRateLimitQuotas)."})
	m.quotaReports = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_envoy_quota_reports_total", Help: "Usage reports received on the quota service."})
	m.quotaActions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_envoy_quota_actions_total", Help: "Bucket actions (assignments, abandons) the quota service sent."})
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.requests, m.descriptors, m.duration, m.storeErrors, m.refundErrors,
		m.loadSuccess, m.loadError, m.callErrors, m.globalShadow, peerCollector{&m.stats}, peerServerCollector{m},
		m.quotaStreams, m.quotaReports, m.quotaActions}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("envoy: registering metrics: %w", err)
		}
	}
	return m, nil
}

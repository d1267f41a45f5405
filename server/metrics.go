package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
)

// metrics are the server's Prometheus collectors, registered on the
// registry the caller passes (no global state).
type metrics struct {
	decisions        *prometheus.CounterVec
	storeLatency     *prometheus.HistogramVec
	decisionDuration prometheus.Histogram
	storeErrors      *prometheus.CounterVec
	failureMode      *prometheus.CounterVec
	reloads          *prometheus.CounterVec
	inFlight         prometheus.Gauge
	shed             *prometheus.CounterVec
	authFailures     *prometheus.CounterVec
	cacheHits        *prometheus.CounterVec
	leased           *prometheus.CounterVec
}

// Decision outcomes, the "outcome" label of floodgate_decisions_total.
const (
	outcomeAllowed      = "allowed"
	outcomeDenied       = "denied"
	outcomeShadowDenied = "shadow_denied"
	outcomeFailOpen     = "fail_open"
	outcomeFailClosed   = "fail_closed"
	outcomeError        = "error"
)

// storeBuckets are the latency histograms' buckets, in seconds.
var storeBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// newStoreLatency returns floodgate_store_latency_seconds, which the engine
// feeds (decide.Options.OnStoreCall) before the other metrics exist.
func newStoreLatency() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "floodgate_store_latency_seconds",
		Help:    "Time spent in calls to the store, by operation (allow, lease, refund, reset, ready, and the store API's); cache hits, leased decisions and the local fallback make none.",
		Buckets: storeBuckets,
	}, []string{"op"})
}

func newMetrics(reg prometheus.Registerer, engine *decide.Engine, storeLatency *prometheus.HistogramVec) (*metrics, error) {
	m := &metrics{
		storeLatency: storeLatency,
		decisionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floodgate_decision_duration_seconds",
			Help:    "Time to decide a request of the API or forward auth, the over-limit cache, the local fallback and refunds included.",
			Buckets: storeBuckets,
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Rate-limit decisions by rule and outcome (allowed, denied, shadow_denied, fail_open, fail_closed, error).",
		}, []string{"rule", "outcome"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_store_errors_total",
			Help: "Store calls that failed (outages and other store errors), by rule.",
		}, []string{"rule"}),
		failureMode: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_failure_mode_activations_total",
			Help: "Requests decided by a rule's failure mode because the store was unavailable (or not asked, over max_in_flight), by rule and mode (open, closed, local).",
		}, []string{"rule", "mode"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total",
			Help: "Configuration reloads, by result (ok, error).",
		}, []string{"result"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_http_in_flight",
			Help: "API requests under the in-flight cap (max_in_flight) now.",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_requests_shed_total",
			Help: "API requests over the in-flight cap (max_in_flight), answered without the store (decisions by their rule's failure mode), by route.",
		}, []string{"route"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_auth_failures_total",
			Help: "API requests refused for their bearer token, by reason (missing, invalid, forbidden).",
		}, []string{"reason"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_overlimit_cache_hits_total",
			Help: "Requests denied from the over-limit cache, without asking the store, by rule.",
		}, []string{"rule"}),
		leased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_leased_decisions_total",
			Help: "Requests of a rule with a lease decided through it (from the units this instance holds, or by the fetch of a block), by rule.",
		}, []string{"rule"}),
	}
	cacheEntries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "floodgate_overlimit_cache_entries",
		Help: "Denials the over-limit cache holds.",
	}, func() float64 { return float64(engine.CacheStats().Entries) })
	cacheBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "floodgate_overlimit_cache_bytes",
		Help: "Memory the over-limit cache holds, as it estimates it.",
	}, func() float64 { return float64(engine.CacheStats().Bytes) })
	cacheEvictions := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "floodgate_overlimit_cache_evictions_total",
		Help: "Denials the over-limit cache dropped before their retry delay, to stay within its bounds.",
	}, func() float64 { return float64(engine.CacheStats().Evictions) })
	cacheWaits := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "floodgate_overlimit_cache_waits_total",
		Help: "Checks that waited for another request's store call for the same key, its cached denial having expired, before looking again.",
	}, func() float64 { return float64(engine.CacheStats().Waits) })
	// Series of fixed labels start at 0, so that a dashboard's rate() and
	// an alert on them see the first event.
	for _, reason := range []string{"missing", "invalid", "forbidden"} {
		m.authFailures.WithLabelValues(reason)
	}
	for _, result := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(result)
	}
	for _, c := range []prometheus.Collector{m.decisions, m.storeLatency, m.decisionDuration, m.storeErrors, m.failureMode, m.reloads,
		m.inFlight, m.shed, m.authFailures, m.cacheHits, m.leased, cacheEntries, cacheBytes, cacheEvictions, cacheWaits} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}

// count records a one-rule request's result: its decision outcome, and a
// store failure with the failure mode it met, counted whether or not the
// caller is still there. A request shed at the in-flight cap
// (ErrOverloaded) never asked the store.
func (m *metrics) count(res *decide.Result) {
	c, o := &res.Checks[0], &res.Outcomes[0]
	if o.Cached {
		m.cacheHits.WithLabelValues(c.Rule).Inc()
	}
	if o.Leased {
		m.leased.WithLabelValues(c.Rule).Inc()
	}
	if frontend.EventOf(res, 0, false) == frontend.StoreFailed {
		m.storeErrors.WithLabelValues(c.Rule).Inc()
	}
	if o.RefundErr != nil {
		m.storeErrors.WithLabelValues(c.Rule).Inc()
	}
	if o.Local {
		m.failureMode.WithLabelValues(c.Rule, decide.FailLocal.String()).Inc()
	}
	var outcome string
	switch {
	case c.Shadow && o.WouldDeny(): // denied, or a cost it would refuse
		outcome = outcomeShadowDenied
	case o.Verdict == decide.Admitted:
		outcome = outcomeAllowed
	case o.Verdict == decide.Denied:
		outcome = outcomeDenied
	case o.Verdict == decide.Unavailable:
		mode := c.Mode()
		outcome = outcomeFailClosed
		if mode == decide.FailOpen {
			outcome = outcomeFailOpen
		}
		m.failureMode.WithLabelValues(c.Rule, mode.String()).Inc()
	case o.Verdict == decide.StoreError:
		outcome = outcomeError
	default: // Invalid: the caller's error, not a decision
		return
	}
	m.decisions.WithLabelValues(c.Rule, outcome).Inc()
}

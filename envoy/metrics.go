package envoy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// metrics are the service's Prometheus collectors, registered on the
// Registerer the caller passes (no global state).
type metrics struct {
	requests     *prometheus.CounterVec
	descriptors  *prometheus.CounterVec
	duration     prometheus.Histogram
	storeErrors  prometheus.Counter
	refundErrors prometheus.Counter
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
				"skipped (not asked: another descriptor decided the request first).",
		}, []string{"domain", "descriptor", "outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floodgate_envoy_request_duration_seconds",
			Help:    "Time to answer ShouldRateLimit, store calls included.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_store_errors_total",
			Help: "Descriptors the store could not decide in time (the rule's failure mode answered), and is_negative_hits give-backs that failed.",
		}),
		refundErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_envoy_refund_errors_total",
			Help: "Requests not admitted whose refund failed, so they kept quota one of their descriptors took.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.descriptors, m.duration, m.storeErrors, m.refundErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("envoy: registering metrics: %w", err)
		}
	}
	return m, nil
}

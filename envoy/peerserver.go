package envoy

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// peerServerCollector exports the reference's per-method series under the
// names its Prometheus mapping gives them (src/stats/prom/default_mapper.yaml:
// ratelimit_server.<method>.total_requests and .response_time), from
// floodgate's own floodgate_envoy_requests_total and
// floodgate_envoy_request_duration_seconds: one count, two names.
type peerServerCollector struct{ m *metrics }

var (
	peerTotalRequestsDesc = prometheus.NewDesc("ratelimit_service_total_requests",
		"envoyproxy/ratelimit's ratelimit_server.<method>.total_requests: ShouldRateLimit calls, every result (floodgate_envoy_requests_total summed).",
		[]string{"grpc_method"}, nil)
	peerResponseTimeDesc = prometheus.NewDesc("ratelimit_service_response_time_seconds",
		"envoyproxy/ratelimit's ratelimit_server.<method>.response_time: the time to answer ShouldRateLimit "+
			"(floodgate_envoy_request_duration_seconds, with its buckets).",
		[]string{"grpc_method"}, nil)
)

// shouldRateLimitMethod is the grpc_method label of the series.
const shouldRateLimitMethod = "ShouldRateLimit"

// Describe implements prometheus.Collector.
func (c peerServerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- peerTotalRequestsDesc
	ch <- peerResponseTimeDesc
}

// Collect implements prometheus.Collector.
func (c peerServerCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(peerTotalRequestsDesc, prometheus.CounterValue,
		float64(counterTotal(c.m.requests, "")), shouldRateLimitMethod)
	var d dto.Metric
	if c.m.duration.Write(&d) != nil || d.Histogram == nil {
		return
	}
	h := d.Histogram
	buckets := make(map[float64]uint64, len(h.GetBucket()))
	for _, b := range h.GetBucket() {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	ch <- prometheus.MustNewConstHistogram(peerResponseTimeDesc, h.GetSampleCount(), h.GetSampleSum(), buckets, shouldRateLimitMethod)
}

// Package tracing is the front ends' glue to OpenTelemetry beyond the
// engine's spans: the W3C trace context of inbound and outbound calls, and
// exemplars of a span on Prometheus histograms.
package tracing

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagator reads and writes W3C traceparent and tracestate.
var propagator propagation.TraceContext

// FromHeader returns ctx with the remote span context of h's traceparent
// (and tracestate): the parent of the spans made under it. ctx is returned
// as it is when it already holds a span context (a caller's own
// instrumentation made it) or h has no traceparent.
func FromHeader(ctx context.Context, h http.Header) context.Context {
	if len(h["Traceparent"]) == 0 || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// FromMetadata is FromHeader for gRPC metadata, whose keys are lower case.
func FromMetadata(ctx context.Context, md map[string][]string) context.Context {
	if len(md["traceparent"]) == 0 || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return propagator.Extract(ctx, metadataCarrier(md))
}

// Inject writes ctx's span context into h as traceparent (and
// tracestate), if ctx holds a valid one; otherwise h is left alone.
func Inject(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// ExemplarLabel names the trace id in an exemplar, as Grafana and
// Prometheus expect it.
const ExemplarLabel = "trace_id"

// Observe observes v on o, with sc's trace id as its exemplar when sc is
// sampled (and o takes exemplars, as client_golang's histograms do).
func Observe(o prometheus.Observer, sc trace.SpanContext, v float64) {
	if sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{ExemplarLabel: sc.TraceID().String()})
			return
		}
	}
	o.Observe(v)
}

// metadataCarrier reads gRPC metadata for the propagator.
type metadataCarrier map[string][]string

func (m metadataCarrier) Get(key string) string {
	if v := m[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { m[key] = []string{value} }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

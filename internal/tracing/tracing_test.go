package tracing

import (
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
)

const parent = "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"

func TestFromAndInject(t *testing.T) {
	own := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled}))
	tests := []struct {
		name string
		ctx  context.Context
		get  func(context.Context) context.Context
		want string // the trace id ctx holds after, "" for none
	}{
		{"header", context.Background(), func(ctx context.Context) context.Context {
			return FromHeader(ctx, http.Header{"Traceparent": {parent}})
		}, "0102030405060708090a0b0c0d0e0f10"},
		{"metadata", context.Background(), func(ctx context.Context) context.Context {
			return FromMetadata(ctx, map[string][]string{"traceparent": {parent}})
		}, "0102030405060708090a0b0c0d0e0f10"},
		{"no traceparent", context.Background(), func(ctx context.Context) context.Context {
			return FromHeader(ctx, http.Header{})
		}, ""},
		{"malformed", context.Background(), func(ctx context.Context) context.Context {
			return FromHeader(ctx, http.Header{"Traceparent": {"00-zz-01"}})
		}, ""},
		{"a span already there wins", own, func(ctx context.Context) context.Context {
			return FromHeader(ctx, http.Header{"Traceparent": {parent}})
		}, trace.TraceID{9}.String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := trace.SpanContextFromContext(tc.get(tc.ctx))
			got := ""
			if sc.IsValid() {
				got = sc.TraceID().String()
			}
			if got != tc.want {
				t.Errorf("trace id %q, want %q", got, tc.want)
			}
			h := http.Header{}
			Inject(tc.get(tc.ctx), h)
			if tc.want == "" && h.Get("Traceparent") != "" {
				t.Errorf("injected %q from no span context", h.Get("Traceparent"))
			}
			if tc.want != "" && len(h.Get("Traceparent")) != len(parent) {
				t.Errorf("injected %q, want a traceparent", h.Get("Traceparent"))
			}
		})
	}
}

func TestObserveExemplar(t *testing.T) {
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	for _, tc := range []struct {
		name string
		sc   trace.SpanContext
		want bool
	}{{"sampled", sampled, true}, {"not sampled", unsampled, false}, {"none", trace.SpanContext{}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{1}})
			Observe(h, tc.sc, 0.5)
			var m dto.Metric
			if err := h.Write(&m); err != nil {
				t.Fatal(err)
			}
			ex := m.GetHistogram().GetBucket()[0].GetExemplar()
			if got := ex != nil; got != tc.want {
				t.Fatalf("exemplar %v, want one: %v", ex, tc.want)
			}
			if ex != nil && ex.GetLabel()[0].GetValue() != tc.sc.TraceID().String() {
				t.Errorf("exemplar %v, want trace id %v", ex, tc.sc.TraceID())
			}
			if got := m.GetHistogram().GetSampleCount(); got != 1 {
				t.Errorf("%d observations, want 1", got)
			}
		})
	}
}

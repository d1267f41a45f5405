package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestTracing: with a TracerProvider the decision's span is a child of
// the span the request's context holds, else of its traceparent.
func TestTracing(t *testing.T) {
	own := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}, TraceFlags: trace.FlagsSampled})
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		header    string
		wantTrace trace.TraceID // zero: a trace of its own
	}{
		{"traceparent", context.Background(), "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01", trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		{"the context's span first", trace.ContextWithSpanContext(context.Background(), own), "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01", own.TraceID()},
		{"neither", context.Background(), "", trace.TraceID{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			l, err := httplimit.New(httplimit.Config{Store: memory.New(), TracerProvider: tp,
				Rules: []httplimit.Rule{{Name: "api", Limit: floodgate.PerSecond(5), Key: httplimit.Header("X-Key")}}})
			if err != nil {
				t.Fatal(err)
			}
			h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(tc.ctx)
			r.Header.Set("X-Key", "k")
			if tc.header != "" {
				r.Header.Set("Traceparent", tc.header)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			spans := exp.GetSpans()
			if len(spans) == 0 {
				t.Fatal("no span")
			}
			var got tracetest.SpanStub
			for _, s := range spans {
				if s.Name == "floodgate.decide" {
					got = s
				}
			}
			if tc.wantTrace.IsValid() && got.SpanContext.TraceID() != tc.wantTrace {
				t.Errorf("decision in trace %v, want %v", got.SpanContext.TraceID(), tc.wantTrace)
			}
			if !tc.wantTrace.IsValid() && got.Parent.IsValid() {
				t.Errorf("decision has parent %v, want none", got.Parent)
			}
		})
	}
}

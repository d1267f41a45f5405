package decide_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// discardExporter counts the spans it is given, in memory, and keeps none.
type discardExporter struct{ spans atomic.Int64 }

func (d *discardExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	d.spans.Add(int64(len(s)))
	return nil
}

func (*discardExporter) Shutdown(context.Context) error { return nil }

// BenchmarkDecisionTraced is BenchmarkDecision under each tracer: none
// (nil, the default), OpenTelemetry's no-op provider, the SDK sampling
// nothing, and the SDK sampling every decision (always_on) into a batch
// processor whose exporter discards the spans:
//
//	go test -run '^$' -bench '^BenchmarkDecisionTraced$' -count 10 ./decide
func BenchmarkDecisionTraced(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler // with the SDK; nil for provider alone
		tp      trace.TracerProvider
	}{
		{name: "tracer=nil"},
		{name: "tracer=noop", tp: noop.NewTracerProvider()},
		{name: "tracer=sdk-never", sampler: sdktrace.NeverSample()},
		{name: "tracer=sdk-always", sampler: sdktrace.AlwaysSample()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tp := tc.tp
			exp := &discardExporter{}
			if tc.sampler != nil {
				sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithBatcher(exp))
				b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
				tp = sdk
			}
			e, err := decide.New(memory.New(), decide.Options{Logger: slog.New(slog.DiscardHandler), TracerProvider: tp})
			if err != nil {
				b.Fatal(err)
			}
			benchDecisions(b, e)
		})
	}
}

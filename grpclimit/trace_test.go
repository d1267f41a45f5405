package grpclimit_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestTracing: with a TracerProvider a call's traceparent metadata is the
// decision span's parent.
func TestTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	l, err := grpclimit.New(grpclimit.Config{Store: memory.New(), TracerProvider: tp,
		Rules: []grpclimit.Rule{{Name: "per-tenant", Limit: floodgate.PerSecond(5), Key: grpclimit.Metadata("x-tenant")}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "a",
		"traceparent", "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"))
	if _, err := l.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s.S/M"}, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	for _, s := range exp.GetSpans() {
		if s.Name == "floodgate.decide" {
			if got, want := s.SpanContext.TraceID().String(), "0102030405060708090a0b0c0d0e0f10"; got != want {
				t.Errorf("decision in trace %s, want the metadata's %s", got, want)
			}
			return
		}
	}
	t.Fatal("no decision span")
}

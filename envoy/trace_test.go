package envoy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-rl/floodgate/memory"
)

// TestQuotaReportSpan: a traced service makes a span per usage report, in
// the trace of the stream's traceparent metadata.
func TestQuotaReportSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	addr, _ := quotaServer(t, memory.New(), Options{Logger: slog.New(slog.DiscardHandler), TracerProvider: tp})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01")
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"open": "x"}}, NumRequestsAllowed: 1}}}); err != nil {
		t.Fatal(err)
	}
	// The stream ends after the report was taken (and its span ended).
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
	}
	for _, s := range exp.GetSpans() {
		if s.Name == "floodgate.quota.report" {
			if got, want := s.SpanContext.TraceID().String(), "0102030405060708090a0b0c0d0e0f10"; got != want {
				t.Errorf("report span in trace %s, want the stream's %s", got, want)
			}
			return
		}
	}
	t.Fatalf("no report span among %d", len(exp.GetSpans()))
}

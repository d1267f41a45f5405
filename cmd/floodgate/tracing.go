package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate/internal/logthrottle"
)

// tracesExporterVar picks the span exporter (otlp, console, none), as
// every OpenTelemetry SDK reads it.
const tracesExporterVar = "OTEL_TRACES_EXPORTER"

// newTracing returns the tracer provider the OpenTelemetry environment
// variables describe, and its shutdown, which flushes the spans not yet
// exported. OTEL_TRACES_EXPORTER unset, empty or "none" is no tracing at
// all: a nil provider (autoexport's own default would be otlp, which
// would send to localhost:4318 unasked). Otherwise autoexport builds the
// exporter (OTEL_EXPORTER_OTLP_*), the SDK reads OTEL_TRACES_SAMPLER(_ARG)
// and OTEL_BSP_*, and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES; the service name defaults to floodgate.
func newTracing(ctx context.Context, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	switch v := strings.TrimSpace(getenv(tracesExporterVar)); v {
	case "", "none":
		return nil, none, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, none, fmt.Errorf("%s=%s: %w", tracesExporterVar, getenv(tracesExporterVar), err)
	}
	if autoexport.IsNoneSpanExporter(exp) { // "none" among others
		return nil, none, nil
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "floodgate")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, none, fmt.Errorf("OpenTelemetry resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// tracingShutdownGrace bounds the flush of the last spans at exit.
const tracingShutdownGrace = 5 * time.Second

// logOtelErrors sends the OpenTelemetry SDK's errors (an exporter that
// cannot reach its collector) to logger, once per interval, instead of
// the standard logger.
func logOtelErrors(logger *slog.Logger) {
	throttled := logthrottle.New(logger, 30*time.Second, time.Now)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		throttled.Warn(context.Background(), "OpenTelemetry: exporting spans failed", slog.String("error", err.Error()))
	}))
}

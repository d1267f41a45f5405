package decide_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// traced returns an engine over store whose spans go to the returned
// recorder, sampled always.
func traced(t *testing.T, store floodgate.Store) (*decide.Engine, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e, err := decide.New(store, decide.Options{Logger: slog.New(slog.DiscardHandler), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, exp
}

// attrsOf returns a span's attributes by key.
func attrsOf(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestDecisionSpan: one span per decision, naming the rules, costs, the
// verdict, the deciding rule and whether the store was asked; a child span
// per store call.
func TestDecisionSpan(t *testing.T) {
	one := floodgate.PerMinute(1)
	tests := []struct {
		name string
		// before runs on the engine and store before the traced decision.
		before  func(e *decide.Engine, d *downable)
		check   decide.Check
		limited bool
		result  string
		local   string   // ratelimit.local_reason, "" for none
		calls   []string // the child spans' names
		failed  bool     // the span's status is Error
	}{
		{name: "admitted", check: decide.Check{Rule: "api", Key: "k", Limit: one, Cost: 1},
			result: "admitted", calls: []string{"floodgate.store.allow"}},
		{name: "denied by the store", check: decide.Check{Rule: "api", Key: "k", Limit: one, NoCache: true},
			before: func(e *decide.Engine, _ *downable) {
				e.Decide(context.Background(), []decide.Check{{Rule: "api", Key: "k", Limit: one}})
			},
			limited: true, result: "denied", calls: []string{"floodgate.store.allow"}},
		{name: "denied from the cache", check: decide.Check{Rule: "api", Key: "k", Limit: one},
			before: func(e *decide.Engine, _ *downable) {
				for range 2 {
					e.Decide(context.Background(), []decide.Check{{Rule: "api", Key: "k", Limit: one}})
				}
			},
			limited: true, result: "denied", local: "cache"},
		{name: "local fallback", check: decide.Check{Rule: "api", Key: "k", Limit: one, Failure: decide.FailLocal},
			before: func(_ *decide.Engine, d *downable) { d.down.Store(true) },
			result: "admitted", local: "fallback", calls: []string{"floodgate.store.allow"}},
		{name: "fail closed", check: decide.Check{Rule: "api", Key: "k", Limit: one, Failure: decide.FailClosed},
			before: func(_ *decide.Engine, d *downable) { d.down.Store(true) },
			result: "unavailable", local: "failure_mode", calls: []string{"floodgate.store.allow"}, failed: true},
		{name: "lease", check: decide.Check{Rule: "api", Key: "k", Limit: floodgate.NewLimit(floodgate.FixedWindow, 100_000, time.Hour), Lease: &decide.LeaseOptions{}},
			result: "admitted", local: "lease", calls: []string{"floodgate.store.lease"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &downable{Store: remote{memory.New()}}
			e, exp := traced(t, d)
			if tc.before != nil {
				tc.before(e, d)
			}
			exp.Reset()
			parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled, Remote: true})
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
			res := e.Decide(ctx, []decide.Check{tc.check})
			var decision tracetest.SpanStub
			var calls []string
			for _, s := range exp.GetSpans() {
				switch {
				case s.Name == "floodgate.decide":
					decision = s
				case s.Parent.SpanID() == res.SpanContext.SpanID():
					calls = append(calls, s.Name)
				}
			}
			if got, want := decision.SpanContext.TraceID(), parent.TraceID(); got != want {
				t.Fatalf("decision span in trace %v, want the caller's %v (spans: %d)", got, want, len(exp.GetSpans()))
			}
			if got := res.SpanContext; !got.Equal(decision.SpanContext) {
				t.Errorf("Result.SpanContext %v, want the decision span's %v", got, decision.SpanContext)
			}
			a := attrsOf(decision)
			if got := a["ratelimit.limit_name"].AsStringSlice(); len(got) != 1 || got[0] != "api" {
				t.Errorf("ratelimit.limit_name = %v, want [api]", got)
			}
			if got := a["ratelimit.hits_addend"].AsInt64Slice(); len(got) != 1 || got[0] != 1 {
				t.Errorf("ratelimit.hits_addend = %v, want [1]", got)
			}
			if got := a["ratelimit.limited"].AsBool(); got != tc.limited {
				t.Errorf("ratelimit.limited = %v, want %v", got, tc.limited)
			}
			if got := a["ratelimit.result"].AsString(); got != tc.result {
				t.Errorf("ratelimit.result = %q, want %q", got, tc.result)
			}
			if got := a["ratelimit.deciding_rule"].AsString(); got != "api" {
				t.Errorf("ratelimit.deciding_rule = %q, want api", got)
			}
			if got, want := a["ratelimit.decided_locally"].AsBool(), tc.local != ""; got != want {
				t.Errorf("ratelimit.decided_locally = %v, want %v", got, want)
			}
			if got := a["ratelimit.local_reason"].AsString(); got != tc.local {
				t.Errorf("ratelimit.local_reason = %q, want %q", got, tc.local)
			}
			if got, want := decision.Status.Code == codes.Error, tc.failed; got != want {
				t.Errorf("span status %v, want error %v", decision.Status, want)
			}
			if len(calls) != len(tc.calls) || len(calls) > 0 && calls[0] != tc.calls[0] {
				t.Errorf("store call spans %v, want %v", calls, tc.calls)
			}
		})
	}
}

// TestNoTracer: without a tracer (or with the no-op one) a Result holds no
// span context.
func TestNoTracer(t *testing.T) {
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider()} {
		e, err := decide.New(memory.New(), decide.Options{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		res := e.Decide(context.Background(), []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerSecond(1)}})
		if res.SpanContext.IsValid() {
			t.Errorf("provider %T: span context %v, want none", tp, res.SpanContext)
		}
	}
}

// TestStoreCallSpanError: a failing store call's span records its error.
func TestStoreCallSpanError(t *testing.T) {
	boom := errors.New("boom")
	f := &faulty{Store: remote{memory.New()}, fail: map[string]error{"k": boom}}
	e, exp := traced(t, f)
	e.Decide(context.Background(), []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerSecond(1)}})
	for _, s := range exp.GetSpans() {
		if s.Name == "floodgate.store.allow" {
			if s.Status.Code != codes.Error || len(s.Events) == 0 {
				t.Errorf("store span status %v, events %d: want the error recorded", s.Status, len(s.Events))
			}
			if got := s.SpanKind; got != trace.SpanKindClient {
				t.Errorf("store span kind %v, want client", got)
			}
			return
		}
	}
	t.Fatal("no store call span")
}

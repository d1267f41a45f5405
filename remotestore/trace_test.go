package remotestore_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/server"
)

// TestTraceparent: a call whose context holds a span context sends it as
// a W3C traceparent; one without sends none.
func TestTraceparent(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Traceparent")
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	s, err := remotestore.New(remotestore.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab}, SpanID: trace.SpanID{0xcd}, TraceFlags: trace.FlagsSampled})
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"traced", trace.ContextWithSpanContext(context.Background(), sc), "00-ab000000000000000000000000000000-cd00000000000000-01"},
		{"not traced", context.Background(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _ = s.AllowN(tc.ctx, "k", floodgate.PerSecond(1), 1)
			if h := <-got; h != tc.want {
				t.Errorf("traceparent %q, want %q", h, tc.want)
			}
		})
	}
}

// TestTraceThroughStoreAPI: a program deciding through a remote store and
// the server answering its store call share one trace: the server's
// store-API span is the child of the client's store-call span, itself the
// child of the client's decision.
func TestTraceThroughStoreAPI(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	srv, err := server.New(memory.New(), server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	s, err := remotestore.New(remotestore.Config{URL: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	res := e.Decide(context.Background(), []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerSecond(5)}})
	if !res.Allowed() {
		t.Fatalf("not admitted: %v", res.Err())
	}
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range exp.GetSpans() {
		byName[sp.Name] = sp
	}
	decision, call, api := byName["floodgate.decide"], byName["floodgate.store.allow"], byName["floodgate.store_api.allow"]
	for _, c := range []struct {
		name          string
		child, parent tracetest.SpanStub
	}{{"store call", call, decision}, {"store API", api, call}} {
		if c.child.SpanContext.TraceID() != decision.SpanContext.TraceID() || c.child.Parent.SpanID() != c.parent.SpanContext.SpanID() {
			t.Errorf("%s span %v (parent %v), want a child of %v: spans %v", c.name, c.child.SpanContext, c.child.Parent, c.parent.SpanContext, byName)
		}
	}
}

package remotestore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/remotestore"
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

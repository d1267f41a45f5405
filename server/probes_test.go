package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// TestProbes holds Options.Probes to what /healthz and /readyz are: open
// with authentication on, answered while the in-flight bound is reached,
// and on every handler; while Options.Routes need a token and are shed.
func TestProbes(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	answer := func(body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })
	}
	p := server.Policy{Rules: []server.Rule{{Name: "api", Limit: floodgate.PerMinute(5), Failure: decide.FailOpen}}}
	srv, err := server.New(blockingStore{Store: memory.New(), block: block, entered: entered}, p, server.Options{
		MaxInFlight: 1,
		Tokens:      tokensOf(t, "ingress decide "+decideToken),
		Routes:      map[string]http.Handler{"GET /route": answer("route")},
		Probes:      map[string]http.Handler{"GET /probe": answer("probe")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	done := occupySlot(t, ts.URL, decideToken)
	select {
	case <-entered: // the one slot is taken
	case <-time.After(10 * time.Second):
		t.Fatal("the first decision never reached the store")
	}
	cases := []struct {
		name    string
		handler http.Handler
		path    string
		token   string
		status  int
		body    string
	}{
		{"probe without a token", srv.Handler(), "/probe", "", 200, "probe"},
		{"probe on APIHandler", srv.APIHandler(), "/probe", "", 200, "probe"},
		{"probe on OpsHandler", srv.OpsHandler(), "/probe", "", 200, "probe"},
		{"healthz, for comparison", srv.Handler(), "/healthz", "", 200, "ok\n"},
		{"route without a token", srv.Handler(), "/route", "", 401, ""},
		{"route with a token, over the in-flight bound", srv.Handler(), "/route", "Bearer " + decideToken, 503, ""},
		{"no route on OpsHandler", srv.OpsHandler(), "/route", "", 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", c.path, nil)
			if c.token != "" {
				req.Header.Set("Authorization", c.token)
			}
			rec := httptest.NewRecorder()
			c.handler.ServeHTTP(rec, req)
			if rec.Code != c.status || (c.body != "" && rec.Body.String() != c.body) {
				t.Fatalf("%d %q, want %d %q", rec.Code, rec.Body, c.status, c.body)
			}
		})
	}
	close(block)
	if got := <-done; got != 200 {
		t.Fatalf("the first decision: %d", got)
	}
}

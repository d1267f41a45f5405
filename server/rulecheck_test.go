package server_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/storekey"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// TestRuleCheck: Rule.Check carries every field of the rule the engine
// reads, keyed as storekey.Of in the empty namespace, and it is the
// check the server decides with: what the server counted is at that key.
func TestRuleCheck(t *testing.T) {
	long := strings.Repeat("x", storekey.MaxLen+1)
	for _, r := range []server.Rule{
		{Name: "api", Limit: floodgate.PerMinute(3)},
		{Name: "rls", Limit: floodgate.PerHour(2), Failure: decide.FailOpen},
		{Name: "local", Limit: floodgate.PerSecond(10), Failure: decide.FailLocal, LocalShare: 0.25, NoCache: true},
		{Name: "watch", Limit: floodgate.PerMinute(1), Shadow: true, Failure: decide.FailClosed},
	} {
		for _, key := range []string{"k", "a|b", long} {
			got := r.Check(key, 2)
			want := decide.Check{Rule: r.Name, Key: storekey.Of("", r.Name, key), Limit: r.Limit, Cost: 2,
				Failure: r.Failure, LocalShare: r.LocalShare, NoCache: r.NoCache, Shadow: r.Shadow}
			if got != want {
				t.Errorf("%s key %.8q: Check = %+v, want %+v", r.Name, key, got, want)
			}
		}
	}

	store := memory.New()
	rule := server.Rule{Name: "api", Limit: floodgate.PerMinute(5)}
	srv, err := server.New(store, server.Policy{Rules: []server.Rule{rule}}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader([]byte(`{"rule":"api","key":"user-1","cost":3}`)))
	req.Header.Set("Content-Type", "application/json")
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	c := rule.Check("user-1", 0)
	d, err := store.AllowN(context.Background(), c.Key, c.Limit, 0) // cost 0 reads without writing
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 2 {
		t.Errorf("remaining at Rule.Check's key = %d, want 2 (5 less the server's cost 3)", d.Remaining)
	}
}

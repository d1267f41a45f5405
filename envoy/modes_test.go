package envoy

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate"
	"github.com/prometheus/client_golang/prometheus"
)

// TestCallerGoneFailOpen: a fail-open rule that the store could not decide
// because the caller went away answers OK overall, as its status says,
// although the engine refuses to count it as admitted.
func TestCallerGoneFailOpen(t *testing.T) {
	mem, _ := memoryStore()
	svc := serviceOf(t, &failingStore{Store: mem}, `
domain: gone
failure_mode: open
descriptors:
  - key: down
    rate_limit: {unit: hour, requests_per_unit: 5}
`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err := svc.ShouldRateLimit(ctx, request("gone", desc("down=x")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("answer %v, want OK overall and for the descriptor", resp)
	}
}

// TestShadowBlockedKeepsRemaining: a shadow rule that blocks
// (requests_per_unit 0) beside two enforced rules changes nothing in what
// the enforced ones report: their limit_remaining is what the store holds.
func TestShadowBlockedKeepsRemaining(t *testing.T) {
	mem, _ := memoryStore()
	svc := serviceOf(t, mem, `
domain: sb
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: c
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
`)
	for round, want := range []uint32{9, 8} {
		resp, err := svc.ShouldRateLimit(context.Background(), request("sb", desc("a=x"), desc("b=x"), desc("c=x")))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st[0].GetLimitRemaining() != want || st[1].GetLimitRemaining() != want {
			t.Fatalf("round %d: %v, want OK with %d remaining for a and b", round, resp, want)
		}
	}
}

// serviceOf returns a service over store with the rule file doc.
func serviceOf(t *testing.T, store floodgate.Store, doc string) *Service {
	t.Helper()
	rules, err := Parse(Source{Name: "rules.yaml", Data: []byte(doc)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(store, rules, Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

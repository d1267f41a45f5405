package envoy

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const peerRules = `
domain: p
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files
    value: "f/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: route
    value: "/api/*"
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: det
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
`

func (e *env) raw(t *testing.T, r *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestQuotaMode: a quota-mode descriptor over its quota answers OK without a
// reset, does not make the request OVER_LIMIT, and is listed in the dynamic
// metadata's quotaModeViolations.
func TestQuotaMode(t *testing.T) {
	mem, _ := memoryStore()
	e := start(t, mem, true, Options{DynamicMetadata: true}, peerRules)
	r := request("p", desc("q=a"), desc("k=a"))
	e.raw(t, r)
	resp := e.raw(t, r)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.Statuses[0].GetCode() != rlsv3.RateLimitResponse_OK ||
		resp.Statuses[0].GetDurationUntilReset() != nil || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Fatalf("quota over: %v", resp)
	}
	if resp.Statuses[1].GetLimitRemaining() != 8 {
		t.Errorf("the other descriptor was not counted: %v", resp.Statuses[1])
	}
	md := resp.GetDynamicMetadata().GetFields()
	if v := md["quotaModeViolations"].GetListValue().GetValues(); len(v) != 1 || v[0].GetNumberValue() != 0 {
		t.Errorf("quotaModeViolations %v", md["quotaModeViolations"])
	}
	if !md["quotaModeEnabled"].GetBoolValue() || md["domain"].GetStringValue() != "p" ||
		md["descriptors"].GetListValue().GetValues()[1].GetStructValue().GetFields()["entries"].GetListValue().GetValues()[0].GetStringValue() != "k=a" {
		t.Errorf("metadata %v", md)
	}
}

// TestGlobalShadowMode: with SHADOW_MODE every status says what it found,
// the overall code is OK, and each such answer is counted in
// global_shadow_mode (not in the rule's shadow_mode).
func TestGlobalShadowMode(t *testing.T) {
	mem, _ := memoryStore()
	e := start(t, mem, true, Options{ShadowMode: true}, peerRules)
	r := request("p", desc("files=f/x"))
	for range 2 {
		if resp := e.raw(t, r); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("under the limit: %v", resp)
		}
	}
	resp := e.raw(t, r)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.Statuses[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over the limit in global shadow mode: %v", resp)
	}
	if got := e.counter(t, "ratelimit_service_global_shadow_mode"); got != 1 {
		t.Errorf("global_shadow_mode %v, want 1", got)
	}
	// As the reference: the rule's shadow_mode statistic counts for rules in
	// shadow_mode only; the global mode's answer is over_limit.
	if got := e.counter(t, "ratelimit_service_rate_limit_shadow_mode", "domain=p", "key1=files_f/*"); got != 0 {
		t.Errorf("shadow_mode %v, want 0", got)
	}
	if got := e.counter(t, "ratelimit_service_rate_limit_over_limit", "domain=p", "key1=files_f/*"); got != 1 {
		t.Errorf("over_limit %v, want 1", got)
	}
}

// TestShareThreshold: every value a share_threshold wildcard matches counts
// on one counter.
func TestShareThreshold(t *testing.T) {
	mem, _ := memoryStore()
	e := start(t, mem, true, Options{}, peerRules)
	e.call(t, "first", request("p", desc("files=f/a")), ok("[p.files_f/*] 2/HOUR", 1, time.Hour))
	e.call(t, "another value, same counter", request("p", desc("files=f/b")), ok("[p.files_f/*] 2/HOUR", 0, time.Hour))
	e.call(t, "over", request("p", desc("files=f/c")), over("[p.files_f/*] 2/HOUR", time.Hour))
}

// TestPeerHeaders: LIMIT_RESPONSE_HEADERS_ENABLED's three headers, for the
// descriptor closest to its limit, under the configured names.
func TestPeerHeaders(t *testing.T) {
	mem, clock := memoryStore()
	clock.Set(clock.Now().Add(90 * time.Second))
	e := start(t, mem, true, Options{PeerHeaders: &PeerHeaders{Remaining: "X-Left"}, Clock: clock}, peerRules)
	resp := e.raw(t, request("p", desc("k=h"), desc("files=f/h")))
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	want := map[string]string{"RateLimit-Limit": "2", "X-Left": "1", "RateLimit-Reset": fmt.Sprint(3600 - 90)}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// TestPeerMetrics: the peer's per-rule counters, with near_limit past the
// ratio, value_to_metric keys, and detailed keys capped.
func TestPeerMetrics(t *testing.T) {
	mem, _ := memoryStore()
	e := start(t, mem, true, Options{NearLimitRatio: 0.5}, peerRules)
	for range 12 {
		e.raw(t, request("p", desc("k=m")))
	}
	for name, want := range map[string]float64{"total_hits": 12, "within_limit": 10, "near_limit": 5, "over_limit": 2} {
		if got := e.counter(t, "ratelimit_service_rate_limit_"+name, "domain=p", "key1=k"); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
	e.raw(t, request("p", desc("route=/api/v1", "user=u")))
	if got := e.counter(t, "ratelimit_service_rate_limit_total_hits", "domain=p", "key1=route_/api/v1", "key2=user"); got != 1 {
		t.Errorf("value_to_metric key: %v, want 1", got)
	}
	for i := range maxDynamicKeys + 5 {
		e.raw(t, request("p", desc(fmt.Sprintf("det=v%d", i))))
	}
	// The value_to_metric key above holds one of the maxDynamicKeys.
	if got := e.counter(t, "ratelimit_service_rate_limit_total_hits", "domain=p", "key1=det"); got != 6 {
		t.Errorf("detailed keys past the cap counted under the rule's key: %v, want 6", got)
	}
	if got := e.counter(t, "ratelimit_service_config_load_success"); got != 1 {
		t.Errorf("config_load_success %v, want 1", got)
	}
	// The server's series under the peer's Prometheus names.
	calls := 12 + 1 + maxDynamicKeys + 5
	if got := e.counter(t, "ratelimit_service_total_requests", "grpc_method=ShouldRateLimit"); got != float64(calls) {
		t.Errorf("ratelimit_service_total_requests %v, want %d", got, calls)
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var timed uint64
	for _, mf := range mfs {
		if mf.GetName() == "ratelimit_service_response_time_seconds" {
			for _, m := range mf.GetMetric() {
				timed += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if timed != uint64(calls) {
		t.Errorf("ratelimit_service_response_time_seconds counted %d calls, want %d", timed, calls)
	}
}

package envoy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestOverrideBounds holds a descriptor's limit override, and the hits of
// any descriptor, to what the core allows for the domain's algorithm: an
// override it cannot hold, or more hits than a sliding-window log takes in
// one request, is refused as the request's error (INVALID_ARGUMENT,
// counted as a service error, 400 on POST /json), naming the request's
// field and value, and the store is never asked; hits above the quota
// can never fit and are OVER_LIMIT.
func TestOverrideBounds(t *testing.T) {
	store, _ := memoryStore()
	e := start(t, store, true, Options{}, `
domain: logd
algorithm: sliding_window_log
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 100000}
`, `
domain: fixed
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	override := func(domain string, rpu uint32, unit typev3.RateLimitUnit, hits uint64) *rlsv3.RateLimitRequest {
		d := desc("user=mallory")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		if hits > 0 {
			d = withHits(d, hits)
		}
		return request(domain, d)
	}
	invalid := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"over the log's largest quota", override("logd", 1<<20+1, typev3.RateLimitUnit_YEAR, 0),
			"descriptors[0].limit: requests_per_unit 1048577 must be at most 1048576 for sliding_window_log (one entry per request)"},
		{"the log's largest quota taken in one request", override("logd", 1<<20, typev3.RateLimitUnit_YEAR, 1<<20),
			"descriptors[0].hits_addend 1048576: floodgate: invalid cost: cost 1048576 is more than 65536, the most a sliding_window_log takes in one request"},
		{"a configured log rule's cost over what one request takes", func() *rlsv3.RateLimitRequest {
			r := request("logd", desc("big=b"))
			r.HitsAddend = 70000
			return r
		}(), "hits_addend 70000: floodgate: invalid cost: cost 70000 is more than 65536"},
		{"no unit", override("logd", 5, typev3.RateLimitUnit_UNKNOWN, 0),
			"descriptors[0].limit: unit UNKNOWN is not one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR"},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.client.ShouldRateLimit(context.Background(), c.req)
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), c.want) {
				t.Errorf("gRPC: %v, want INVALID_ARGUMENT %q", err, c.want)
			}
			body, err := protojson.Marshal(c.req)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.Post(e.json, "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || res.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(string(b), c.want) {
				t.Errorf("POST /json: %d %s %s, want 400 problem details with %q", res.StatusCode, res.Header.Get("Content-Type"), b, c.want)
			}
		})
	}
	if got := e.counter(t, "floodgate_envoy_requests_total", "code=invalid_argument"); got != 2*float64(len(invalid)) {
		t.Errorf("invalid_argument count %v, want %d", got, 2*len(invalid))
	}
	if got := e.counter(t, "ratelimit_service_should_rate_limit_error", "err_type=service_error"); got != 2*float64(len(invalid)) {
		t.Errorf("service_error count %v, want %d", got, 2*len(invalid))
	}
	if n := store.Len(); n != 0 {
		t.Errorf("the store holds %d keys after refused overrides, want 0", n)
	}

	// What the core allows is decided: the log's largest quota, and the
	// peer's whole range (requests_per_unit is a uint32) for a fixed window.
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{
		{"the log's largest quota", override("logd", 1<<20, typev3.RateLimitUnit_YEAR, 0), rlsv3.RateLimitResponse_OK},
		{"hits over the override's quota never fit", override("logd", 10, typev3.RateLimitUnit_YEAR, 11), rlsv3.RateLimitResponse_OVER_LIMIT},
		{"a fixed window takes any uint32", override("fixed", 1<<32-1, typev3.RateLimitUnit_YEAR, 1<<31), rlsv3.RateLimitResponse_OK},
	} {
		resp, err := e.client.ShouldRateLimit(context.Background(), c.req)
		if err != nil || resp.GetOverallCode() != c.want {
			t.Errorf("%s: %v %v, want %v", c.name, resp.GetOverallCode(), err, c.want)
		}
	}
}

// TestLogCostNeverDeniesInShadow: more hits than a sliding-window log takes
// in one request fail the call for an enforced rule, and never deny under
// shadow_mode, quota_mode or the global modes: the answer is OK, and the
// store is not asked.
func TestLogCostNeverDeniesInShadow(t *testing.T) {
	const rules = `
domain: logd
algorithm: sliding_window_log
descriptors:
  - key: enforced
    rate_limit: {unit: hour, requests_per_unit: 100000}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100000}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100000}
`
	for _, c := range []struct {
		name     string
		opts     Options
		key      string
		wantCode codes.Code
	}{
		{"enforced", Options{}, "enforced", codes.InvalidArgument},
		{"shadow_mode", Options{}, "shadow", codes.OK},
		{"quota_mode", Options{}, "quota", codes.OK},
		{"SHADOW_MODE", Options{ShadowMode: true}, "enforced", codes.OK},
		{"QUOTA_MODE", Options{QuotaMode: true}, "enforced", codes.OK},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, _ := memoryStore()
			e := start(t, store, true, c.opts, rules)
			r := request("logd", desc(c.key+"=k"))
			r.HitsAddend = 70000
			resp, err := e.client.ShouldRateLimit(context.Background(), r)
			if status.Code(err) != c.wantCode {
				t.Fatalf("%v, want %v", err, c.wantCode)
			}
			// Under SHADOW_MODE the status says what was found, and only the
			// overall code is OK, as the peer's.
			if err == nil && (resp.GetOverallCode() != rlsv3.RateLimitResponse_OK ||
				!c.opts.ShadowMode && resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK) {
				t.Errorf("%v, want OK", resp)
			}
			if n := store.Len(); n != 0 {
				t.Errorf("the store holds %d keys, want 0", n)
			}
		})
	}
}

// TestLocalOverride: a limit override in a domain whose failure_mode is
// local takes the domain's share while the store is down, and fails as
// error (UNAVAILABLE, for Envoy's failure_mode_deny) when the domain has no
// share of its own (a rule's own local_share is not the override's).
func TestLocalOverride(t *testing.T) {
	const shared = `
domain: shared
failure_mode: local
instances: 4
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100}
`
	const own = `
domain: own
failure_mode: local
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100, local_share: 0.5}
`
	mem, _ := memoryStore()
	e := start(t, &failingStore{Store: mem}, true, Options{}, shared, own)
	override := func(domain string) *rlsv3.RateLimitRequest {
		d := desc("k=down")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 8, Unit: typev3.RateLimitUnit_HOUR}
		return request(domain, d)
	}
	admitted := 0
	for range 10 {
		resp, err := e.client.ShouldRateLimit(context.Background(), override("shared"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("an override of 8/hour under a domain share of 1/4 admitted %d of 10 while down, want 2", admitted)
	}
	if _, err := e.client.ShouldRateLimit(context.Background(), override("own")); status.Code(err) != codes.Unavailable {
		t.Errorf("an override in a domain without a share, while down: %v, want UNAVAILABLE", err)
	}
}

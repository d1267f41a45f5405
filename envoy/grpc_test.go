package envoy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/storekey"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// failingStore wraps a store and fails every call for keys that contain
// "down", as a store that cannot reach its backend does.
type failingStore struct {
	floodgate.Store
	mu      sync.Mutex
	refunds []string
}

var errBackend = fmt.Errorf("%w: redis: i/o timeout", floodgate.ErrStoreUnavailable)

func (f *failingStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if strings.Contains(key, "down") {
		return floodgate.Decision{}, errBackend
	}
	return f.Store.AllowN(ctx, key, l, n)
}

func (f *failingStore) RefundN(ctx context.Context, key string, l floodgate.Limit, n int64) error {
	f.mu.Lock()
	f.refunds = append(f.refunds, key)
	f.mu.Unlock()
	return f.Store.RefundN(ctx, key, l, n)
}

const failureRules = `
domain: fail
algorithm: sliding_window_log
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 5, failure_mode: open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 5, failure_mode: closed}
  - key: error
    rate_limit: {unit: hour, requests_per_unit: 5, failure_mode: error}
  - key: default
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5, failure_mode: error}
  - key: ok
    rate_limit: {unit: hour, requests_per_unit: 5}
`

const localRules = `
domain: local
failure_mode: local
instances: 4
descriptors:
  - key: inherit
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: own
    rate_limit: {unit: hour, requests_per_unit: 8, local_share: 0.5}
  - key: mode
    rate_limit: {unit: hour, requests_per_unit: 8, failure_mode: local}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 8, failure_mode: open}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 8}
`

// TestLocalFailureMode: failure_mode local in a rule file limits each
// instance alone, at the rule's share of the limit or its domain's, while
// the store is unavailable, and the shared limit applies again once it
// answers.
func TestLocalFailureMode(t *testing.T) {
	for _, tc := range []struct {
		key      string
		admitted int // of 10 requests while the store is down
	}{
		{"inherit", 2}, // 8 / 4 instances, the domain's share
		{"own", 4},     // the rule's own local_share: 0.5
		{"mode", 2},    // its own failure_mode: local, the domain's share
		{"open", 10},   // failure_mode open admits everyone
		{"shadow", 10}, // shadow rules fail open
	} {
		t.Run(tc.key, func(t *testing.T) {
			mem, _ := memoryStore()
			e := start(t, &failingStore{Store: mem}, true, Options{ResponseHeaders: true, PeerHeaders: &PeerHeaders{}}, localRules)
			// admitted sends 10 requests for the value, and counts the OKs;
			// each answer says Floodgate-Fallback: local exactly when a
			// local rule's store is down.
			admitted := func(value string) (n int) {
				for range 10 {
					resp, err := e.client.ShouldRateLimit(context.Background(), request("local", desc(tc.key+"="+value)))
					if err != nil {
						t.Fatal(err)
					}
					if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						n++
					}
					fallback := false
					hdr := map[string]string{}
					for _, h := range resp.GetResponseHeadersToAdd() {
						fallback = fallback || h.GetKey() == "Floodgate-Fallback" && h.GetValue() == "local"
						hdr[h.GetKey()] = h.GetValue()
					}
					// Both header families name the limit the remaining counts against.
					if hdr["RateLimit-Limit"] != hdr["X-Ratelimit-Limit"] {
						t.Fatalf("%s: RateLimit-Limit %q beside X-RateLimit-Limit %q", value, hdr["RateLimit-Limit"], hdr["X-Ratelimit-Limit"])
					}
					if want := value == "down" && tc.key != "open" && tc.key != "shadow"; fallback != want {
						t.Fatalf("%s: Floodgate-Fallback: local %v, want %v: %v", value, fallback, want, resp.GetResponseHeadersToAdd())
					}
				}
				return n
			}
			if admitted := admitted("down"); admitted != tc.admitted {
				t.Errorf("admitted %d of 10 while the store was down, want %d", admitted, tc.admitted)
			}
			// A look (hits_addend 0) while down is answered too, never
			// failed: locally for local rules, with what the share has left.
			peek, err := e.client.ShouldRateLimit(context.Background(), request("local", withHits(desc(tc.key+"=down"), 0)))
			if err != nil || peek.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Errorf("a look while down: %v, %v; want OK", peek, err)
			}
			if tc.key != "open" && tc.key != "shadow" {
				if rem := peek.GetStatuses()[0].GetLimitRemaining(); rem != 0 {
					t.Errorf("a look at a spent local share: %d remaining, want 0", rem)
				}
				okN := e.counter(t, "floodgate_envoy_descriptors_total", "outcome=local_ok")
				overN := e.counter(t, "floodgate_envoy_descriptors_total", "outcome=local_over_limit")
				errs := e.counter(t, "floodgate_envoy_store_errors_total")
				if okN != float64(tc.admitted+1) || overN != float64(10-tc.admitted) || errs != 11 {
					t.Errorf("metrics: local_ok %v, local_over_limit %v, store errors %v; want %d (and the look), %d, 11", okN, overN, errs, tc.admitted+1, 10-tc.admitted)
				}
			}
			// Another value's store answers: the whole shared limit applies.
			if admitted, want := admitted("up"), map[bool]int{true: 10, false: 8}[tc.key == "shadow"]; admitted != want {
				t.Errorf("admitted %d of 10 by the store, want %d", admitted, want)
			}
		})
	}
}

// TestOptionsFailureMode: the service's default failure mode is one of
// error, open and closed; local, which needs a share of each limit, is
// refused there with the way to write it.
func TestOptionsFailureMode(t *testing.T) {
	mem, _ := memoryStore()
	for mode, want := range map[string]string{
		"local": "set failure_mode: local with local_share or instances in the rule files",
		"ajar":  `failure mode "ajar" is not error, open, closed or local`,
	} {
		_, err := New(mem, &Rules{}, Options{FailureMode: mode})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FailureMode %q: error %v, want it to say %q", mode, err, want)
		}
	}
}

func TestFailureModes(t *testing.T) {
	const h = time.Hour
	tests := []struct {
		name     string
		opts     Options
		req      *rlsv3.RateLimitRequest
		want     []ws       // statuses, when the call succeeds
		wantCode codes.Code // the gRPC error, when it fails
		refunded bool       // the ok descriptor was refunded
	}{
		{"open answers OK", Options{}, request("fail", desc("open=down"), desc("ok=a")),
			[]ws{{limit: "[fail.open] 5/HOUR"}, ok("[fail.ok] 5/HOUR", 4, h)}, codes.OK, false},
		{"closed answers OVER_LIMIT and refunds", Options{}, request("fail", desc("ok=a"), desc("closed=down")),
			[]ws{ok("[fail.ok] 5/HOUR", 5, h), {over: true, limit: "[fail.closed] 5/HOUR"}}, codes.OK, true},
		// Without a batch store the checks are asked in turn, and a
		// fail-closed outage ends the request: what follows is not asked.
		{"closed first: the rest is not asked", Options{}, request("fail", desc("closed=down"), desc("ok=a")),
			[]ws{{over: true, limit: "[fail.closed] 5/HOUR"}, {limit: "[fail.ok] 5/HOUR"}}, codes.OK, false},
		{"error fails the call and refunds", Options{}, request("fail", desc("ok=a"), desc("error=down")),
			nil, codes.Unavailable, true},
		{"default is error", Options{}, request("fail", desc("default=down")), nil, codes.Unavailable, false},
		{"default from options", Options{FailureMode: "closed"}, request("fail", desc("default=down")),
			[]ws{{over: true, limit: "[fail.default] 5/HOUR"}}, codes.OK, false},
		{"shadow fails open", Options{}, request("fail", desc("shadow=down")), []ws{{limit: "[fail.shadow] 5/HOUR"}}, codes.OK, false},
		{"no store call, no failure", Options{}, request("fail", desc("nothing=down")), []ws{noLimit}, codes.OK, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, _ := memoryStore()
			fs := &failingStore{Store: mem}
			e := start(t, fs, true, tt.opts, failureRules)
			resp, err := e.client.ShouldRateLimit(context.Background(), tt.req)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code %s (%v), want %s", got, err, tt.wantCode)
			}
			if err == nil {
				e.checkResponse(t, "answer", resp, tt.want)
			} else if !strings.Contains(status.Convert(err).Message(), "store unavailable") {
				t.Errorf("error message %q does not say the store is unavailable", status.Convert(err).Message())
			}
			fs.mu.Lock()
			refunds := strings.Join(fs.refunds, ",")
			fs.mu.Unlock()
			if wantRefunds := map[bool]string{true: "rls|fail|ok=a", false: ""}[tt.refunded]; refunds != wantRefunds {
				t.Errorf("refunds %q, want %q", refunds, wantRefunds)
			}
			if tt.refunded {
				// The ok descriptor's quota is whole: it took nothing.
				e.call(t, "ok after", request("fail", desc("ok=a")), ok("[fail.ok] 5/HOUR", 4, h))
			}
		})
	}
	t.Run("metrics and /json", func(t *testing.T) {
		mem, _ := memoryStore()
		e := start(t, &failingStore{Store: mem}, true, Options{}, failureRules)
		for range 3 {
			_, _ = e.client.ShouldRateLimit(context.Background(), request("fail", desc("open=down")))
		}
		code, body := postJSON(t, e.json, `{"domain":"fail","descriptors":[{"entries":[{"key":"error","value":"down"}]}]}`)
		// The body names the kind of failure and a request id; the
		// store's error text is the log's alone.
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"kind":"store_unavailable"`) || !strings.Contains(body, `"request_id":"`) ||
			strings.Contains(body, "store unavailable") {
			t.Errorf("/json under failure mode error: %d %s", code, body)
		}
		if got := e.counter(t, "floodgate_envoy_store_errors_total"); got != 4 {
			t.Errorf("store errors %v, want 4", got)
		}
		if got := e.counter(t, "floodgate_envoy_descriptors_total", "outcome=fail_open"); got != 3 {
			t.Errorf("fail_open %v, want 3", got)
		}
		if got := e.counter(t, "floodgate_envoy_requests_total", "code=unavailable"); got != 1 {
			t.Errorf("unavailable requests %v, want 1", got)
		}
	})
	// An outage gets the engine's retry delay on every path: /json's 503
	// and the gRPC answer's headers of a fail-closed rule.
	t.Run("/json Retry-After", func(t *testing.T) {
		mem, _ := memoryStore()
		e := start(t, &failingStore{Store: mem}, true, Options{ResponseHeaders: true}, failureRules)
		want := ratelimitheader.RetryAfter(decide.DefaultUnavailableRetryAfter)
		res, err := http.Post(e.json, "application/json",
			strings.NewReader(`{"domain":"fail","descriptors":[{"entries":[{"key":"error","value":"down"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("Retry-After"); res.StatusCode != http.StatusServiceUnavailable || got != want {
			t.Errorf("/json under failure mode error: %d, Retry-After %q, want 503 and %q", res.StatusCode, got, want)
		}
		resp, err := e.client.ShouldRateLimit(context.Background(), request("fail", desc("closed=down")))
		if err != nil {
			t.Fatal(err)
		}
		if got := headerLines(resp); got != "Retry-After: "+want {
			t.Errorf("gRPC under failure mode closed: headers %q, want Retry-After: %s", got, want)
		}
	})
}

// TestInternalError checks a store error that is not an outage (a failed
// script) fails the call with INTERNAL whatever the rule's failure mode,
// shadow rules aside, and gives back what the request took.
func TestInternalError(t *testing.T) {
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want codes.Code
	}{
		{"default", request("fail", desc("ok=a"), desc("default=broken")), codes.Internal},
		{"fail open", request("fail", desc("ok=a"), desc("open=broken")), codes.Internal},
		{"fail closed", request("fail", desc("ok=a"), desc("closed=broken")), codes.Internal},
		{"failure mode error", request("fail", desc("ok=a"), desc("error=broken")), codes.Internal},
		{"shadow", request("fail", desc("ok=a"), desc("shadow=broken")), codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, _ := memoryStore()
			e := start(t, brokenStore{mem}, true, Options{}, failureRules)
			for i := range 3 {
				_, err := e.client.ShouldRateLimit(context.Background(), tt.req)
				if got := status.Code(err); got != tt.want {
					t.Fatalf("request %d: %v, want %s", i, err, tt.want)
				}
			}
			remaining := uint32(5)
			if tt.want == codes.OK {
				remaining = 2
			}
			e.call(t, "ok after", request("fail", desc("ok=a")), ok("[fail.ok] 5/HOUR", remaining-1, time.Hour))
		})
	}
}

// brokenStore fails every call for keys that contain "broken" with a script
// error, which is not an outage.
type brokenStore struct{ floodgate.Store }

func (b brokenStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if strings.Contains(key, "broken") {
		return floodgate.Decision{}, fmt.Errorf("%w: ERR user_script:1: unexpected reply", redisstore.ErrScript)
	}
	return b.Store.AllowN(ctx, key, l, n)
}

func TestHealthAndReflection(t *testing.T) {
	mem, _ := memoryStore()
	e := start(t, mem, true, Options{}, semanticsRules)
	hc := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", "ratelimit", ServiceName} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %s, want SERVING", svc, resp.GetStatus())
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	got := strings.Join(names, " ")
	for _, want := range []string{ServiceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(got, want) {
			t.Errorf("reflection lists %q, want %s among them", got, want)
		}
	}
}

func TestResponseHeaders(t *testing.T) {
	const rules = `
domain: hdr
algorithm: sliding_window_log
descriptors:
  - key: a
    rate_limit: {name: per-a, unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {name: per-b, unit: hour, requests_per_unit: 2}
  - key: bucket
    rate_limit: {name: bucket, unit: minute, requests_per_unit: 6, algorithm: token_bucket, capacity: 12}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {name: banned, unit: minute, requests_per_unit: 0}
`
	mem, clock := memoryStore()
	e := start(t, mem, true, Options{ResponseHeaders: true, Clock: clock}, rules)
	// reset is X-RateLimit-Reset for a quota whole again in d.
	reset := func(d time.Duration) string { return strconv.FormatInt(clock.Now().Add(d).Unix(), 10) }
	tests := []struct {
		name    string
		advance time.Duration // moves the clock first
		req     *rlsv3.RateLimitRequest
		want    func() string
	}{
		{"most restrictive is the least remaining", 0,
			request("hdr", desc("a=x"), desc("b=x"), desc("shadow=x"), desc("free=x")),
			func() string {
				return `Ratelimit-Policy: "per-a";q=10;w=60, "per-b";q=2;w=3600` + "\n" +
					`Ratelimit: "per-b";r=1;t=3600` + "\n" +
					"X-Ratelimit-Limit: 2\nX-Ratelimit-Remaining: 1\nX-Ratelimit-Reset: " + reset(time.Hour)
			}},
		{"token bucket window is the time to refill", 0,
			request("hdr", desc("bucket=x")),
			func() string {
				return `Ratelimit-Policy: "bucket";q=12;w=120` + "\n" +
					`Ratelimit: "bucket";r=11;t=10` + "\n" +
					"X-Ratelimit-Limit: 12\nX-Ratelimit-Remaining: 11\nX-Ratelimit-Reset: " + reset(10*time.Second)
			}},
		{"shadow would deny: never in the headers", 0, request("hdr", desc("shadow=x"), desc("a=w")),
			func() string {
				return `Ratelimit-Policy: "per-a";q=10;w=60` + "\n" + `Ratelimit: "per-a";r=9;t=60` + "\n" +
					"X-Ratelimit-Limit: 10\nX-Ratelimit-Remaining: 9\nX-Ratelimit-Reset: " + reset(time.Minute)
			}},
		{"b spent", time.Second, request("hdr", desc("b=x")),
			func() string {
				return `Ratelimit-Policy: "per-b";q=2;w=3600` + "\n" + `Ratelimit: "per-b";r=0;t=3600` + "\n" +
					"X-Ratelimit-Limit: 2\nX-Ratelimit-Remaining: 0\nX-Ratelimit-Reset: " + reset(time.Hour)
			}},
		// b's first request left the window a second ago. Reset is when
		// b is whole again: an hour after its last admission.
		{"over limit adds Retry-After", 0, request("hdr", desc("a=y"), desc("b=x")),
			func() string {
				return `Ratelimit-Policy: "per-a";q=10;w=60, "per-b";q=2;w=3600` + "\n" + `Ratelimit: "per-b";r=0;t=3599` + "\n" +
					"X-Ratelimit-Limit: 2\nX-Ratelimit-Remaining: 0\nX-Ratelimit-Reset: " + reset(time.Hour) + "\nRetry-After: 3599"
			}},
		{"blocked: the policies only", 0, request("hdr", desc("a=z"), desc("banned=x")),
			func() string { return `Ratelimit-Policy: "per-a";q=10;w=60, "banned";q=0;w=60` }},
		{"no limited descriptor, no headers", 0, request("hdr", desc("free=x"), desc("shadow=x"), desc("nothing=x")),
			func() string { return "" }},
		{"shadow alone would deny, no headers", 0, request("hdr", desc("shadow=x")), func() string { return "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock.Advance(tt.advance)
			resp, err := e.client.ShouldRateLimit(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := headerLines(resp), tt.want(); got != want {
				t.Errorf("headers\n%s\nwant\n%s", got, want)
			}
		})
	}
	if got := e.counter(t, "floodgate_envoy_descriptors_total", "descriptor=hdr.shadow", "outcome=shadow_over_limit"); got != 2 {
		t.Errorf("shadow_over_limit %v, want 2: the shadow rule did not deny", got)
	}
	// Off by default.
	mem2, _ := memoryStore()
	plain := start(t, mem2, true, Options{}, rules)
	resp, err := plain.client.ShouldRateLimit(context.Background(), request("hdr", desc("a=x")))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("headers without ResponseHeaders: %v", resp.GetResponseHeadersToAdd())
	}
	// On for one domain from its file.
	mem3, _ := memoryStore()
	perDomain := start(t, mem3, true, Options{}, strings.Replace(rules, "domain: hdr\n", "domain: hdr\nresponse_headers: true\n", 1),
		"domain: other\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	for domain, want := range map[string]int{"hdr": 5, "other": 0} {
		resp, err := perDomain.client.ShouldRateLimit(context.Background(), request(domain, desc("a=x")))
		if err != nil {
			t.Fatal(err)
		}
		if got := len(resp.GetResponseHeadersToAdd()); got != want {
			t.Errorf("domain %s: %d headers, want %d", domain, got, want)
		}
	}
}

// headerLines shows an answer's response_headers_to_add, one "key: value"
// a line.
func headerLines(resp *rlsv3.RateLimitResponse) string {
	var out []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		out = append(out, h.GetKey()+": "+h.GetValue())
	}
	return strings.Join(out, "\n")
}

// TestSetRules checks rules swap while serving.
func TestSetRules(t *testing.T) {
	mem, _ := memoryStore()
	e := start(t, mem, true, Options{}, "domain: swap\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	e.call(t, "before", request("swap", desc("k=v")), ok("[swap.k] 1/HOUR", 0, time.Hour))
	next, err := Parse(Source{Name: "new.yaml", Data: []byte("domain: swap\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")})
	if err != nil {
		t.Fatal(err)
	}
	e.svc.SetRules(next)
	// The same fixed-window key under a larger quota: one already counted.
	e.call(t, "after", request("swap", desc("k=v")), ok("[swap.k] 3/HOUR", 1, time.Hour))
	e.svc.SetRules(nil)
	e.call(t, "no rules", request("swap", desc("k=v")), noLimit)
}

func TestStoreKey(t *testing.T) {
	tests := []struct {
		domain string
		pairs  []string
		want   string
	}{
		{"d", []string{"k=v"}, "rls|d|k=v"},
		{"d", []string{"a=1", "b=2"}, "rls|d|a=1|b=2"},
		{"d|x", []string{"k=v"}, `rls|d\|x|k=v`},
		{"d", []string{"k=v|b=2"}, `rls|d|k=v\|b\=2`},
		{"d", []string{`k=v\`}, `rls|d|k=v\\`},
		{"d", []string{"k"}, "rls|d|k="},
		{"d", []string{"k=a#b"}, "rls|d|k=a#b"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		got := storeKey(newKeySpace(tt.domain), desc(tt.pairs...), nil)
		if got != tt.want {
			t.Errorf("storeKey(%q, %v) = %q, want %q", tt.domain, tt.pairs, got, tt.want)
		}
		if seen[got] {
			t.Errorf("key %q produced twice", got)
		}
		seen[got] = true
	}
}

// TestStoreKeyUnchanged checks the keys are the ones earlier releases wrote,
// so counters survive an upgrade: "rls|", the domain, and each entry as
// "|key=value", with '\', '|' and '=' escaped. They differ only for a domain
// holding '=' or '#' and for entries longer than storekey.MaxLen, which are
// hashed.
func TestStoreKeyUnchanged(t *testing.T) {
	escape := func(b *strings.Builder, s string) {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c == '\\' || c == '|' || c == '=' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
	}
	before := func(domainName string, d *ratelimitv3.RateLimitDescriptor) string {
		var b strings.Builder
		b.WriteString("rls|")
		escape(&b, domainName)
		for _, e := range d.GetEntries() {
			b.WriteByte('|')
			escape(&b, e.GetKey())
			b.WriteByte('=')
			escape(&b, e.GetValue())
		}
		return b.String()
	}
	parts := []string{"", "a", "|", `\`, "=", "#", "a|b", `a\|b`, "a=b", "a#b", "x=y|z", strings.Repeat("v", 200)}
	domains := []string{"d", "a|b", `a\b`, "messaging", "api.example.com"}
	for _, dom := range domains {
		for _, k := range parts[1:] {
			for _, v := range parts {
				for _, d := range []*ratelimitv3.RateLimitDescriptor{
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}},
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}, {Key: v + "k", Value: k}}},
				} {
					want := before(dom, d)
					got := storeKey(newKeySpace(dom), d, nil)
					if entries := want[len(before(dom, nil))+1:]; len(entries) > storekey.MaxLen {
						// Hashed now, as storekey.Of hashes long keys.
						if hashed := storekey.Of(keyNamespace, dom, entries); got != hashed {
							t.Errorf("storeKey(%q, %v) = %q, want storekey.Of's %q", dom, d, got, hashed)
						}
						continue
					}
					if got != want {
						t.Errorf("storeKey(%q, %v) = %q, earlier %q", dom, d, got, want)
					}
				}
			}
		}
	}
}

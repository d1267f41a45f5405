package envoy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
)

// semanticsRules are the rules of the store-independent suite. They use
// sliding-window logs of an hour or a day (and a token bucket refilling one
// token an hour), so no window edge falls inside a test run whatever clock
// the store reads: the counts are exact on Redis as on the memory store.
const semanticsRules = `
domain: sem
algorithm: sliding_window_log
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 3}
  - key: tight
    rate_limit: {name: tight, unit: hour, requests_per_unit: 1}
  - key: roomy
    rate_limit: {name: roomy, unit: hour, requests_per_unit: 10}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {name: marketing, unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {name: per_number, unit: day, requests_per_unit: 4}
  - key: path
    value: /api/*
    rate_limit: {name: api, unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/admin/*
    rate_limit: {name: admin, unit: hour, requests_per_unit: 1}
  - key: path
    value: /api/health
    rate_limit: {unlimited: true}
  - key: remote_address
    rate_limit: {name: per_ip, unit: hour, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {name: banned, unit: hour, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {name: shadow, unit: hour, requests_per_unit: 1}
  - key: group_1
    value: one
    descriptors:
      - key: user
        rate_limit: {name: specific_limit, unit: hour, requests_per_unit: 2}
  - key: group_2
    value: two
    descriptors:
      - key: user
        rate_limit: {name: replacer, replaces: [{name: specific_limit}], unit: hour, requests_per_unit: 4}
  - key: bucket
    rate_limit: {name: bucket, unit: day, requests_per_unit: 24, algorithm: token_bucket, capacity: 3}
`

// newStoreFunc returns a fresh store for one subtest (with its own keys)
// and whether it runs on a test clock (exact durations).
type newStoreFunc func(t *testing.T) (floodgate.Store, bool)

// runSemantics drives a running service over a real listener with the
// generated client, for any store.
func runSemantics(t *testing.T, newStore newStoreFunc) {
	const h, d = time.Hour, 24 * time.Hour
	tests := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"counts down then over limit", func(t *testing.T, e *env) {
			for i, rem := range []uint32{2, 1, 0} {
				e.call(t, "alice #"+string(rune('1'+i)), request("sem", desc("user=alice")), ok("per_user 3/HOUR", rem, h))
			}
			e.call(t, "alice #4", request("sem", desc("user=alice")), over("per_user 3/HOUR", h))
			e.call(t, "alice #5", request("sem", desc("user=alice")), over("per_user 3/HOUR", h))
		}},
		{"each value counted apart", func(t *testing.T, e *env) {
			e.call(t, "alice", request("sem", desc("user=alice")), ok("per_user 3/HOUR", 2, h))
			e.call(t, "alice", request("sem", desc("user=alice")), ok("per_user 3/HOUR", 1, h))
			e.call(t, "bob", request("sem", desc("user=bob")), ok("per_user 3/HOUR", 2, h))
		}},
		{"nested and key-only rules, refund on over limit", func(t *testing.T, e *env) {
			both := func() *rlsv3.RateLimitRequest {
				return request("sem", desc("message_type=marketing", "to_number=1"), desc("to_number=1"))
			}
			e.call(t, "both #1", both(), ok("marketing 2/DAY", 1, d), ok("per_number 4/DAY", 3, d))
			e.call(t, "both #2", both(), ok("marketing 2/DAY", 0, d), ok("per_number 4/DAY", 2, d))
			// Over on marketing: per_number admitted, then refunded, and
			// reports what remains after the refund.
			e.call(t, "both #3", both(), over("marketing 2/DAY", d), ok("per_number 4/DAY", 2, d))
			e.call(t, "number alone", request("sem", desc("to_number=1")), ok("per_number 4/DAY", 1, d))
			e.call(t, "other number", request("sem", desc("message_type=marketing", "to_number=2")), ok("marketing 2/DAY", 1, d))
		}},
		{"depth must match", func(t *testing.T, e *env) {
			e.call(t, "extra entry", request("sem", desc("to_number=1", "extra=x")), noLimit)
			e.call(t, "placeholder level", request("sem", desc("message_type=marketing")), noLimit)
			e.call(t, "unknown first level", request("sem", desc("message_type=other", "to_number=1")), noLimit)
			e.call(t, "nested key at top", request("sem", desc("group_1=one")), noLimit)
		}},
		{"wildcard values", func(t *testing.T, e *env) {
			e.call(t, "/api/users", request("sem", desc("path=/api/users")), ok("api 2/HOUR", 1, h))
			e.call(t, "/api/orders apart", request("sem", desc("path=/api/orders")), ok("api 2/HOUR", 1, h))
			e.call(t, "/api/users again", request("sem", desc("path=/api/users")), ok("api 2/HOUR", 0, h))
			e.call(t, "/api/users over", request("sem", desc("path=/api/users")), over("api 2/HOUR", h))
			e.call(t, "longer prefix wins", request("sem", desc("path=/api/admin/x")), ok("admin 1/HOUR", 0, h))
			e.call(t, "longer prefix over", request("sem", desc("path=/api/admin/x")), over("admin 1/HOUR", h))
			e.call(t, "exact beats wildcard", request("sem", desc("path=/api/health")), ws{remaining: unlimitedRemaining})
			e.call(t, "no prefix match", request("sem", desc("path=/other")), noLimit)
		}},
		{"value beats key alone; requests_per_unit 0 blocks", func(t *testing.T, e *env) {
			for range 3 {
				e.call(t, "banned", request("sem", desc("remote_address=50.0.0.5")), over("banned 0/HOUR", anyReset))
			}
			e.call(t, "other address", request("sem", desc("remote_address=50.0.0.1")), ok("per_ip 3/HOUR", 2, h))
			// Blocked: the user's rule is not asked, so nothing is taken.
			e.call(t, "banned and a user", request("sem", desc("remote_address=50.0.0.5"), desc("user=carol")),
				over("banned 0/HOUR", anyReset), ws{limit: "per_user 3/HOUR"})
			e.call(t, "user untouched", request("sem", desc("user=carol")), ok("per_user 3/HOUR", 2, h))
		}},
		{"unlimited", func(t *testing.T, e *env) {
			for range 3 {
				e.call(t, "health", request("sem", desc("path=/api/health")), ws{remaining: unlimitedRemaining})
			}
		}},
		{"shadow mode reports but answers OK", func(t *testing.T, e *env) {
			e.call(t, "shadow #1", request("sem", desc("shadow=a")), ok("shadow 1/HOUR", 0, h))
			e.call(t, "shadow #2 would be over", request("sem", desc("shadow=a")), ok("shadow 1/HOUR", 0, h))
			// Overall OK: the other descriptor keeps what it admitted.
			e.call(t, "shadow with user", request("sem", desc("shadow=a"), desc("user=dave")),
				ok("shadow 1/HOUR", 0, h), ok("per_user 3/HOUR", 2, h))
			e.call(t, "user kept", request("sem", desc("user=dave")), ok("per_user 3/HOUR", 1, h))
			if got := e.counter(t, "floodgate_envoy_descriptors_total", "outcome=shadow_over_limit", "descriptor=sem.shadow"); got != 2 {
				t.Errorf("shadow_over_limit count %v, want 2", got)
			}
		}},
		{"replaces", func(t *testing.T, e *env) {
			e.call(t, "both", request("sem", desc("group_1=one", "user=u"), desc("group_2=two", "user=u")),
				noLimit, ok("replacer 4/HOUR", 3, h))
			e.call(t, "replaced one untouched", request("sem", desc("group_1=one", "user=u")), ok("specific_limit 2/HOUR", 1, h))
			e.call(t, "replacer alone", request("sem", desc("group_2=two", "user=u")), ok("replacer 4/HOUR", 2, h))
			if got := e.counter(t, "floodgate_envoy_descriptors_total", "outcome=replaced"); got != 1 {
				t.Errorf("replaced count %v, want 1", got)
			}
		}},
		{"hits_addend", func(t *testing.T, e *env) {
			r := request("sem", desc("user=erin"))
			r.HitsAddend = 2
			e.call(t, "request hits 2", r, ok("per_user 3/HOUR", 1, h))
			r = request("sem", withHits(desc("user=erin"), 1))
			r.HitsAddend = 5 // overridden by the descriptor's
			e.call(t, "descriptor hits 1 over request 5", r, ok("per_user 3/HOUR", 0, h))
			r = request("sem", withHits(desc("user=frank"), 0))
			e.call(t, "descriptor hits 0 checks only: a key never seen", r, ok("per_user 3/HOUR", 3, 0))
			e.call(t, "a request", request("sem", desc("user=frank")), ok("per_user 3/HOUR", 2, h))
			for range 3 {
				e.call(t, "descriptor hits 0 checks only", request("sem", withHits(desc("user=frank"), 0)), ok("per_user 3/HOUR", 2, h))
			}
			r = request("sem", desc("user=frank"))
			r.HitsAddend = 4
			e.call(t, "hits above the quota", r, over("per_user 3/HOUR", anyReset))
			r = request("sem", desc("user=frank"), withHits(desc("roomy=frank"), 2))
			r.HitsAddend = 2
			e.call(t, "mixed levels", r, ok("per_user 3/HOUR", 0, h), ok("roomy 10/HOUR", 8, h))
			e.call(t, "frank spent", request("sem", desc("user=frank")), over("per_user 3/HOUR", h))
		}},
		{"over limit on one descriptor consumes no other", func(t *testing.T, e *env) {
			two := func() *rlsv3.RateLimitRequest { return request("sem", desc("roomy=x"), desc("tight=x")) }
			e.call(t, "first", two(), ok("roomy 10/HOUR", 9, h), ok("tight 1/HOUR", 0, h))
			for range 3 {
				e.call(t, "denied", two(), ok("roomy 10/HOUR", 9, h), over("tight 1/HOUR", h))
			}
			e.call(t, "roomy alone", request("sem", desc("roomy=x")), ok("roomy 10/HOUR", 8, h))
		}},
		{"token bucket", func(t *testing.T, e *env) {
			for i, rem := range []uint32{2, 1, 0} {
				e.call(t, "take "+string(rune('1'+i)), request("sem", desc("bucket=x")), ok("bucket 24/DAY", rem, time.Duration(i+1)*h))
			}
			e.call(t, "empty", request("sem", desc("bucket=x")), over("bucket 24/DAY", h))
		}},
		{"unknown domain or descriptor answers OK", func(t *testing.T, e *env) {
			e.call(t, "unknown domain", request("nope", desc("user=alice"), desc("x=y")), noLimit, noLimit)
			e.call(t, "unknown descriptor", request("sem", desc("nothing=here")), noLimit)
			if got := e.counter(t, "floodgate_envoy_descriptors_total", "domain="+unknownLabel, "outcome=no_rule"); got != 2 {
				t.Errorf("unknown-domain no_rule count %v, want 2", got)
			}
		}},
		{"bad requests are INVALID_ARGUMENT", func(t *testing.T, e *env) {
			bad := map[string]*rlsv3.RateLimitRequest{
				"empty domain":   request("", desc("user=alice")),
				"no descriptors": request("sem"),
				"no entries":     request("sem", desc("user=alice"), &ratelimitv3.RateLimitDescriptor{}),
				"empty key":      request("sem", desc("=alice")),
			}
			for what, req := range bad {
				_, err := e.client.ShouldRateLimit(context.Background(), req)
				if status.Code(err) != codes.InvalidArgument {
					t.Errorf("%s: %v, want InvalidArgument", what, err)
				}
			}
			if got := e.counter(t, "floodgate_envoy_requests_total", "code=invalid_argument"); got != 4 {
				t.Errorf("invalid_argument count %v, want 4", got)
			}
		}},
		{"descriptor limit override", func(t *testing.T, e *env) {
			o := desc("user=gina")
			o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
			e.call(t, "override #1", request("sem", o), ok("[sem.user_gina] 1/HOUR", 0, h))
			e.call(t, "override #2", request("sem", o), over("[sem.user_gina] 1/HOUR", h))
			bad := desc("user=gina")
			bad.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
			if _, err := e.client.ShouldRateLimit(context.Background(), request("sem", bad)); status.Code(err) != codes.InvalidArgument {
				t.Errorf("override without unit: %v, want InvalidArgument", err)
			}
		}},
		{"is_negative_hits gives quota back", func(t *testing.T, e *env) {
			for _, rem := range []uint32{2, 1, 0} {
				e.call(t, "spend", request("sem", desc("user=hal")), ok("per_user 3/HOUR", rem, h))
			}
			back := withHits(desc("user=hal"), 2)
			back.IsNegativeHits = true
			e.call(t, "give 2 back", request("sem", back), ok("per_user 3/HOUR", 0, 0))
			e.call(t, "after", request("sem", desc("user=hal")), ok("per_user 3/HOUR", 1, h))
			blocked := desc("remote_address=50.0.0.5")
			blocked.IsNegativeHits = true
			e.call(t, "giving back to a blocked rule is OK", request("sem", blocked), ok("banned 0/HOUR", 0, 0))
		}},
		{"POST /json answers the same decisions", func(t *testing.T, e *env) {
			body := `{"domain":"sem","descriptors":[{"entries":[{"key":"tight","value":"json"}]}]}`
			code, resp := postJSON(t, e.json, body)
			if code != http.StatusOK {
				t.Fatalf("first: %d %s", code, resp)
			}
			var got struct {
				OverallCode string `json:"overallCode"`
				Statuses    []struct {
					Code           string `json:"code"`
					LimitRemaining uint32 `json:"limitRemaining"`
					CurrentLimit   struct {
						Name            string `json:"name"`
						RequestsPerUnit uint32 `json:"requestsPerUnit"`
						Unit            string `json:"unit"`
					} `json:"currentLimit"`
					DurationUntilReset string `json:"durationUntilReset"`
				} `json:"statuses"`
			}
			if err := json.Unmarshal([]byte(resp), &got); err != nil {
				t.Fatal(err)
			}
			if got.OverallCode != "OK" || len(got.Statuses) != 1 || got.Statuses[0].CurrentLimit.Name != "tight" ||
				got.Statuses[0].CurrentLimit.RequestsPerUnit != 1 || got.Statuses[0].CurrentLimit.Unit != "HOUR" ||
				got.Statuses[0].LimitRemaining != 0 || got.Statuses[0].DurationUntilReset == "" {
				t.Errorf("first answer %s", resp)
			}
			if e.exact && got.Statuses[0].DurationUntilReset != "3600s" {
				t.Errorf("durationUntilReset %q, want 3600s", got.Statuses[0].DurationUntilReset)
			}
			// The same key over gRPC: the JSON request counted.
			e.call(t, "grpc after json", request("sem", desc("tight=json")), over("tight 1/HOUR", h))
			code, resp = postJSON(t, e.json, body)
			if code != http.StatusTooManyRequests || !strings.Contains(resp, `"overallCode":"OVER_LIMIT"`) {
				t.Errorf("over limit: %d %s", code, resp)
			}
			for _, bad := range []string{`{"domain":""}`, `{"domain":"sem"}`, `not json`, `{"domain":"sem","nope":1}`} {
				if code, resp := postJSON(t, e.json, bad); code != http.StatusBadRequest || !strings.Contains(resp, `"status":400`) {
					t.Errorf("%s: %d %s, want a 400 problem", bad, code, resp)
				}
			}
			res, err := http.Get(e.json)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "POST" {
				t.Errorf("GET /json: %d Allow %q", res.StatusCode, res.Header.Get("Allow"))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, exact := newStore(t)
			e := start(t, store, exact, Options{}, semanticsRules)
			tt.run(t, e)
		})
	}
}

func postJSON(t testing.TB, url, body string) (int, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestSemanticsMemory(t *testing.T) {
	runSemantics(t, func(t *testing.T) (floodgate.Store, bool) {
		s, _ := memoryStore()
		return s, true
	})
}

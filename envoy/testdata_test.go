package envoy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
)

// clockedStoreFunc returns a fresh store for one subtest that decides at
// clock's time.
type clockedStoreFunc func(t *testing.T, clock floodgate.Clock) floodgate.Store

func TestTestdataBehavesMemory(t *testing.T) {
	runTestdata(t, func(_ *testing.T, clock floodgate.Clock) floodgate.Store { return memory.New(memory.WithClock(clock)) })
}

// runTestdata loads testdata/rules (one file per feature the reference's
// README documents, plus floodgate's additions) and checks each file does
// what its comment says, through a running server on a store deciding at a
// manual clock's time: fixed windows (the default algorithm) then start at
// the test's first request and durations are exact.
func runTestdata(t *testing.T, newStore clockedStoreFunc) {
	rules, err := LoadDir("testdata/rules")
	if err != nil {
		t.Fatal(err)
	}
	const s, m, h, d = time.Second, time.Minute, time.Hour, 24 * time.Hour
	tests := []struct {
		file string
		run  func(t *testing.T, e *env, advance func(time.Duration), now func() time.Time)
	}{
		{"01-values.yaml", func(t *testing.T, e *env, advance func(time.Duration), _ func() time.Time) {
			for rem := uint32(4); ; rem-- {
				e.call(t, "users", request("mongo_cps", desc("database=users")), ok("[mongo_cps.database_users] 5/SECOND", rem, s))
				if rem == 0 {
					break
				}
			}
			e.call(t, "users over", request("mongo_cps", desc("database=users")), over("[mongo_cps.database_users] 5/SECOND", s))
			e.call(t, "default apart", request("mongo_cps", desc("database=default")), ok("[mongo_cps.database_default] 3/SECOND", 2, s))
			e.call(t, "no such database", request("mongo_cps", desc("database=orders")), noLimit)
			advance(s)
			e.call(t, "next second", request("mongo_cps", desc("database=users")), ok("[mongo_cps.database_users] 5/SECOND", 4, s))
		}},
		{"02-nested.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			const mk, num = "[messaging.message_type_marketing.to_number] 2/DAY", "[messaging.to_number] 4/DAY"
			both := func(n string) *rlsv3.RateLimitRequest {
				return request("messaging", desc("message_type=marketing", "to_number="+n), desc("to_number="+n))
			}
			e.call(t, "marketing #1", both("2061111111"), ok(mk, 1, d), ok(num, 3, d))
			e.call(t, "marketing #2", both("2061111111"), ok(mk, 0, d), ok(num, 2, d))
			e.call(t, "marketing #3 over", both("2061111111"), over(mk, d), ok(num, 2, d))
			e.call(t, "other number", both("2062222222"), ok(mk, 1, d), ok(num, 3, d))
			e.call(t, "plain message", request("messaging", desc("to_number=2061111111")), ok(num, 1, d))
			e.call(t, "plain message", request("messaging", desc("to_number=2061111111")), ok(num, 0, d))
			e.call(t, "plain over", request("messaging", desc("to_number=2061111111")), over(num, d))
		}},
		{"03-most-specific.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			const ip = "[edge_proxy_per_ip.remote_address] 3/SECOND"
			e.call(t, "any address", request("edge_proxy_per_ip", desc("remote_address=50.0.0.1")), ok(ip, 2, s))
			e.call(t, "another address", request("edge_proxy_per_ip", desc("remote_address=50.0.0.2")), ok(ip, 2, s))
			for range 2 {
				e.call(t, "blocked address", request("edge_proxy_per_ip", desc("remote_address=50.0.0.5")),
					over("[edge_proxy_per_ip.remote_address_50.0.0.5] 0/SECOND", s))
			}
		}},
		{"04-depth.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			e.call(t, "level one", request("depth", desc("key=value")), ok("[depth.key_value] 3/MINUTE", 2, m))
			e.call(t, "level two", request("depth", desc("key=value", "subkey=subvalue")), ok("[depth.key_value.subkey] 2/MINUTE", 1, m))
			e.call(t, "level two, other key", request("depth", desc("key=value", "other=x")), noLimit)
			e.call(t, "level two, other value", request("depth", desc("key=other", "subkey=subvalue")), noLimit)
			e.call(t, "three levels", request("depth", desc("key=value", "subkey=a", "third=b")), noLimit)
		}},
		{"05-unlimited.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			for range 3 {
				e.call(t, "ldap", request("internal", desc("ldap=x")), ws{remaining: unlimitedRemaining})
			}
			e.call(t, "azure", request("internal", desc("azure=x")), ok("[internal.azure] 2/MINUTE", 1, m))
			if got := e.counter(t, "floodgate_envoy_descriptors_total", "descriptor=internal.ldap", "outcome=unlimited"); got != 3 {
				t.Errorf("unlimited count %v, want 3", got)
			}
		}},
		{"06-shadow.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			const a, b = "[shadow.service.user_user-a] 2/SECOND", "[shadow.service.user_user-b] 3/SECOND"
			e.call(t, "a #1", request("shadow", desc("service=auth", "user=user-a")), ok(a, 1, s))
			e.call(t, "a #2", request("shadow", desc("service=auth", "user=user-a")), ok(a, 0, s))
			for range 3 {
				e.call(t, "a would be over", request("shadow", desc("service=auth", "user=user-a")), ok(a, 0, s))
			}
			for rem := uint32(2); ; rem-- {
				e.call(t, "b", request("shadow", desc("service=auth", "user=user-b")), ok(b, rem, s))
				if rem == 0 {
					break
				}
			}
			e.call(t, "b over", request("shadow", desc("service=auth", "user=user-b")), over(b, s))
			if got := e.counter(t, "floodgate_envoy_descriptors_total", "outcome=shadow_over_limit"); got != 3 {
				t.Errorf("shadow_over_limit count %v, want 3", got)
			}
		}},
		{"07-replaces.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			const specific, replacer = "specific_limit 2/SECOND", "[replaces.group_2_two.user_alice] 4/SECOND"
			both := request("replaces", desc("group_1=one", "user=alice"), desc("group_2=two", "user=alice"))
			for _, rem := range []uint32{3, 2, 1, 0} {
				e.call(t, "both", both, noLimit, ok(replacer, rem, s))
			}
			e.call(t, "both over", both, noLimit, over(replacer, s))
			e.call(t, "group 1 alone, untouched", request("replaces", desc("group_1=one", "user=alice")), ok(specific, 1, s))
		}},
		{"08-detailed-metric.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			e.call(t, "unspecified", request("detailed", desc("key1=unspecified_value")), ok("[detailed.key1] 2/MINUTE", 1, m))
			e.call(t, "unspecified 2", request("detailed", desc("key1=unspecified_value2")), ok("[detailed.key1] 2/MINUTE", 1, m))
			e.call(t, "value1", request("detailed", desc("key1=value1")), ok("[detailed.key1_value1] 3/MINUTE", 2, m))
			for _, label := range []string{"detailed.key1_unspecified_value", "detailed.key1_unspecified_value2", "detailed.key1_value1"} {
				if got := e.counter(t, "floodgate_envoy_descriptors_total", "descriptor="+label, "outcome=ok"); got != 1 {
					t.Errorf("metric %s: %v, want 1", label, got)
				}
			}
			if got := e.counter(t, "floodgate_envoy_descriptors_total", "descriptor=detailed.key1"); got != 0 {
				t.Errorf("rolled-up metric detailed.key1: %v, want 0", got)
			}
		}},
		{"09-wildcard.yaml", func(t *testing.T, e *env, _ func(time.Duration), _ func() time.Time) {
			const api, admin = "[wildcard.path_/api/*] 2/MINUTE", "[wildcard.path_/api/admin/*] 1/MINUTE"
			e.call(t, "/api/users", request("wildcard", desc("path=/api/users")), ok(api, 1, m))
			e.call(t, "/api/users", request("wildcard", desc("path=/api/users")), ok(api, 0, m))
			e.call(t, "/api/users over", request("wildcard", desc("path=/api/users")), over(api, m))
			e.call(t, "/api/orders counted apart", request("wildcard", desc("path=/api/orders")), ok(api, 1, m))
			e.call(t, "longest prefix", request("wildcard", desc("path=/api/admin/users")), ok(admin, 0, m))
			e.call(t, "exact value", request("wildcard", desc("path=/api/health")), ws{remaining: unlimitedRemaining})
		}},
		{"10-units.yaml", func(t *testing.T, e *env, _ func(time.Duration), now func() time.Time) {
			for _, u := range []struct {
				value, unit string
				d           time.Duration
			}{
				{"second", "SECOND", s}, {"minute", "MINUTE", m}, {"hour", "HOUR", h}, {"day", "DAY", d},
				{"week", "WEEK", 7 * d}, {"month", "MONTH", 30 * d}, {"year", "YEAR", 365 * d},
			} {
				// Fixed windows are aligned to multiples of the unit since
				// the Unix epoch, as in the reference.
				reset := u.d - time.Duration(now().UnixMicro()%u.d.Microseconds())*time.Microsecond
				limit := "[units.per_" + u.value + "] 1/" + u.unit
				e.call(t, u.value, request("units", desc("per="+u.value)), ok(limit, 0, reset))
				e.call(t, u.value+" over", request("units", desc("per="+u.value)), over(limit, reset))
			}
			e.call(t, "whitelisted", request("units", desc("whitelisted=anything")), noLimit)
		}},
		{"20-floodgate-algorithms.yaml", func(t *testing.T, e *env, advance func(time.Duration), now func() time.Time) {
			const log, counter, fixed = "[algorithms.log] 2/MINUTE", "[algorithms.counter] 2/MINUTE", "[algorithms.fixed] 2/MINUTE"
			// The counter is whole again once its current window no longer
			// weighs in the sliding one: two windows from its start.
			for _, r := range []struct {
				key, limit string
				reset      time.Duration
			}{{"log", log, m}, {"counter", counter, 2 * m}, {"fixed", fixed, m}} {
				e.call(t, r.key+" #1", request("algorithms", desc(r.key+"=x")), ok(r.limit, 1, r.reset))
			}
			advance(30 * s)
			e.call(t, "log #2", request("algorithms", desc("log=x")), ok(log, 0, m))
			e.call(t, "counter #2", request("algorithms", desc("counter=x")), ok(counter, 0, 90*s))
			e.call(t, "fixed #2", request("algorithms", desc("fixed=x")), ok(fixed, 0, 30*s))
			e.call(t, "log over", request("algorithms", desc("log=x")), over(log, 30*s))
			e.call(t, "fixed over", request("algorithms", desc("fixed=x")), over(fixed, 30*s))
			advance(30 * s)
			// The fixed window starts afresh; the log admits one (the first
			// request left the window), and no more.
			e.call(t, "fixed, new window", request("algorithms", desc("fixed=x")), ok(fixed, 1, m))
			e.call(t, "log, one slid out", request("algorithms", desc("log=x")), ok(log, 0, m))
			e.call(t, "log over again", request("algorithms", desc("log=x")), over(log, 30*s))
			// Token bucket: capacity 3, one token a second.
			for _, rem := range []uint32{2, 1, 0} {
				e.call(t, "bucket", request("algorithms", desc("bucket=x")), ok("bucket 60/MINUTE", rem, time.Duration(3-rem)*s))
			}
			e.call(t, "bucket empty", request("algorithms", desc("bucket=x")), over("bucket 60/MINUTE", s))
			advance(s)
			resp := e.call(t, "bucket refilled one", request("algorithms", desc("bucket=x")), ok("bucket 60/MINUTE", 0, 3*s))
			var got []string
			for _, hv := range resp.GetResponseHeadersToAdd() {
				got = append(got, hv.GetKey()+": "+hv.GetValue())
			}
			want := []string{`Ratelimit-Policy: "bucket";q=3;w=3`, `Ratelimit: "bucket";r=0;t=3`,
				"X-Ratelimit-Limit: 3", "X-Ratelimit-Remaining: 0", "X-Ratelimit-Reset: " + strconv.FormatInt(now().Add(3*s).Unix(), 10)}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("response_headers: true: headers\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			clock := newTestClock()
			e := startRules(t, newStore(t, clock), true, Options{Clock: clock}, rules)
			tt.run(t, e, clock.Advance, clock.Now)
		})
	}
}

package envoy_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/memory"
)

// A rule file in envoyproxy/ratelimit's format, with floodgate's algorithm
// field, served over the memory store. In a server, register the service on
// a gRPC server with envoy.NewGRPCServer (or Service.Register) instead of
// calling it directly.
func Example() {
	rules, err := envoy.Parse(envoy.Source{Name: "edge.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 2
      algorithm: sliding_window_log
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	svc, err := envoy.New(memory.New(), rules, envoy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.7"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetCurrentLimit().GetName(), st.GetCurrentLimit().GetRequestsPerUnit(),
			st.GetCurrentLimit().GetUnit(), "remaining", st.GetLimitRemaining())
	}
	// Output:
	// OK per_ip 2 MINUTE remaining 1
	// OK per_ip 2 MINUTE remaining 0
	// OVER_LIMIT per_ip 2 MINUTE remaining 0
}

// Matching follows the reference: the most specific configured descriptor
// at each level, and a rule only at the level of the request's last entry.
func ExampleRules_Match() {
	rules, err := envoy.Parse(envoy.Source{Name: "messaging.yaml", Data: []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: to_number
    value: "+1555*"
    rate_limit: {unit: day, requests_per_unit: 10}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, entries := range [][]envoy.Entry{
		{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "+12065550100"}},
		{{Key: "to_number", Value: "+12065550100"}},
		{{Key: "to_number", Value: "+15550100"}},
		{{Key: "message_type", Value: "marketing"}},
	} {
		if r := rules.Match("messaging", entries); r != nil {
			fmt.Println(r.Key, r.RequestsPerUnit, r.Unit)
		} else {
			fmt.Println("no rule")
		}
	}
	// Output:
	// messaging.message_type_marketing.to_number 5 DAY
	// messaging.to_number 100 DAY
	// messaging.to_number_+1555* 10 DAY
	// no rule
}

// The reference's statistics under its statsd names, with their totals: what
// floodgate serve --envoy-env pushes with USE_STATSD (as gains per flush).
func ExampleService_PeerStats() {
	rules, err := envoy.Parse(envoy.Source{Name: "db.yaml", Data: []byte(`
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 2}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A clock of the example's own, so that the three calls share a window.
	clock := clocktest.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	svc, err := envoy.New(memory.New(memory.WithClock(clock)), rules, envoy.Options{Clock: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "database", Value: "users"}},
	}}}
	for range 3 {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			fmt.Println(err)
			return
		}
	}
	var lines []string
	svc.PeerStats(func(name string, total uint64) {
		if total > 0 {
			lines = append(lines, fmt.Sprintf("%s %d", name, total))
		}
	})
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// ratelimit.service.config_load_success 1
	// ratelimit.service.rate_limit.mongo_cps.database_users.near_limit 1
	// ratelimit.service.rate_limit.mongo_cps.database_users.over_limit 1
	// ratelimit.service.rate_limit.mongo_cps.database_users.total_hits 3
	// ratelimit.service.rate_limit.mongo_cps.database_users.within_limit 2
	// ratelimit_server.ShouldRateLimit.total_requests 3
}

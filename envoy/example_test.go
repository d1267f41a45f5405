package envoy_test

import (
	"context"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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

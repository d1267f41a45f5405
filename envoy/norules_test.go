package envoy

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRequireRules: a service started without rules and with
// Options.RequireRules fails every call with Unknown and the reference's
// words until rules are set; without the option, no rules answer OK.
func TestRequireRules(t *testing.T) {
	rules, err := Parse(Source{Name: "r.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")})
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	tests := []struct {
		name     string
		require  bool
		start    *Rules
		set      []*Rules // SetRules calls before the request
		wantCode codes.Code
		limited  bool // OK with the rule's limit
	}{
		{"no rules, required", true, nil, nil, codes.Unknown, false},
		{"no rules, required, set to none again", true, nil, []*Rules{nil}, codes.Unknown, false},
		{"no rules, then rules", true, nil, []*Rules{rules}, codes.OK, true},
		{"no rules, then rules, then none", true, nil, []*Rules{rules, nil}, codes.OK, false},
		{"no rules, not required", false, nil, nil, codes.OK, false},
		{"rules at start, required", true, rules, nil, codes.OK, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, _ := memoryStore()
			svc, err := New(mem, tt.start, Options{RequireRules: tt.require})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.set {
				svc.SetRules(r)
			}
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if got, want := svc.AwaitingRules(), tt.wantCode == codes.Unknown; got != want {
				t.Errorf("AwaitingRules() = %v, want %v", got, want)
			}
			if st := status.Convert(err); st.Code() != tt.wantCode {
				t.Fatalf("answer %v, error %v: want code %v", resp, err, tt.wantCode)
			} else if err != nil && st.Message() != "no rate limit configuration loaded" {
				t.Fatalf("message %q, want the reference's", st.Message())
			}
			if err == nil && (resp.GetStatuses()[0].GetCurrentLimit() != nil) != tt.limited {
				t.Errorf("answer %v: limited %v, want %v", resp, !tt.limited, tt.limited)
			}
		})
	}
	// A malformed request keeps its own error, checked first as by the
	// reference.
	mem, _ := memoryStore()
	svc, _ := New(mem, nil, Options{RequireRules: true})
	if _, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no descriptors: %v, want InvalidArgument", err)
	}
}

package docstest

import (
	"testing"

	"github.com/floodgate-rl/floodgate/internal/limitcheck"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/envoy"
)

// TestEnvoyLocalExample: docs/ENVOY.md's failure_mode local example loads,
// and its rules have the shares its comments say.
func TestEnvoyLocalExample(t *testing.T) {
	const name = "docs/ENVOY.md"
	block := taggedBlock(t, readDoc(t, name), name, "envoy-local")
	rules, err := envoy.Parse(envoy.Source{Name: "api.yaml", Data: []byte(block)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key   string
		mode  decide.FailureMode
		share float64
		local int64 // the quota each instance enforces alone
	}{
		{"api_key", decide.FailLocal, 0.25, 15},
		{"login", decide.FailLocal, 0.5, 5},
		{"health", decide.FailOpen, 0, 0},
	} {
		r := rules.Match("api", []envoy.Entry{{Key: tc.key, Value: "x"}})
		if r == nil {
			t.Fatalf("%s: no rule", tc.key)
		}
		if r.FailureMode != tc.mode || r.LocalShare != tc.share {
			t.Errorf("%s: failure mode %s, share %v; want %s, %v", tc.key, r.FailureMode, r.LocalShare, tc.mode, tc.share)
		}
		if tc.mode != decide.FailLocal {
			continue
		}
		l, err := limitcheck.Share(r.Limit, r.LocalShare)
		if err != nil || l.Quota != tc.local {
			t.Errorf("%s: local limit %v (%v), want a quota of %d", tc.key, l, err, tc.local)
		}
	}
}

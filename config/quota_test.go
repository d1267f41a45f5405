package config

import (
	"strings"
	"testing"
)

// TestEnvoyQuotaErrors: every bad envoy_quota value names its line, field
// and value, and says what to write.
func TestEnvoyQuotaErrors(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"envoy_quota:\n  interval: 5ms\n", []string{"line 2", "envoy_quota.interval", "5ms", "at least 10ms"}},
		{"envoy_quota:\n  interval: 1.000001s\n", []string{"line 2", "envoy_quota.interval", "1.000001s", "whole number of 4µs", "try 1s"}},
		{"envoy_quota:\n  ttl: 1500ms\n", []string{"line 2", "envoy_quota.ttl", "1.5s", "whole number of seconds", "try 3s"}},
		{"envoy_quota:\n  interval: 2s\n  ttl: 3s\n", []string{"line 3", "envoy_quota.ttl", "longer than two intervals (4s)", "try 6s"}},
		{"envoy_quota:\n  idle: 1s\n", []string{"line 2", "envoy_quota.idle", "at least two intervals"}},
		{"envoy_quota:\n  unmatched: drop\n", []string{"line 2", "envoy_quota.unmatched", "drop", "allow_all, deny_all or abandon"}},
		{"envoy_quota:\n  max_buckets: -1\n", []string{"line 2", "envoy_quota.max_buckets", "-1"}},
	} {
		_, err := Parse([]byte(tc.yaml), "f.yaml")
		if err == nil {
			t.Errorf("%q: no error", tc.yaml)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v; want it to say %q", tc.yaml, err, w)
			}
		}
	}
	if _, err := Parse([]byte("envoy_quota:\n  interval: 500ms\n  ttl: 2s\n  unmatched: abandon\n"), "f.yaml"); err != nil {
		t.Errorf("a good envoy_quota: %v", err)
	}
}

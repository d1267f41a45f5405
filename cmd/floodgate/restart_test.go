package main

import (
	"slices"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
)

// TestRestartSettingsStore: a reload that changes any store key, the
// resilience ones and store.per_second included, is reported as needing a
// restart, not silently ignored; an unchanged store is not.
func TestRestartSettingsStore(t *testing.T) {
	base := func() *config.Config {
		return &config.Config{Store: config.Store{Type: "redis", Addrs: []string{"127.0.0.1:6379"}, Timeout: 50 * time.Millisecond,
			PerSecond: &config.Store{Type: "redis", Addrs: []string{"127.0.0.1:6380"}}}}
	}
	tests := []struct {
		name   string
		change func(*config.Config)
	}{
		{"max_in_flight", func(c *config.Config) { c.Store.MaxInFlight = 64 }},
		{"breaker_failures", func(c *config.Config) { c.Store.BreakerFailures = -1 }},
		{"require_at_start", func(c *config.Config) { c.Store.RequireAtStart = true }},
		{"timeout", func(c *config.Config) { c.Store.Timeout = time.Second }},
		{"addrs", func(c *config.Config) { c.Store.Addrs = []string{"127.0.0.1:7000"} }},
		{"over_limit_cache", func(c *config.Config) { c.Store.OverLimitCache.MaxEntries = 10 }},
		{"per_second.addrs", func(c *config.Config) { c.Store.PerSecond.Addrs = []string{"127.0.0.1:7001"} }},
		{"per_second removed", func(c *config.Config) { c.Store.PerSecond = nil }},
		{"tls_skip_hostname_verification", func(c *config.Config) { c.Store.TLSSkipHostnameVerification = true }},
	}
	if got := restartSettings(base(), base()); slices.Contains(got, "store") {
		t.Errorf("an unchanged store is reported: %q", got)
	}
	for _, tt := range tests {
		next := base()
		tt.change(next)
		if got := restartSettings(base(), next); !slices.Contains(got, "store") {
			t.Errorf("%s changed: restartSettings = %q, want \"store\"", tt.name, got)
		}
	}
}

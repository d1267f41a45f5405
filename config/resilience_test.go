package config

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/limitcheck"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// TestLocalFallbackAndCacheKeys maps failure_mode: local with its share,
// local_cache and the store's over_limit_cache onto the libraries' types.
func TestLocalFallbackAndCacheKeys(t *testing.T) {
	c, err := Parse([]byte(`
store:
  type: memory
  over_limit_cache: {max_entries: 1000, max_bytes: 200000}
rules:
  - {name: quarter, algorithm: sliding_window_log, limit: 100, window: 1m, failure_mode: local, local_share: 0.25}
  - {name: four, algorithm: token_bucket, capacity: 40, refill: 10/s, failure_mode: local, instances: 4, local_cache: false}
  - {name: open, algorithm: fixed_window, limit: 5, window: 1s, local_cache: true}
`), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		failure decide.FailureMode
		share   float64
		noCache bool
	}{{decide.FailLocal, 0.25, false}, {decide.FailLocal, 0.25, true}, {decide.FailOpen, 0, false}} {
		r := p.Rules[i]
		if r.Failure != want.failure || r.LocalShare != want.share || r.NoCache != want.noCache {
			t.Errorf("rule %s: failure %v share %v no cache %v, want %+v", r.Name, r.Failure, r.LocalShare, r.NoCache, want)
		}
	}
	if got, err := limitcheck.Share(p.Rules[1].Limit, p.Rules[1].LocalShare); err != nil || got != floodgate.NewTokenBucket(10, 10, 4*time.Second) {
		t.Errorf("four's local limit = %s, %v", got, err)
	}
	if got, want := c.OverLimitCache(), (decide.CacheOptions{MaxEntries: 1000, MaxBytes: 200000}); got != want {
		t.Errorf("OverLimitCache() = %+v, want %+v", got, want)
	}
}

func TestLocalFallbackErrors(t *testing.T) {
	const head = "rules:\n  - name: r\n    algorithm: sliding_window_log\n    limit: 10\n    window: 1m\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"local without a share", head + "    failure_mode: local\n", "f.yaml: line 6: rules[0].failure_mode: local needs local_share (such as 0.25) or instances"},
		{"both", head + "    failure_mode: local\n    local_share: 0.5\n    instances: 2\n", "f.yaml: line 8: rules[0].instances: 2 cannot be used together with local_share"},
		{"share without local", head + "    local_share: 0.5\n", "f.yaml: line 6: rules[0].local_share: 0.5 applies to failure_mode: local only"},
		{"instances without local", head + "    failure_mode: closed\n    instances: 3\n", "f.yaml: line 7: rules[0].instances: 3 applies to failure_mode: local only"},
		{"share too big", head + "    failure_mode: local\n    local_share: 1.5\n", "f.yaml: line 7: rules[0].local_share: 1.5 must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"},
		{"negative instances", head + "    failure_mode: local\n    instances: -2\n", "f.yaml: line 7: rules[0].instances: -2 must be at least 1"},
		{"unknown mode", head + "    failure_mode: lokal\n", `failure mode "lokal" is not open, closed or local`},
		{"share 0 written", head + "    failure_mode: local\n    local_share: 0\n", "f.yaml: line 7: rules[0].local_share: 0 must be above 0 and at most 1"},
		{"instances 0 written", head + "    failure_mode: local\n    instances: 0\n", "f.yaml: line 7: rules[0].instances: 0 must be at least 1"},
		{"instances octal", head + "    failure_mode: local\n    instances: 010\n",
			`f.yaml: line 7: rules[0].instances: "010" must be written in decimal digits, without a leading 0, + or _ (YAML reads 010 as 8); write 10, or 8 if you mean what YAML reads`},
		{"instances too large", head + "    failure_mode: local\n    instances: 99999999999999999999\n", `f.yaml: line 7: rules[0].instances: "99999999999999999999" is too large`},
		{"limit hex", "rules:\n  - name: r\n    algorithm: fixed_window\n    limit: 0x10\n    window: 1m\n", `rules[0].limit: "0x10" must be written in decimal digits`},
		{"bad local_cache", head + "    local_cache: maybe\n", "rules[0].local_cache"},
		{"negative cache entries", head + "store:\n  over_limit_cache:\n    max_entries: -1\n", "store.over_limit_cache.max_entries: -1 must not be negative"},
		{"negative cache bytes", head + "store:\n  over_limit_cache:\n    max_bytes: -5\n", "store.over_limit_cache.max_bytes: -5 must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "f.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestLocalShareReportedOnce: a failure_mode that is written but wrong is
// reported once; its rule's share is not also "not for failure_mode open"
// (the mode it decoded as), though the share's own value is checked.
func TestLocalShareReportedOnce(t *testing.T) {
	const head = "rules:\n  - name: r\n    algorithm: sliding_window_log\n    limit: 10\n    window: 1m\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"misspelt mode, instances", head + "    failure_mode: Local\n    instances: 2\n",
			`f.yaml: line 6: rules[0].failure_mode: "Local" is invalid: failure mode "Local" is not open, closed or local`},
		{"misspelt mode, share", head + "    failure_mode: lcoal\n    local_share: 0.5\n",
			`f.yaml: line 6: rules[0].failure_mode: "lcoal" is invalid: failure mode "lcoal" is not open, closed or local`},
		{"misspelt mode, wrong instances", head + "    failure_mode: Local\n    instances: -1\n",
			`f.yaml: line 6: rules[0].failure_mode: "Local" is invalid: failure mode "Local" is not open, closed or local` + "\n" +
				"line 7: rules[0].instances: -1 must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "f.yaml")
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Parse error\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

package envoy

import (
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const shadowHeaderRules = `
domain: sh
descriptors:
  - key: e
    rate_limit: {name: e, unit: hour, requests_per_unit: 100}
  - key: k
    rate_limit: {name: k, unit: minute, requests_per_unit: 1}
  - key: s
    shadow_mode: true
    rate_limit: {name: s, unit: minute, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {name: q, unit: minute, requests_per_unit: 1}
  - key: banned
    rate_limit: {name: banned, unit: minute, requests_per_unit: 0}
  - key: sbanned
    shadow_mode: true
    rate_limit: {name: sbanned, unit: minute, requests_per_unit: 0}
`

// TestShadowNeverInHeaders: a descriptor the engine decides as shadow (the
// rule's shadow_mode, the global SHADOW_MODE, a rule's quota_mode or the
// global QUOTA_MODE) is decided and reported in its status, but appears in
// neither header family: not in RateLimit-Policy, RateLimit, X-RateLimit-*
// or Retry-After (ResponseHeaders), and not as the descriptor the peer's
// RateLimit-Limit, -Remaining and -Reset (PeerHeaders) describe.
func TestShadowNeverInHeaders(t *testing.T) {
	// e's headers, in both families, after n requests at the test clock's
	// whole hour.
	enforced := func(remaining int) string {
		r := strconv.Itoa(remaining)
		reset := strconv.FormatInt(newTestClock().Now().Add(time.Hour).Unix(), 10)
		return `Ratelimit-Policy: "e";q=100;w=3600` + "\n" + `Ratelimit: "e";r=` + r + ";t=3600\n" +
			"X-Ratelimit-Limit: 100\nX-Ratelimit-Remaining: " + r + "\nX-Ratelimit-Reset: " + reset + "\n" +
			"RateLimit-Limit: 100\nRateLimit-Remaining: " + r + "\nRateLimit-Reset: 3600"
	}
	over, ok := rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK
	tests := []struct {
		name   string
		opts   Options
		descs  []string // one entry each, sent twice
		status []rlsv3.RateLimitResponse_Code
		want   string // the second answer's headers
	}{
		{"global shadow: over the limit", Options{ShadowMode: true}, []string{"k=a"}, []rlsv3.RateLimitResponse_Code{over}, ""},
		{"global shadow: a blocked rule", Options{ShadowMode: true}, []string{"banned=a"}, []rlsv3.RateLimitResponse_Code{over}, ""},
		{"global shadow: every rule of the request", Options{ShadowMode: true}, []string{"e=a", "k=a"},
			[]rlsv3.RateLimitResponse_Code{ok, over}, ""},
		{"global quota mode: over the quota", Options{QuotaMode: true}, []string{"k=a"}, []rlsv3.RateLimitResponse_Code{ok}, ""},
		{"global quota mode: beside another", Options{QuotaMode: true}, []string{"e=a", "k=a"}, []rlsv3.RateLimitResponse_Code{ok, ok}, ""},
		{"quota_mode rule over its quota beside an enforced one", Options{}, []string{"q=a", "e=a"},
			[]rlsv3.RateLimitResponse_Code{ok, ok}, enforced(98)},
		{"quota_mode rule alone", Options{}, []string{"q=b"}, []rlsv3.RateLimitResponse_Code{ok}, ""},
		{"shadow rule over its limit beside an enforced one", Options{}, []string{"s=a", "e=a"},
			[]rlsv3.RateLimitResponse_Code{ok, ok}, enforced(98)},
		{"enforced one first, then the shadow rule", Options{}, []string{"e=a", "s=a"},
			[]rlsv3.RateLimitResponse_Code{ok, ok}, enforced(98)},
		{"shadow rule blocked beside an enforced one", Options{}, []string{"sbanned=a", "e=a"},
			[]rlsv3.RateLimitResponse_Code{ok, ok}, enforced(98)},
		{"shadow rule blocked alone", Options{}, []string{"sbanned=b"}, []rlsv3.RateLimitResponse_Code{ok}, ""},
		// The enforced control: the same headers code picks shadow from.
		{"enforced rule over its limit", Options{}, []string{"k=a"}, []rlsv3.RateLimitResponse_Code{over},
			`Ratelimit-Policy: "k";q=1;w=60` + "\n" + `Ratelimit: "k";r=0;t=60` + "\n" +
				"X-Ratelimit-Limit: 1\nX-Ratelimit-Remaining: 0\nX-Ratelimit-Reset: " +
				strconv.FormatInt(newTestClock().Now().Add(time.Minute).Unix(), 10) + "\nRetry-After: 60\n" +
				"RateLimit-Limit: 1\nRateLimit-Remaining: 0\nRateLimit-Reset: 60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, clock := memoryStore()
			opts := tt.opts
			opts.Clock, opts.ResponseHeaders, opts.PeerHeaders = clock, true, &PeerHeaders{}
			e := start(t, mem, true, opts, shadowHeaderRules)
			var descs []*rlsv3.RateLimitRequest
			for range 2 {
				r := request("sh")
				for _, d := range tt.descs {
					r.Descriptors = append(r.Descriptors, desc(d))
				}
				descs = append(descs, r)
			}
			e.raw(t, descs[0])
			resp := e.raw(t, descs[1])
			for i, want := range tt.status {
				if got := resp.GetStatuses()[i].GetCode(); got != want {
					t.Errorf("statuses[%d]: %s, want %s (it is decided and reported): %v", i, got, want, resp)
				}
			}
			wantOverall := ok
			if tt.opts == (Options{}) && tt.status[len(tt.status)-1] == over {
				wantOverall = over
			}
			if got := resp.GetOverallCode(); got != wantOverall {
				t.Errorf("overall_code %s, want %s", got, wantOverall)
			}
			if got := headerLines(resp); got != tt.want {
				t.Errorf("headers\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestPeerHeadersSkipGiveBack: the peer's headers describe descriptors the
// store decided or a rule blocks, as RateLimit-Policy lists them
// (inHeaders), not an is_negative_hits give-back, whose limit_remaining
// (0) counts nothing.
func TestPeerHeadersSkipGiveBack(t *testing.T) {
	mem, clock := memoryStore()
	e := start(t, mem, true, Options{Clock: clock, PeerHeaders: &PeerHeaders{}}, shadowHeaderRules)
	back := desc("k=g")
	back.IsNegativeHits = true
	resp := e.raw(t, request("sh", desc("e=g"), back))
	if got, want := headerLines(resp), "RateLimit-Limit: 100\nRateLimit-Remaining: 99\nRateLimit-Reset: 3600"; got != want {
		t.Errorf("headers\n%s\nwant\n%s", got, want)
	}
}

// TestPeerHeadersSkipUndecided: a fail-open descriptor the store could not
// decide answers OK with a limit_remaining of 0 that counts nothing; the
// peer's headers then describe the descriptor that was decided, and none
// when none was, as RateLimit-Policy and RateLimit do.
func TestPeerHeadersSkipUndecided(t *testing.T) {
	const rules = `
domain: pu
failure_mode: open
descriptors:
  - key: o
    rate_limit: {name: o, unit: minute, requests_per_unit: 8}
  - key: e
    rate_limit: {name: e, unit: hour, requests_per_unit: 100}
`
	mem, clock := memoryStore()
	e := start(t, &failingStore{Store: mem}, true, Options{Clock: clock, PeerHeaders: &PeerHeaders{}}, rules)
	if got, want := headerLines(e.raw(t, request("pu", desc("o=down"), desc("e=up")))), "RateLimit-Limit: 100\nRateLimit-Remaining: 99\nRateLimit-Reset: 3600"; got != want {
		t.Errorf("beside a decided descriptor: headers\n%s\nwant\n%s", got, want)
	}
	if got := headerLines(e.raw(t, request("pu", desc("o=down")))); got != "" {
		t.Errorf("alone: headers\n%s\nwant none", got)
	}
}

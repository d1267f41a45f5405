package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
)

// TestKeysMustBeText: invalid UTF-8 and lone surrogates, which
// encoding/json would fold into U+FFFD so that distinct keys share one
// budget, are answered 400; a real U+FFFD, a surrogate pair and escapes
// next to them are keys like any other.
func TestKeysMustBeText(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
	}{
		{"invalid byte", "{\"rule\":\"login\",\"key\":\"a\xffb\"}", 400},
		{"truncated sequence", "{\"rule\":\"login\",\"key\":\"a\xe2\x82\"}", 400},
		{"lone high surrogate", `{"rule":"login","key":"a\ud800b"}`, 400},
		{"lone low surrogate", `{"rule":"login","key":"\udc00"}`, 400},
		{"high surrogate at the end", `{"rule":"login","key":"\ud83d"}`, 400},
		{"two high surrogates", `{"rule":"login","key":"\ud83d\ud83d"}`, 400},
		{"surrogate pair", `{"rule":"login","key":"\ud83d\ude00"}`, 200},
		{"replacement character", `{"rule":"login","key":"\ufffd"}`, 200},
		{"replacement character, raw", "{\"rule\":\"login\",\"key\":\"\xef\xbf\xbd!\"}", 200},
		{"escaped backslash before u", `{"rule":"login","key":"\\ud800"}`, 200},
	}
	f := newFixture(t, testConfig, nil)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := f.do("POST", "/v1/check", c.body)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if c.status == 400 && !strings.Contains(rec.Body.String(), "UTF") {
				t.Fatalf("the problem does not say why: %s", rec.Body)
			}
		})
	}
	// Two invalid keys that would both become "\ufffd" cannot spend the
	// budget of the real "\ufffd" key: it still has all of its quota.
	for _, body := range []string{`{"rule":"login","key":"\ud800","cost":3}`, "{\"rule\":\"login\",\"key\":\"\xff\",\"cost\":3}"} {
		f.do("POST", "/v1/check", body)
	}
	rec := f.do("POST", "/v1/check", `{"rule":"login","key":"\ufffd\ufffd","cost":3}`)
	if rec.Code != 200 {
		t.Fatalf("a fresh key after rejected look-alikes: %d %s", rec.Code, rec.Body)
	}
}

// TestFieldNamesExact: field names match exactly and once; encoding/json
// alone would let "Rule" override "rule".
func TestFieldNamesExact(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	for _, c := range []struct{ name, body, detail string }{
		{"other case", `{"Rule":"login","key":"k"}`, `"Rule"`},
		{"override by case", `{"rule":"api","Rule":"login","key":"k"}`, `"Rule"`},
		{"upper key", `{"rule":"login","KEY":"k"}`, `"KEY"`},
		{"twice", `{"rule":"login","key":"a","key":"b"}`, "twice"},
		{"reset, other case", `{"rule":"login","Key":"k"}`, `"Key"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := "/v1/check"
			if strings.HasPrefix(c.name, "reset") {
				path = "/v1/reset"
			}
			rec := f.do("POST", path, c.body)
			var p struct{ Detail string }
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, c.detail) {
				t.Fatalf("%d %s, want a 400 problem naming %s", rec.Code, rec.Body, c.detail)
			}
		})
	}
}

// TestFailOpenLeavesOutUnknownFigures: a fail-open answer has no
// remaining, retry_after_ms or reset_after_ms, which the store never gave,
// and says store_unavailable.
func TestFailOpenLeavesOutUnknownFigures(t *testing.T) {
	f := newFixture(t, testConfig, func(floodgate.Clock) floodgate.Store { return failingStore{} })
	rec := f.do("POST", "/v1/check", `{"rule":"api","key":"k"}`)
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	for _, unknown := range []string{"remaining", "retry_after_ms", "reset_after_ms"} {
		if v, ok := got[unknown]; ok {
			t.Errorf("the fail-open answer reports %s = %v, which the store never said", unknown, v)
		}
	}
	if got["store_unavailable"] != true || got["allowed"] != true || got["limit"] != float64(10) || got["rule"] != "api" {
		t.Errorf("fail-open answer %v", got)
	}
	// A decided answer has every figure, zero too.
	ok := newFixture(t, testConfig, nil)
	rec = ok.do("POST", "/v1/check", `{"rule":"login","key":"k","cost":3}`)
	got = nil
	_ = json.Unmarshal(rec.Body.Bytes(), &got)
	for _, known := range []string{"remaining", "retry_after_ms", "reset_after_ms", "limit"} {
		if _, ok := got[known]; !ok {
			t.Errorf("a decided answer lacks %s: %v", known, got)
		}
	}
	if _, ok := got["store_unavailable"]; ok {
		t.Errorf("a decided answer says store_unavailable: %v", got)
	}
	var back server.CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &back); err != nil || back.Remaining != 0 || back.Limit != 3 {
		t.Errorf("round trip: %+v %v", back, err)
	}
}

// TestServerErrorsAreProblems: the answers net/http would write as text
// (no route, wrong method, a body over the limit) are problem details.
func TestServerErrorsAreProblems(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/nothing", "", 404},
		{"PUT", "/v1/check", "", 405},
		{"DELETE", "/v1/rules", "", 405},
		{"POST", "/healthz", "", 405},
		{"POST", "/v1/reset", `{"rule":"login","key":"` + strings.Repeat("x", server.MaxBodyBytes) + `"}`, 413},
		// Paths ServeMux would redirect (a 307 without a body) are no
		// endpoint, with the canonical path in the detail.
		{"POST", "//v1/check", `{"rule":"login","key":"k"}`, 404},
		{"POST", "/v1/./check", `{"rule":"login","key":"k"}`, 404},
		{"GET", "//healthz", "", 404},
		{"GET", "/v1/x/../rules", "", 404},
		{"GET", "*", "", 404},
	} {
		rec := f.do(c.method, c.path, c.body)
		if rec.Code != c.status || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %q, want %d application/problem+json", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"), c.status)
		}
	}
}

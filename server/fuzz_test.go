package server_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCheckRequest feeds arbitrary bodies to POST /v1/check and
// /v1/reset: every answer is a decision (200, 429) or a problem (400, 404,
// 413), never a panic or a 5xx, and a body is accepted only if it is valid
// UTF-8 whose field names are exactly the API's.
func FuzzCheckRequest(f *testing.F) {
	for _, seed := range []string{
		`{"rule":"login","key":"user-42"}`,
		`{"rule":"login","key":"k","cost":3}`,
		`{"rule":"api","key":"\ud83d\ude00"}`,
		`{"Rule":"login","key":"k"}`,
		`{"rule":"login","key":"\ud800"}`,
		"{\"rule\":\"login\",\"key\":\"\xff\"}",
		`{"rule":"login","key":"a","key":"b"}`,
		`{"rule":"nope","key":"k"}`,
		`{"rule":"login","key":"k","cost":1e30}`,
		`[]`, `{`, ``, `null`, `{"rule":"login","key":"k"} x`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, body string, reset bool) {
		fx := newFixture(t, testConfig, nil)
		path := "/v1/check"
		if reset {
			path = "/v1/reset"
		}
		rec := fx.do("POST", path, body)
		switch rec.Code {
		case 200, 429:
			if !utf8.ValidString(body) {
				t.Fatalf("accepted a body that is not UTF-8: %q", body)
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal([]byte(body), &fields); err != nil {
				t.Fatalf("accepted %q, which is not a JSON object: %v", body, err)
			}
			for name := range fields {
				if name != "rule" && name != "key" && name != "cost" {
					t.Fatalf("accepted the field %q in %q", name, body)
				}
			}
			if rec.Header().Get("Content-Type") != "application/json" || !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("decision %q is not JSON", rec.Body)
			}
		case 400, 404, 413:
			if rec.Header().Get("Content-Type") != "application/problem+json" || !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("problem %d for %q is not problem+json: %q", rec.Code, body, rec.Body)
			}
			if !bytes.Contains(rec.Body.Bytes(), []byte(`"detail"`)) && !strings.Contains(rec.Body.String(), "title") {
				t.Fatalf("problem without a detail: %s", rec.Body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}

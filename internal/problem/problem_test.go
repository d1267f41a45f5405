package problem

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	cases := []struct {
		name string
		in   Details
		want Details
	}{
		{"defaults", Details{Status: 404, Detail: "no such rule"},
			Details{Type: "about:blank", Title: "Not Found", Status: 404, Detail: "no such rule"}},
		{"quota exceeded", Details{Type: QuotaExceeded, Title: "Too Many Requests", Status: 429, ViolatedPolicies: []string{"api"}},
			Details{Type: QuotaExceeded, Title: "Too Many Requests", Status: 429, ViolatedPolicies: []string{"api"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			rec.Header().Set("Retry-After", "3")
			Write(rec, c.in)
			if rec.Code != c.want.Status || rec.Header().Get("Content-Type") != ContentType || rec.Header().Get("Retry-After") != "3" {
				t.Fatalf("status %d, headers %v", rec.Code, rec.Header())
			}
			var got Details
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Type != c.want.Type || got.Title != c.want.Title || got.Status != c.want.Status || got.Detail != c.want.Detail ||
				len(got.ViolatedPolicies) != len(c.want.ViolatedPolicies) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			if n := rec.Header().Get("Content-Length"); n != "" && n != itoa(rec.Body.Len()) {
				t.Fatalf("Content-Length %s, body %d bytes", n, rec.Body.Len())
			}
		})
	}
	rec := httptest.NewRecorder()
	Error(rec, http.StatusBadRequest, "bad")
	if rec.Code != 400 {
		t.Fatalf("Error: status %d", rec.Code)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

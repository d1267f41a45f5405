package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// storeAnswer posts body to the store API path and returns the status and
// the problem's kind (or the body, for a 200).
func storeAnswer(t *testing.T, h http.Handler, path, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "http://floodgate"+path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code == http.StatusOK {
		return w.Code, strings.TrimSpace(w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: status %d with Content-Type %q, want problem details", path, w.Code, ct)
	}
	var p struct {
		Kind   string `json:"kind"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Detail == "" {
		t.Fatalf("%s: problem %q: %v", path, w.Body, err)
	}
	return w.Code, p.Kind
}

func TestStoreAPI(t *testing.T) {
	srv, err := server.New(memory.New(), server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	const lim = `"limit":{"algorithm":"fixed_window","quota":2,"window_us":60000000}`
	many := `{"items":[` + strings.Repeat(`{"key":"k",`+lim+`,"cost":1},`, 256) + `{"key":"k",` + lim + `,"cost":1}]}`
	cases := []struct {
		name, path, body string
		status           int
		want             string // the kind, or the 200 body
	}{
		{"allow", "/v1/store/allow", `{"key":"a",` + lim + `,"cost":1}`, 200, `{"allowed":true,"limit":2,"remaining":1,"retry_after_us":0,"reset_after_us":`},
		{"allow binary key", "/v1/store/allow", `{"key_base64":"/w==",` + lim + `,"cost":2}`, 200, `{"allowed":true,"limit":2,"remaining":0,`},
		{"refund", "/v1/store/refund", `{"key":"a",` + lim + `,"cost":1}`, 200, `{}`},
		{"reset", "/v1/store/reset", `{"key":"a",` + lim + `}`, 200, `{}`},
		{"batch", "/v1/store/batch", `{"items":[{"key":"b",` + lim + `,"cost":1},{"key":"c",` + lim + `,"cost":3}]}`, 200, `{"results":[{"decision":{"allowed":true,"limit":2,"remaining":1,"retry_after_us":0,"reset_after_us":`},
		{"no key", "/v1/store/allow", `{` + lim + `,"cost":1}`, 400, "bad_request"},
		{"two keys", "/v1/store/allow", `{"key":"a","key_base64":"YQ==",` + lim + `,"cost":1}`, 400, "bad_request"},
		{"not JSON", "/v1/store/allow", `key=a`, 400, "bad_request"},
		{"unknown field", "/v1/store/allow", `{"key":"a",` + lim + `,"cost":1,"rule":"x"}`, 400, "bad_request"},
		{"unknown algorithm", "/v1/store/allow", `{"key":"a","limit":{"algorithm":"leaky","quota":2,"window_us":1000},"cost":1}`, 400, "invalid_limit"},
		{"window over a year", "/v1/store/allow", `{"key":"a","limit":{"algorithm":"fixed_window","quota":2,"window_us":99999999999999999},"cost":1}`, 400, "invalid_limit"},
		{"cost below 0", "/v1/store/allow", `{"key":"a",` + lim + `,"cost":-1}`, 400, "invalid_cost"},
		{"cost 0 checks only", "/v1/store/allow", `{"key":"fresh",` + lim + `,"cost":0}`, 200, `{"allowed":true,"limit":2,"remaining":2,`},
		{"cost over quota", "/v1/store/allow", `{"key":"a",` + lim + `,"cost":3}`, 400, "cost_exceeds_limit"},
		{"reset with a cost", "/v1/store/reset", `{"key":"a",` + lim + `,"cost":1}`, 400, "invalid_cost"},
		{"a time, on the server's clock", "/v1/store/allow", `{"key":"a",` + lim + `,"cost":1,"now_us":1}`, 400, "bad_request"},
		{"empty batch", "/v1/store/batch", `{"items":[]}`, 400, "bad_request"},
		{"batch too long", "/v1/store/batch", many, 400, "bad_request"},
		{"time on an item", "/v1/store/batch", `{"items":[{"key":"a",` + lim + `,"cost":1,"now_us":5}]}`, 400, "bad_request"},
		{"body too large", "/v1/store/allow", `{"key":"` + strings.Repeat("k", 2<<20) + `"}`, 400, "bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, got := storeAnswer(t, h, c.path, c.body)
			if status != c.status || (status == 200 && !strings.HasPrefix(got, c.want)) || (status != 200 && got != c.want) {
				t.Fatalf("%d %s, want %d %s", status, got, c.status, c.want)
			}
		})
	}
	// The batch's invalid item got its error; the valid one was decided.
	_, got := storeAnswer(t, h, "/v1/store/batch", `{"items":[{"key":"d",`+lim+`,"cost":1},{"key":"d",`+lim+`,"cost":0}]}`)
	if !strings.Contains(got, `"decision":{"allowed":true`) || !strings.Contains(got, `"error":{"kind":"invalid_cost"`) {
		t.Fatalf("batch with an invalid item: %s", got)
	}
}

// TestStoreAPIOff: without Options.StoreAPI the paths do not exist.
func TestStoreAPIOff(t *testing.T) {
	srv, err := server.New(memory.New(), server.Policy{}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := storeAnswer(t, srv.Handler(), "/v1/store/allow", `{}`); status != http.StatusNotFound {
		t.Fatalf("status %d, want 404", status)
	}
}

// TestStoreAPIClientClock: a server on the clients' clock decides at the
// time each call carries, and needs one.
func TestStoreAPIClientClock(t *testing.T) {
	clock := clocktest.NewManual(time.Unix(0, 0))
	srv, err := server.New(memory.New(memory.WithClock(clock)), server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	const lim = `"limit":{"algorithm":"fixed_window","quota":1,"window_us":60000000}`
	if status, kind := storeAnswer(t, h, "/v1/store/allow", `{"key":"a",`+lim+`,"cost":1}`); status != 400 || kind != "bad_request" {
		t.Fatalf("a call without a time: %d %s, want 400 bad_request", status, kind)
	}
	for _, c := range []struct {
		at   int64
		want string
	}{
		{1_800_000_000_000_000, `"allowed":true`},
		{1_800_000_059_000_000, `"allowed":false`},
		{1_800_000_060_000_000, `"allowed":true`}, // the next window
	} {
		_, got := storeAnswer(t, h, "/v1/store/allow", `{"key":"a",`+lim+`,"cost":1,"now_us":`+strconv.FormatInt(c.at, 10)+`}`)
		if !strings.Contains(got, c.want) {
			t.Errorf("at %d: %s, want %s", c.at, got, c.want)
		}
	}
}

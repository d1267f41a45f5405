package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/server"
)

// noauthStore fails every call as a Redis that wants a password does.
type noauthStore struct{ floodgate.Store }

const noauthText = "NOAUTH HELLO must be called with the client already authenticated"

func (noauthStore) AllowN(context.Context, string, floodgate.Limit, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, errors.New(noauthText)
}

func (noauthStore) Reset(context.Context, string, floodgate.Limit) error {
	return errors.New(noauthText)
}

// TestFailureBodies: a 5xx answer names the kind of failure and a request
// id that the log line carries with the store's error; the error's text
// never reaches the caller.
func TestFailureBodies(t *testing.T) {
	for _, c := range []struct {
		name         string
		store        floodgate.Store
		method, path string
		body         string
		status       int
		kind, err    string
	}{
		{"check, store error", noauthStore{}, "POST", "/v1/check", `{"rule":"login","key":"k"}`, 500, "store_error", noauthText},
		{"forward auth, store error", noauthStore{}, "GET", "/v1/forward-auth?rule=login", "", 500, "store_error", noauthText},
		{"reset, store error", noauthStore{}, "POST", "/v1/reset", `{"rule":"login","key":"k"}`, 500, "store_error", noauthText},
		{"check, store down", failingStore{}, "POST", "/v1/check", `{"rule":"login","key":"k"}`, 503, "store_unavailable", "dial: "},
		{"reset, store down", failingStore{}, "POST", "/v1/reset", `{"rule":"login","key":"k"}`, 503, "store_unavailable", "dial: "},
		{"readyz, store error", noauthStore{}, "GET", "/readyz", "", 503, "store_unavailable", noauthText},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &syncbuf.Buffer{}
			srv, err := server.New(c.store, policyOf(t, testConfig), server.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)
			var p struct {
				Status    int    `json:"status"`
				Kind      string `json:"kind"`
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
			}
			if rec.Code != c.status || p.Kind != c.kind || p.RequestID == "" || rec.Header().Get("X-Request-Id") != p.RequestID ||
				rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d %v %s; want %d of kind %s with a request id", rec.Code, rec.Header(), rec.Body, c.status, c.kind)
			}
			if strings.Contains(rec.Body.String(), c.err) {
				t.Fatalf("the body shows the store's error: %s", rec.Body)
			}
			line := ""
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, fmt.Sprintf(`"request_id":%q`, p.RequestID)) {
					line = l
				}
			}
			if !strings.Contains(line, c.err) || !strings.Contains(line, `"kind":"`+c.kind+`"`) {
				t.Fatalf("no log line with request id %s and the error:\n%s", p.RequestID, logs)
			}
		})
	}
}

package frontendtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/storekey"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// TestHugeKeysAreHashedEverywhere sends distinct keys far over
// storekey.MaxLen through every front end that takes a key from the
// client, and checks that the store holds each as a short hash: memory per
// key does not grow with the key, and distinct keys stay distinct.
func TestHugeKeysAreHashedEverywhere(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	limit := floodgate.PerMinute(5)
	// hugeKey is distinct per i; the server's body limit (16 KB) bounds its
	// keys a little below the others'.
	hugeKey := func(i, size int) string { return fmt.Sprintf("%05d", i) + strings.Repeat("k", size-5) }
	const n = 100
	cases := []struct {
		name   string
		decide func(t *testing.T, store floodgate.Store) func(key string) bool
		size   int
	}{
		{"middleware, API key header", func(t *testing.T, store floodgate.Store) func(string) bool {
			lim, err := httplimit.New(httplimit.Config{Store: store, Logger: discard,
				Rules: []httplimit.Rule{{Name: "api", Limit: limit, Key: httplimit.Header("X-API-Key")}}})
			if err != nil {
				t.Fatal(err)
			}
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
			return func(key string) bool {
				r := httptest.NewRequest(http.MethodGet, "http://app.example/", nil)
				r.Header.Set("X-API-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code == http.StatusNoContent
			}
		}, 16 << 10},
		{"server API", func(t *testing.T, store floodgate.Store) func(string) bool {
			srv, err := server.New(store, server.Policy{Rules: []server.Rule{{Name: "api", Limit: limit}}}, server.Options{Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			h := srv.Handler()
			return func(key string) bool {
				body, _ := json.Marshal(map[string]any{"rule": "api", "key": key})
				r := httptest.NewRequest(http.MethodPost, "http://floodgate/v1/check", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code == http.StatusOK
			}
		}, 15 << 10},
		{"envoy descriptor value", func(t *testing.T, store floodgate.Store) func(string) bool {
			rules, err := envoy.Parse(envoy.Source{Name: "k.yaml", Data: []byte("domain: k\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := envoy.New(store, rules, envoy.Options{Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			return func(key string) bool {
				resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "k",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: key}}}}})
				return err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
			}
		}, 16 << 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A manual clock: the Envoy rule is a fixed window on minute
			// boundaries, and a boundary inside the run would admit the
			// sixth request (it did, once in CI).
			store := memory.New(memory.WithClock(clocktest.NewManual(time.Date(2030, 1, 7, 0, 0, 30, 0, time.UTC))))
			decideKey := c.decide(t, store)
			for i := range n {
				if !decideKey(hugeKey(i, c.size)) {
					t.Fatalf("key %d was not admitted", i)
				}
			}
			// Each key is distinct: a sixth request on one key is denied
			// only after its own five.
			for range 4 {
				decideKey(hugeKey(0, c.size))
			}
			if decideKey(hugeKey(0, c.size)) {
				t.Fatal("the sixth request on one huge key was admitted")
			}
			st := store.Stats()
			if st.Keys != n {
				t.Fatalf("%d keys stored for %d distinct keys", st.Keys, n)
			}
			if per := st.KeyBytes / st.Keys; per > storekey.MaxLen/2 {
				t.Fatalf("%d bytes stored per key of %d bytes; want a hash", per, c.size)
			}
		})
	}
}

package envoy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestHeadersMatchMiddleware checks response_headers_to_add carries the
// values the HTTP middleware writes for the same rules and decisions.
func TestHeadersMatchMiddleware(t *testing.T) {
	const rules = `
domain: same
algorithm: sliding_window_log
response_headers: true
descriptors:
  - key: a
    rate_limit: {name: per-a, unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {name: per-b, unit: hour, requests_per_unit: 2}
  - key: bucket
    rate_limit: {name: bucket, unit: minute, requests_per_unit: 6, algorithm: token_bucket, capacity: 12}
`
	clock := newTestClock()
	e := start(t, memory.New(memory.WithClock(clock)), true, Options{Clock: clock}, rules)
	key := func(*http.Request) (string, error) { return "x", nil }
	lim, err := httplimit.New(httplimit.Config{
		Store: memory.New(memory.WithClock(clock)),
		Rules: []httplimit.Rule{
			{Name: "per-a", Limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 10, time.Minute), Key: key},
			{Name: "per-b", Limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 2, time.Hour), Key: key},
			{Name: "bucket", Limit: floodgate.NewTokenBucket(12, 6, time.Minute), Key: key},
		},
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	denied := 0
	for i, advance := range []time.Duration{0, time.Second, 1500 * time.Millisecond, 30 * time.Minute, time.Hour} {
		clock.Advance(advance)
		resp, err := e.client.ShouldRateLimit(context.Background(), request("same", desc("a=x"), desc("b=x"), desc("bucket=x")))
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		var want []string
		for _, k := range ratelimitheader.Order {
			for _, v := range w.Header()[k] {
				want = append(want, k+": "+v)
			}
		}
		if got, want := headerLines(resp), strings.Join(want, "\n"); got != want {
			t.Errorf("request %d (HTTP %d): envoy sends\n%s\nthe middleware\n%s", i, w.Code, got, want)
		}
		over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if over != (w.Code == http.StatusTooManyRequests) {
			t.Errorf("request %d: overall %s, middleware %d", i, resp.GetOverallCode(), w.Code)
		}
		if over {
			denied++
		}
	}
	if denied != 2 {
		t.Errorf("%d requests denied, want 2 (the third and fourth)", denied)
	}
}

package httplimit_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestLocalFallbackMiddleware: a FailLocal rule keeps limiting during an
// outage at its share, says so in a header and in Stats; the over-limit
// cache answers repeated denials, and NoCache opts a rule out.
func TestLocalFallbackMiddleware(t *testing.T) {
	broken := &brokenStore{prefixes: []string{"local|"}}
	e := newEnv(t, httplimit.Config{Store: broken, Rules: []httplimit.Rule{
		{Name: "local", Limit: floodgate.PerMinute(9), Failure: httplimit.FailLocal, LocalShare: 1.0 / 3, Paths: []string{"/local"}},
		{Name: "cached", Limit: floodgate.PerMinute(1), Paths: []string{"/cached"}},
		{Name: "uncached", Limit: floodgate.PerMinute(1), Paths: []string{"/uncached"}, NoCache: true},
	}})
	broken.Store = e.store
	for i, want := range []int{204, 204, 204, 429} {
		w := e.do(req{path: "/local"})
		if w.Code != want || w.Header().Get("Floodgate-Fallback") != "local" || w.Header().Get("X-Ratelimit-Limit") != "3" {
			t.Fatalf("request %d during the outage: %d %v, want %d under the local 3", i, w.Code, w.Header(), want)
		}
		// The denial's body names the limit it counted against, the local one.
		if want == 429 && !strings.Contains(w.Body.String(), `policy \"local\": 3 per 1m0s (sliding_window_log), this instance's share while the store is unavailable`) {
			t.Errorf("local denial body %s, want it to name the local limit", w.Body)
		}
	}
	for _, path := range []string{"/cached", "/uncached"} {
		for range 4 {
			if w := e.do(req{path: path}); w.Header().Get("Floodgate-Fallback") != "" {
				t.Fatalf("%s: a fallback header with the store up", path)
			}
		}
	}
	st := e.lim.Stats()
	if st.LocalFallback != 4 || st.Denied != 1+3+3 || st.StoreErrors != 4 || st.CacheHits != 2 {
		t.Errorf("stats %+v, want 4 local, 7 denied, 4 store errors, 2 cache hits", st)
	}
	if err := httplimitNew(httplimit.Rule{Name: "r", Limit: floodgate.PerMinute(9), Failure: httplimit.FailLocal, LocalShare: 2}); err == nil ||
		!strings.Contains(err.Error(), "Rules[0].LocalShare 2 is not a usable share of the limit") {
		t.Errorf("LocalShare 2: %v", err)
	}
	if err := httplimitNew(httplimit.Rule{Name: "r", Limit: floodgate.PerMinute(9), Failure: httplimit.FailOpen, LocalShare: 0.5}); err == nil ||
		!strings.Contains(err.Error(), "Rules[0].LocalShare 0.5 applies to FailLocal only") {
		t.Errorf("LocalShare without FailLocal: %v", err)
	}
}

func httplimitNew(r httplimit.Rule) error {
	_, err := httplimit.New(httplimit.Config{Store: memory.New(), Rules: []httplimit.Rule{r}})
	return err
}

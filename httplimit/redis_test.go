package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestFailureModesAgainstStoppedRedis runs the middleware on a real Redis
// that this test starts, then suspends (SIGSTOP: connections stay open and
// nothing answers, like a hung host), then kills (connections refused). A
// fail-open route keeps serving, a fail-closed one answers 503 with
// Retry-After, and each request returns once the store call's timeout ends.
func TestFailureModesAgainstStoppedRedis(t *testing.T) {
	srv := redistest.Spawn(t)
	store, err := redisstore.New(redisstore.Config{
		Addrs:     []string{srv.Addr},
		KeyPrefix: "httplimit-test:",
		Timeout:   5 * time.Second, // the middleware's own timeout must be the one that ends calls
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	var storeErrs atomic.Int64
	e := newEnv(t, httplimit.Config{
		Store:   store,
		Timeout: 100 * time.Millisecond,
		Rules: []httplimit.Rule{
			{Name: "public", Limit: floodgate.PerMinute(100), Paths: []string{"/public/"}},
			{Name: "login", Limit: floodgate.PerMinute(100), Paths: []string{"/login"}, Failure: httplimit.FailClosed},
		},
		OnStoreError: func(r *http.Request, rule string, err error) {
			if !errors.Is(err, floodgate.ErrStoreUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("store error %v matches neither ErrStoreUnavailable nor a deadline", err)
			}
			storeErrs.Add(1)
		},
	})

	check := func(phase string, path string, want int) {
		t.Helper()
		w := e.do(req{path: path})
		if w.Code != want {
			t.Errorf("%s: %s answered %d, want %d", phase, path, w.Code, want)
		}
		if want == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "5" {
			t.Errorf("%s: %s 503 without Retry-After: %v", phase, path, w.Header())
		}
		if want == http.StatusNoContent && phase == "up" {
			if rl := parseSF(t, w.Header(), "RateLimit"); len(rl) != 1 || rl[0].params["r"] != 99 {
				t.Errorf("%s: %s RateLimit %v, want r=99", phase, path, rl)
			}
		}
	}

	check("up", "/public/x", http.StatusNoContent)
	check("up", "/login", http.StatusNoContent)
	if storeErrs.Load() != 0 {
		t.Fatalf("%d store errors while Redis is up", storeErrs.Load())
	}

	srv.Stop(t)
	check("suspended", "/public/x", http.StatusNoContent)
	check("suspended", "/login", http.StatusServiceUnavailable)

	srv.Kill()
	check("killed", "/public/x", http.StatusNoContent)
	check("killed", "/login", http.StatusServiceUnavailable)

	if got := storeErrs.Load(); got != 4 {
		t.Errorf("%d store errors reported, want 4", got)
	}
	st := e.lim.Stats()
	if st.StoreErrors != 4 || st.Unavailable != 2 {
		t.Errorf("Stats %+v, want 4 store errors and 2 unavailable", st)
	}
	if got := e.served.Load(); got != 4 {
		t.Errorf("served %d, want 4 (2 up, 2 failed open)", got)
	}
}

// TestMultiRuleRefundConcurrentRedis is the concurrent refund test on a
// real Redis (on the test's manual clock, so windows do not move).
func TestMultiRuleRefundConcurrentRedis(t *testing.T) {
	srv := redistest.Spawn(t)
	testRefundConcurrent(t, func(t *testing.T, c floodgate.Clock) floodgate.Store {
		store, err := redisstore.New(redisstore.Config{
			Addrs:     []string{srv.Addr},
			KeyPrefix: t.Name() + ":",
			Timeout:   time.Minute, // 200 requests at once under -race on 2 busy cores
			Clock:     c,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		return store
	})
}

package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
)

// brokenStore wraps a store and breaks the calls for keys with one of the
// given prefixes: they fail at once, or (hang) wait for their context to end.
type brokenStore struct {
	floodgate.Store
	prefixes []string
	hang     bool

	mu        sync.Mutex
	deadlines []time.Duration // time left on each broken call's context
}

func (s *brokenStore) broken(ctx context.Context, key string) error {
	for _, p := range s.prefixes {
		if strings.HasPrefix(key, p) {
			dl, ok := ctx.Deadline()
			s.mu.Lock()
			if ok {
				s.deadlines = append(s.deadlines, time.Until(dl))
			} else {
				s.deadlines = append(s.deadlines, -1)
			}
			s.mu.Unlock()
			if s.hang {
				<-ctx.Done()
				return fmt.Errorf("%w: %w", floodgate.ErrStoreUnavailable, ctx.Err())
			}
			return fmt.Errorf("%w: connection refused", floodgate.ErrStoreUnavailable)
		}
	}
	return nil
}

func (s *brokenStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if err := s.broken(ctx, key); err != nil {
		return floodgate.Decision{}, err
	}
	return s.Store.AllowN(ctx, key, l, n)
}

func (s *brokenStore) RefundN(ctx context.Context, key string, l floodgate.Limit, n int64) error {
	if err := s.broken(ctx, key); err != nil {
		return err
	}
	return s.Store.RefundN(ctx, key, l, n)
}

func TestStoreFailureModes(t *testing.T) {
	tests := []struct {
		name     string
		mode     httplimit.FailureMode
		hang     bool
		wantCode int
	}{
		{"open, error", httplimit.FailOpen, false, http.StatusNoContent},
		{"open, hung store", httplimit.FailOpen, true, http.StatusNoContent},
		{"closed, error", httplimit.FailClosed, false, http.StatusServiceUnavailable},
		{"closed, hung store", httplimit.FailClosed, true, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1)}}})
			bs := &brokenStore{Store: base.store, prefixes: []string{"broken|"}, hang: tt.hang}
			var hooked []string
			e := newEnv(t, httplimit.Config{
				Store:   bs,
				Timeout: 20 * time.Millisecond,
				Rules: []httplimit.Rule{
					{Name: "ok", Limit: floodgate.PerMinute(10)},
					{Name: "broken", Limit: floodgate.PerMinute(10), Failure: tt.mode},
				},
				OnStoreError: func(r *http.Request, rule string, err error) {
					if !errors.Is(err, floodgate.ErrStoreUnavailable) {
						t.Errorf("hook error %v does not match ErrStoreUnavailable", err)
					}
					hooked = append(hooked, rule)
				},
			})
			e.store = base.store
			for range 3 {
				w := e.do(req{})
				if w.Code != tt.wantCode {
					t.Fatalf("code %d, want %d", w.Code, tt.wantCode)
				}
				if tt.mode == httplimit.FailClosed {
					if got := w.Header().Get("Retry-After"); got != "5" {
						t.Errorf("Retry-After %q, want 5", got)
					}
					if got := w.Header().Get("Content-Type"); got != "application/problem+json" {
						t.Errorf("Content-Type %q", got)
					}
				} else {
					// The failed rule is listed; RateLimit describes the
					// rule that decided.
					if p := parseSF(t, w.Header(), "RateLimit-Policy"); len(p) != 2 {
						t.Errorf("policy %v", p)
					}
					if rl := parseSF(t, w.Header(), "RateLimit"); len(rl) != 1 || rl[0].name != "ok" {
						t.Errorf("RateLimit %v", rl)
					}
				}
			}
			if fmt.Sprint(hooked) != "[broken broken broken]" {
				t.Errorf("hook calls %v", hooked)
			}
			st := e.lim.Stats()
			wantUnavail := uint64(0)
			if tt.mode == httplimit.FailClosed {
				wantUnavail = 3
			}
			if st.StoreErrors != 3 || st.Unavailable != wantUnavail {
				t.Errorf("Stats %+v", st)
			}
			// Every store call had a deadline within the timeout.
			for _, left := range bs.deadlines {
				if left < 0 || left > 20*time.Millisecond {
					t.Errorf("store call had %v left on its context, want a deadline within 20ms", left)
				}
			}
			// A fail-closed rule's 503 gave back what the rule before it
			// took: the "ok" rule has its whole quota.
			want := int64(7)
			if tt.mode == httplimit.FailClosed {
				want = 10
			}
			if got := remainingIn(t, base.store, "ok|192.0.2.1", floodgate.PerMinute(10)); got != want {
				t.Errorf("ok rule has %d left, want %d", got, want)
			}
		})
	}
}

func TestRefundFailureIsReported(t *testing.T) {
	base := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1)}}})
	var hooked []error
	e := newEnv(t, httplimit.Config{
		Store: refundFails{Store: base.store},
		Rules: []httplimit.Rule{
			{Name: "first", Limit: floodgate.PerMinute(10)},
			{Name: "second", Limit: floodgate.PerMinute(1), Key: constKey("all")},
		},
		OnStoreError: func(r *http.Request, rule string, err error) { hooked = append(hooked, err) },
	})
	e.do(req{})
	if w := e.do(req{}); w.Code != http.StatusTooManyRequests {
		t.Fatalf("code %d", w.Code)
	}
	if len(hooked) != 1 || !strings.Contains(hooked[0].Error(), "refund") || !errors.Is(hooked[0], floodgate.ErrStoreUnavailable) {
		t.Errorf("hook %v", hooked)
	}
	if st := e.lim.Stats(); st.StoreErrors != 1 || st.Denied != 1 {
		t.Errorf("stats %+v", st)
	}
}

type refundFails struct{ floodgate.Store }

func (refundFails) RefundN(context.Context, string, floodgate.Limit, int64) error {
	return floodgate.ErrStoreUnavailable
}

// countingHandler is a slog.Handler that keeps its records.
type countingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}

func (h *countingHandler) attrs(i int) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[string]string{}
	h.records[i].Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

func TestFailureLogOncePerInterval(t *testing.T) {
	base := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1)}}})
	logs := &countingHandler{}
	e := newEnv(t, httplimit.Config{
		Store:       &brokenStore{Store: base.store, prefixes: []string{"r|"}},
		Logger:      slog.New(logs),
		LogInterval: 10 * time.Second,
		Rules:       []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(10)}},
	})
	for range 50 {
		e.do(req{})
	}
	if len(logs.records) != 1 {
		t.Fatalf("%d log lines for 50 failures in one interval, want 1", len(logs.records))
	}
	a := logs.attrs(0)
	if a["rule"] != "r" || a["failure_mode"] != "open" || a["suppressed"] != "0" || !strings.Contains(a["error"], "connection refused") {
		t.Errorf("first line %v", a)
	}
	e.clock.Advance(9 * time.Second)
	e.do(req{})
	if len(logs.records) != 1 {
		t.Fatalf("logged again after 9s")
	}
	e.clock.Advance(time.Second)
	e.do(req{})
	if len(logs.records) != 2 {
		t.Fatalf("%d lines after the interval, want 2", len(logs.records))
	}
	if got := logs.attrs(1)["suppressed"]; got != "50" {
		t.Errorf("second line counts %s suppressed failures, want 50", got)
	}
	if got := e.lim.Stats().StoreErrors; got != 52 {
		t.Errorf("StoreErrors %d, want 52", got)
	}
}

// TestClientGoneIsNotAStoreError checks that a request whose client went
// away (its context cancelled) is not counted or logged as a store failure.
func TestClientGoneIsNotAStoreError(t *testing.T) {
	base := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1)}}})
	e := newEnv(t, httplimit.Config{
		Store: &brokenStore{Store: base.store, prefixes: []string{"r|"}, hang: true},
		Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(10)}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	e.h.ServeHTTP(newDiscardWriter(), r)
	if st := e.lim.Stats(); st.StoreErrors != 0 {
		t.Errorf("Stats %+v", st)
	}
}

type discardWriter struct{ h http.Header }

func newDiscardWriter() *discardWriter               { return &discardWriter{h: http.Header{}} }
func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// scriptErrorStore fails every call with an error that is not an outage, as
// the Redis store's ErrScript is.
type scriptErrorStore struct{ floodgate.Store }

var errScript = errors.New("redisstore: script: reply is not an array")

func (scriptErrorStore) AllowN(context.Context, string, floodgate.Limit, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, errScript
}

// TestStoreErrorNeverAdmits: a store error that is not an outage is never
// let through, whatever the rule's failure mode; it is answered 500, or by
// the ErrorHandler.
func TestStoreErrorNeverAdmits(t *testing.T) {
	for _, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			base := newEnv(t, httplimit.Config{Rules: []httplimit.Rule{{Name: "x", Limit: floodgate.PerMinute(1)}}})
			e := newEnv(t, httplimit.Config{
				Store: scriptErrorStore{base.store},
				Rules: []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(1), Failure: mode}},
			})
			for i := range 3 {
				w := e.do(req{})
				if w.Code != http.StatusInternalServerError || w.Header().Get("Content-Type") != "application/problem+json" {
					t.Fatalf("request %d: %d %q, want a 500 problem", i, w.Code, w.Header().Get("Content-Type"))
				}
			}
			if st := e.lim.Stats(); st.StoreErrors != 3 {
				t.Errorf("Stats %+v, want 3 store errors", st)
			}
			var got error
			e = newEnv(t, httplimit.Config{
				Store:        scriptErrorStore{base.store},
				Rules:        []httplimit.Rule{{Name: "r", Limit: floodgate.PerMinute(1), Failure: mode}},
				ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) { got = err; w.WriteHeader(http.StatusTeapot) },
			})
			if w := e.do(req{}); w.Code != http.StatusTeapot || !errors.Is(got, errScript) {
				t.Errorf("ErrorHandler: code %d err %v", w.Code, got)
			}
		})
	}
}

package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// benchWriter is a ResponseWriter that keeps nothing, so benchmarks count
// the middleware's allocations, not a recorder's.
type benchWriter struct{ h http.Header }

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(int)             {}

// benchLimit never runs out during a benchmark (a bucket of 10,000 tokens
// refilled at 10,000 per millisecond, far faster than requests come), and
// its figures have the few digits of a real limit's headers.
var benchLimit = floodgate.NewTokenBucket(10_000, 10_000, time.Millisecond)

// BenchmarkMiddleware measures the middleware's own cost per request with
// the memory store, against the same handler bare, in one run:
//
//	go test -run '^$' -bench Middleware -benchmem ./httplimit
//
// The store call alone is measured too (store-only), so the middleware's
// overhead is the difference between a limited case and bare, of which
// store-only is the store's part.
func BenchmarkMiddleware(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	newLim := func(b *testing.B, cfg httplimit.Config) http.Handler {
		cfg.Store = memory.New()
		lim, err := httplimit.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return lim.Handler(handler)
	}
	oneRule := []httplimit.Rule{{Name: "per-ip", Limit: benchLimit}}
	threeRules := []httplimit.Rule{
		{Name: "per-ip", Limit: benchLimit},
		{Name: "per-key", Limit: benchLimit, Key: httplimit.Header("X-API-Key")},
		{Name: "api", Limit: benchLimit, Paths: []string{"/api/"}, Methods: []string{"GET"}},
	}
	cases := []struct {
		name string
		h    http.Handler
	}{
		{"bare", handler},
		{"skipped", newLim(b, httplimit.Config{Rules: oneRule, Skip: func(*http.Request) bool { return true }})},
		{"1-rule", newLim(b, httplimit.Config{Rules: oneRule})},
		{"1-rule-deadline", newLim(b, httplimit.Config{Rules: oneRule, Timeout: 50 * time.Millisecond})},
		{"1-rule-no-headers", newLim(b, httplimit.Config{Rules: oneRule, Headers: httplimit.HeadersNone})},
		{"3-rules", newLim(b, httplimit.Config{Rules: threeRules})},
		{"denied", newLim(b, httplimit.Config{Rules: []httplimit.Rule{{Name: "none", Limit: floodgate.PerHour(1)}}})},
	}
	newReq := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://api.example/api/items", nil)
		r.RemoteAddr = "203.0.113.7:51234"
		r.Header.Set("X-API-Key", "key-0123456789")
		return r
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := newReq()
			w := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				clear(w.h)
				c.h.ServeHTTP(w, r)
			}
			reportCPU(b, start)
		})
	}
	b.Run("1-rule-parallel", func(b *testing.B) {
		h := newLim(b, httplimit.Config{Rules: oneRule})
		b.ReportAllocs()
		start := cpuTime(b)
		b.RunParallel(func(pb *testing.PB) {
			r := newReq()
			w := &benchWriter{h: http.Header{}}
			for pb.Next() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
		})
		reportCPU(b, start)
	})
	b.Run("store-only", func(b *testing.B) {
		s := memory.New()
		ctx := context.Background()
		b.ReportAllocs()
		start := cpuTime(b)
		for b.Loop() {
			if _, err := s.Allow(ctx, "per-ip:203.0.113.7", benchLimit); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, start)
	})
}

// cpuTime returns the CPU time the process has used. On a shared machine,
// where other processes stretch wall time, CPU time per operation is the
// steadier figure.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per operation since start
// (garbage collection included) as cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

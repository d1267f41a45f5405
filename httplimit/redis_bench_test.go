package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// BenchmarkMiddlewareRedis measures a request's latency through the
// middleware on a real standalone Redis, with one rule and with three rules
// that all apply (decided in one round trip as a batch), interleaved in one
// run, and reports the p50 and p99:
//
//	make redis-up && eval "$(scripts/redis-harness.sh env)"
//	go test -run '^$' -bench MiddlewareRedis -benchtime 20000x -count 5 ./httplimit
func BenchmarkMiddlewareRedis(b *testing.B) {
	addr := redistest.StandaloneAddr(b)
	store, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, KeyPrefix: "bench-mw-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	lim := func(rules []httplimit.Rule) http.Handler {
		l, err := httplimit.New(httplimit.Config{Store: store, Rules: rules})
		if err != nil {
			b.Fatal(err)
		}
		return l.Handler(handler)
	}
	// The keys of one request share a hash tag in the Redis store (they are
	// derived from one identity per rule), as the cluster needs for a single
	// Lua call; standalone takes one call whatever the keys.
	cases := []struct {
		name string
		h    http.Handler
	}{
		{"1-rule", lim([]httplimit.Rule{{Name: "per-ip", Limit: benchLimit}})},
		{"3-rules", lim([]httplimit.Rule{
			{Name: "per-ip", Limit: benchLimit},
			{Name: "per-key", Limit: benchLimit, Key: httplimit.Header("X-API-Key")},
			{Name: "per-ip-log", Limit: floodgate.PerSecond(1 << 20)},
		})},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "http://api.example/api/items", nil)
			r.RemoteAddr = "203.0.113.7:51234"
			r.Header.Set("X-API-Key", "key-0123456789")
			w := &benchWriter{h: http.Header{}}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				clear(w.h)
				start := time.Now()
				c.h.ServeHTTP(w, r)
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

package remotestore_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/server"
)

// BenchmarkStores measures decisions per second and latency of the remote
// store against the direct Redis store, on the harness's standalone Redis,
// in one run: "redis" is redisstore, "remote" is remotestore through a
// floodgate server (server.Handler with the store API, on a loopback HTTP
// listener in the same process) whose store is the same redisstore, and
// "remote-memory" the same server over its memory store (the HTTP hop
// alone), and "remote-constant" the remote store against a handler that
// answers one fixed decision (the floor of the hop). 10,000 random identities under a token bucket that admits most
// calls, at 1, 16 and 64 concurrent callers. Besides ns/op it reports
// decisions/s and p50-µs, p99-µs of one AllowN call. Run it with:
//
//	go test -run '^$' -bench Stores -benchtime 20000x -count 5 ./remotestore/
//
// -count repeats the whole benchmark, so the stores alternate round by
// round.
func BenchmarkStores(b *testing.B) {
	addr := redistest.StandaloneAddr(b)
	rs, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, KeyPrefix: fmt.Sprintf("fg-bench-remote-%d:", time.Now().UnixNano()), Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Close)
	remote := func(store floodgate.Store) floodgate.Store {
		srv, err := server.New(store, server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}})
		if err != nil {
			b.Fatal(err)
		}
		ts := httptest.NewServer(srv.Handler())
		b.Cleanup(ts.Close)
		s, err := remotestore.New(remotestore.Config{URL: ts.URL, Timeout: time.Second, MaxIdleConns: 128})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		return s
	}
	// The floor of the HTTP hop: the remote store against a handler that
	// answers one fixed decision.
	constant := func() floodgate.Store {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header()["Content-Type"] = []string{"application/json"}
			_, _ = io.WriteString(w, `{"allowed":true,"limit":100,"remaining":99,"retry_after_us":0,"reset_after_us":10000}`+"\n")
		}))
		b.Cleanup(ts.Close)
		s, err := remotestore.New(remotestore.Config{URL: ts.URL, Timeout: time.Second, MaxIdleConns: 128})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		return s
	}
	stores := []struct {
		name  string
		store floodgate.Store
	}{
		{"redis", rs},
		{"remote", remote(rs)},
		{"remote-memory", remote(memory.New())},
		{"remote-constant", constant()},
	}
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	l := floodgate.NewTokenBucket(100, 100, time.Second)
	for _, conc := range []int{1, 16, 64} {
		for _, s := range stores {
			b.Run(fmt.Sprintf("conc=%d/%s", conc, s.name), func(b *testing.B) {
				benchCalls(b, func(ctx context.Context, id string) error {
					_, err := s.store.AllowN(ctx, id, l, 1)
					return err
				}, ids, conc)
			})
		}
	}
}

// benchCalls runs b.N calls from conc goroutines on random identities and
// reports decisions/s, p50-µs and p99-µs.
func benchCalls(b *testing.B, call func(ctx context.Context, id string) error, ids []string, conc int) {
	ctx := context.Background()
	var next, failed atomic.Int64
	lat := make([][]time.Duration, conc)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 2))
			mine := make([]time.Duration, 0, b.N/conc+1)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := call(ctx, ids[r.IntN(len(ids))]); err != nil {
					failed.Add(1)
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls failed", n, b.N)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / 1e3 }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

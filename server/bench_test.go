package server_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
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
	"github.com/floodgate-rl/floodgate/server"
)

const benchConfig = `
rules:
  - name: api
    algorithm: token_bucket
    capacity: 1000
    refill: 100/s
  - name: log
    algorithm: sliding_window_log
    limit: 100
    window: 1m
`

// BenchmarkCheckHTTP measures POST /v1/check end to end: an HTTP client on
// loopback, the server, and its store (memory, standalone Redis, cluster),
// at concurrency 64 over 10,000 keys. It reports requests/s and latency
// percentiles. Run with:
//
//	make redis-up && go test ./server -run '^$' -bench CheckHTTP -benchtime 20000x
func BenchmarkCheckHTTP(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) floodgate.Store
	}{
		{"memory", func(*testing.B) floodgate.Store { return memory.New() }},
		{"redis", func(b *testing.B) floodgate.Store {
			return openRedis(b, redisstore.Config{Addrs: []string{redistest.StandaloneAddr(b)}, Mode: redisstore.ModeStandalone})
		}},
		{"cluster", func(b *testing.B) floodgate.Store {
			return openRedis(b, redisstore.Config{Addrs: redistest.ClusterAddrs(b), Mode: redisstore.ModeCluster})
		}},
	}
	policy := policyOf(b, benchConfig)
	bodies := make([][]byte, 10_000)
	for i := range bodies {
		bodies[i] = []byte(`{"rule":"api","key":"user-` + strconv.Itoa(i) + `"}`)
	}
	for _, s := range stores {
		b.Run(s.name+"/conc64", func(b *testing.B) {
			srv, err := server.New(s.open(b), policy, server.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
			const workers = 64
			var next atomic.Int64
			lat := make([][]time.Duration, workers)
			var failed atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						t0 := time.Now()
						resp, err := client.Post(ts.URL+"/v1/check", "application/json", bytes.NewReader(bodies[i%int64(len(bodies))]))
						if err != nil {
							failed.Add(1)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 && resp.StatusCode != 429 {
							failed.Add(1)
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d requests failed", n)
			}
			all := slices.Concat(lat...)
			slices.Sort(all)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		})
	}
}

func openRedis(b *testing.B, cfg redisstore.Config) floodgate.Store {
	var r [6]byte
	_, _ = rand.Read(r[:])
	cfg.KeyPrefix = "fgbench-" + hex.EncodeToString(r[:]) + ":"
	cfg.Timeout = time.Second
	s, err := redisstore.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

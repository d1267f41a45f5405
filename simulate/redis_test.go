package simulate_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/simulate"
)

// TestRedisMatchesMemory runs the same simulation through the memory store
// and the Redis store (standalone, cluster and Sentinel, from
// scripts/redis-harness.sh up; skipped when they do not answer): every decision must be the same, so
// every figure but memory is equal. It also checks that the Redis backend
// measures memory and leaves no key behind.
func TestRedisMatchesMemory(t *testing.T) {
	cfg := simulate.Config{Limit: 10, Window: 10 * time.Second, Duration: 20 * time.Second, Seed: 5}
	want := run(t, cfg)
	tests := []struct {
		store string
		opts  func(testing.TB) simulate.RedisOptions
	}{
		{"redis", func(t testing.TB) simulate.RedisOptions {
			return simulate.RedisOptions{Addrs: []string{redistest.StandaloneAddr(t)}}
		}},
		{"redis-cluster", func(t testing.TB) simulate.RedisOptions {
			return simulate.RedisOptions{Addrs: redistest.ClusterAddrs(t), Cluster: true}
		}},
		{"redis-sentinel", func(t testing.TB) simulate.RedisOptions {
			sentinels, master := redistest.SentinelAddrs(t)
			return simulate.RedisOptions{Addrs: sentinels, SentinelMaster: master}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.store, func(t *testing.T) {
			ctx := context.Background()
			opts := tt.opts(t)
			opts.KeyPrefix = "fgsim-test:" + t.Name() + ":" + time.Now().Format("150405.000000") + ":"
			b, err := simulate.NewRedisBackend(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			got, err := simulate.Run(ctx, cfg, b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Store != tt.store {
				t.Errorf("store = %q, want %q", got.Store, tt.store)
			}
			if len(got.Results) != len(want.Results) {
				t.Fatalf("%d results, want %d", len(got.Results), len(want.Results))
			}
			mem := map[floodgate.Algorithm]int64{}
			for i, g := range got.Results {
				w := want.Results[i]
				if g.MemoryPerKey <= 0 {
					t.Errorf("%s/%s: MEMORY USAGE gave %d", g.Pattern, g.Algorithm, g.MemoryPerKey)
				}
				mem[g.Algorithm] = max(mem[g.Algorithm], g.MemoryPerKey)
				g.MemoryPerKey, w.MemoryPerKey = 0, 0
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s/%s on Redis differs from the memory store:\n got %+v\nwant %+v", g.Pattern, g.Algorithm, g, w)
				}
			}
			if mem[floodgate.SlidingWindowLog] <= mem[floodgate.TokenBucket] {
				t.Errorf("log's memory %d is not above the bucket's %d", mem[floodgate.SlidingWindowLog], mem[floodgate.TokenBucket])
			}
			assertNoKeys(t, opts)
		})
	}
}

// assertNoKeys fails t if any key starting with o.KeyPrefix is left on any
// node.
func assertNoKeys(t *testing.T, o simulate.RedisOptions) {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: o.Addrs, ForceSingleClient: !o.Cluster && o.SentinelMaster == "", DisableCache: true}
	if o.SentinelMaster != "" {
		opt.Sentinel = rueidis.SentinelOption{MasterSet: o.SentinelMaster}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(o.KeyPrefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Elements) > 0 {
				t.Errorf("keys left behind: %v", e.Elements)
				return
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
}

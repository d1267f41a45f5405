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
// and the Redis store (standalone and cluster, from scripts/redis-harness.sh
// up; skipped when they do not answer): every decision must be the same, so
// every figure but memory is equal. It also checks that the Redis backend
// measures memory and leaves no key behind.
func TestRedisMatchesMemory(t *testing.T) {
	cfg := simulate.Config{Limit: 10, Window: 10 * time.Second, Duration: 20 * time.Second, Seed: 5}
	want := run(t, cfg)
	tests := []struct {
		name    string
		cluster bool
		addrs   func(testing.TB) []string
	}{
		{"standalone", false, func(t testing.TB) []string { return []string{redistest.StandaloneAddr(t)} }},
		{"cluster", true, redistest.ClusterAddrs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			addrs := tt.addrs(t)
			prefix := "fgsim-test:" + t.Name() + ":" + time.Now().Format("150405.000000") + ":"
			b, err := simulate.NewRedisBackend(ctx, simulate.RedisOptions{Addrs: addrs, Cluster: tt.cluster, KeyPrefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			got, err := simulate.Run(ctx, cfg, b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Store != map[bool]string{false: "redis", true: "redis-cluster"}[tt.cluster] {
				t.Errorf("store = %q", got.Store)
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
			assertNoKeys(t, addrs, tt.cluster, prefix)
		})
	}
}

// assertNoKeys fails t if any key starting with prefix is left on any node.
func assertNoKeys(t *testing.T, addrs []string, cluster bool, prefix string) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, ForceSingleClient: !cluster, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
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

package envoy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// The same suites against the shared Redis harness (scripts/redis-harness.sh
// up): the standalone server and the cluster. Each subtest uses a key prefix
// of its own and deletes its keys when it ends.

func TestSemanticsRedis(t *testing.T) {
	onRedis(t, func(t *testing.T, addrs []string) {
		runSemantics(t, func(t *testing.T) (floodgate.Store, bool) {
			return redisStore(t, addrs, nil), false // Redis TIME: durations known to be in range only
		})
	})
}

func TestTestdataBehavesRedis(t *testing.T) {
	onRedis(t, func(t *testing.T, addrs []string) {
		runTestdata(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
			return redisStore(t, addrs, clock)
		})
	})
}

// onRedis runs f against the harness's standalone server and its cluster.
func onRedis(t *testing.T, f func(t *testing.T, addrs []string)) {
	t.Run("standalone", func(t *testing.T) { f(t, []string{redistest.StandaloneAddr(t)}) })
	t.Run("cluster", func(t *testing.T) { f(t, redistest.ClusterAddrs(t)) })
}

// redisStore opens a Redis store on addrs with a key prefix of its own
// (deciding at clock's time, or Redis TIME when clock is nil), and removes
// its keys and closes it when t ends.
func redisStore(t testing.TB, addrs []string, clock floodgate.Clock) floodgate.Store {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "fgtest:envoy:" + hex.EncodeToString(b[:]) + ":"
	mode := redisstore.ModeStandalone
	if len(addrs) > 1 {
		mode = redisstore.ModeCluster
	}
	s, err := redisstore.New(redisstore.Config{Addrs: addrs, Mode: mode, KeyPrefix: prefix, Timeout: 5 * time.Second, Clock: clock})
	if err != nil {
		t.Fatalf("redisstore.New(%v): %v", addrs, err)
	}
	t.Cleanup(func() {
		s.Close()
		deleteKeys(t, addrs, prefix)
	})
	return s
}

// deleteKeys deletes the keys that start with prefix on every node.
func deleteKeys(t testing.TB, addrs []string, prefix string) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Errorf("cleanup: connecting to %v: %v", addrs, err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			entry, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Errorf("cleanup: SCAN: %v", err)
				return
			}
			for _, k := range entry.Elements {
				if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
					t.Errorf("cleanup: DEL %s: %v", k, err)
				}
			}
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
}

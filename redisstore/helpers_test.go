package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// Parallel tests: those that spend seconds of real time (a 15s hang, a
// failover, a timed load) on servers spawned for them, or on keys of their
// own on the harness, call t.Parallel, so that their waits overlap (go test
// runs them after the package's serial tests, -parallel at a time:
// GOMAXPROCS by default). Their bounds on a call's time are loose
// (hangMargin). Tests with tight ones (blockingBound) stay serial, and so
// never overlap them.

// testTimeout is the per-call timeout of stores in functional tests: long
// enough that a loaded 2-core machine running tests under -race never hits
// it. The timeout tests set their own.
const testTimeout = 5 * time.Second

// uniquePrefix returns a key prefix no other test, run or package uses, so
// tests can share the harness servers without touching each other's keys.
func uniquePrefix(t testing.TB) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "fgtest:" + hex.EncodeToString(b[:]) + ":"
}

// newClient connects to addrs (a single server or cluster nodes) as New
// does, and closes the client when t ends.
func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableRetry: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connecting to %v: %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// testStore returns a store on client with a key prefix of its own, reading
// time from clock (nil: Redis TIME).
func testStore(t testing.TB, client rueidis.Client, clock floodgate.Clock) *Store {
	t.Helper()
	s, err := NewFromClient(client, Config{KeyPrefix: uniquePrefix(t), Timeout: testTimeout, Clock: clock})
	if err != nil {
		t.Fatalf("NewFromClient: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// onBackends runs f in two subtests: on a client of the harness's
// standalone server, and on one of its cluster.
func onBackends(t *testing.T, f func(t *testing.T, client rueidis.Client)) {
	t.Run("standalone", func(t *testing.T) { f(t, newClient(t, redistest.StandaloneAddr(t))) })
	t.Run("cluster", func(t *testing.T) { f(t, newClient(t, redistest.ClusterAddrs(t)...)) })
}

// do runs a command without keys on client (on any node of a cluster) and
// fails t on error.
func do(t testing.TB, client rueidis.Client, args ...string) rueidis.RedisResult {
	t.Helper()
	return doCmd(t, client, client.B().Arbitrary(args...).Build())
}

// doKey runs cmd key args... on client (on key's node of a cluster) and
// fails t on error. cmd may have several words, such as "MEMORY USAGE".
func doKey(t testing.TB, client rueidis.Client, cmd, key string, args ...string) rueidis.RedisResult {
	t.Helper()
	return doCmd(t, client, client.B().Arbitrary(strings.Fields(cmd)...).Keys(key).Args(args...).Build())
}

func doCmd(t testing.TB, client rueidis.Client, cmd rueidis.Completed) rueidis.RedisResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := client.Do(ctx, cmd)
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%v: %v", cmd.Commands(), err)
	}
	return res
}

// infoField returns the integer after name in the line of an INFO reply
// that starts with line (or 0): infoField(info, "cmdstat_eval:", "calls=").
func infoField(info, line, name string) int64 {
	for l := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(l, line); ok {
			if _, v, ok := strings.Cut(rest, name); ok {
				v, _, _ = strings.Cut(v, ",")
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}

// infoFloat returns the number after the line prefix name in an INFO reply
// (or 0): infoFloat(info, "used_cpu_user:").
func infoFloat(info, name string) float64 {
	for l := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(l, name); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// spawnClusterStore spawns a 3+3 cluster for t and a store on it with
// timeout, closed at t's end.
func spawnClusterStore(t *testing.T, timeout time.Duration) (*redistest.SpawnedCluster, *Store) {
	t.Helper()
	cluster := redistest.SpawnClusterWithReplicas(t, 3)
	s, err := New(Config{Addrs: cluster.Addrs(), Mode: ModeCluster, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return cluster, s
}

// idOn returns the first identity prefix+N whose key for alg lives on
// node's slots.
func idOn(s *Store, cluster *redistest.SpawnedCluster, node *redistest.SpawnedServer, prefix string, alg floodgate.Algorithm) string {
	for j := 0; ; j++ {
		if id := prefix + strconv.Itoa(j); cluster.NodeForSlot(keySlot(s.Key(id, alg))) == node {
			return id
		}
	}
}

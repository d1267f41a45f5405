// Package redistest gives tests the Redis servers they run against.
//
// The shared servers come from scripts/redis-harness.sh: a standalone
// server, a 6-node Redis Cluster (3 primaries, 3 replicas) and a Sentinel
// setup. StandaloneAddr, ClusterAddrs and SentinelAddrs return their
// addresses, read from the environment variables that
// `scripts/redis-harness.sh env` prints, or the harness's default ports when
// those are unset. When the servers do not answer, the test is skipped, or
// failed if FLOODGATE_REQUIRE_REDIS=1 (as `make test` and CI set it).
//
// Tests that need to stop, kill or reconfigure a server must not touch the
// shared ones: Spawn and SpawnCluster start throwaway servers of their own.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// The environment variables that `scripts/redis-harness.sh env` exports, and
// the harness's default for each.
const (
	envStandalone    = "FLOODGATE_REDIS_ADDR"
	envCluster       = "FLOODGATE_REDIS_CLUSTER_ADDRS"
	envSentinels     = "FLOODGATE_REDIS_SENTINEL_ADDRS"
	envSentinelName  = "FLOODGATE_REDIS_SENTINEL_MASTER"
	envSentinelData  = "FLOODGATE_REDIS_SENTINEL_DATA_ADDRS"
	envRequire       = "FLOODGATE_REQUIRE_REDIS"
	defStandalone    = "127.0.0.1:16379"
	defCluster       = "127.0.0.1:17000,127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005"
	defSentinels     = "127.0.0.1:26380"
	defSentinelName  = "floodgate"
	defSentinelData  = "127.0.0.1:16380,127.0.0.1:16381"
	harnessPingLimit = 2 * time.Second
)

// StandaloneAddr returns the address of the harness's standalone Redis
// server ($FLOODGATE_REDIS_ADDR, default 127.0.0.1:16379), after checking
// that it answers PING; otherwise it skips t, or fails it when
// FLOODGATE_REQUIRE_REDIS=1.
func StandaloneAddr(t testing.TB) string {
	t.Helper()
	addrs := harnessAddrs(t, "standalone server", envStandalone, defStandalone)
	if len(addrs) != 1 {
		t.Fatalf("redistest: %s=%q: want exactly one address", envStandalone, os.Getenv(envStandalone))
	}
	return addrs[0]
}

// ClusterAddrs returns the addresses of every node of the harness's Redis
// Cluster ($FLOODGATE_REDIS_CLUSTER_ADDRS, comma-separated, default
// 127.0.0.1:17000 to 127.0.0.1:17005), after checking that each answers
// PING; otherwise it skips t, or fails it when FLOODGATE_REQUIRE_REDIS=1.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	return harnessAddrs(t, "cluster", envCluster, defCluster)
}

// SentinelAddrs returns the addresses of the harness's sentinels
// ($FLOODGATE_REDIS_SENTINEL_ADDRS, default 127.0.0.1:26380) and the name of
// the master they monitor ($FLOODGATE_REDIS_SENTINEL_MASTER, default
// "floodgate"), after checking that each sentinel answers PING; otherwise it
// skips t, or fails it when FLOODGATE_REQUIRE_REDIS=1.
func SentinelAddrs(t testing.TB) (sentinels []string, master string) {
	t.Helper()
	sentinels = harnessAddrs(t, "sentinel", envSentinels, defSentinels)
	master = os.Getenv(envSentinelName)
	if master == "" {
		master = defSentinelName
	}
	return sentinels, master
}

// SentinelDataAddrs returns the addresses of the data servers behind the
// harness's sentinels, the initial primary first
// ($FLOODGATE_REDIS_SENTINEL_DATA_ADDRS, default 127.0.0.1:16380 and
// 127.0.0.1:16381), after checking that each answers PING; otherwise it
// skips t, or fails it when FLOODGATE_REQUIRE_REDIS=1.
func SentinelDataAddrs(t testing.TB) []string {
	t.Helper()
	return harnessAddrs(t, "sentinel data server", envSentinelData, defSentinelData)
}

// harnessAddrs reads the comma-separated addresses in env (def when unset)
// and checks that each answers PING, skipping or failing t if one does not.
func harnessAddrs(t testing.TB, what, env, def string) []string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	var addrs []string
	for _, a := range strings.Split(raw, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("redistest: %s=%q holds no address", env, raw)
	}
	for _, a := range addrs {
		if err := harnessPing(a); err != nil {
			msg := fmt.Sprintf("redistest: Redis %s at %s does not answer (%v); "+
				"run `scripts/redis-harness.sh up` (or `make redis-up`) to start the test servers, "+
				"and `eval \"$(scripts/redis-harness.sh env)\"` if they are not on the default ports (%s)", what, a, err, env)
			if os.Getenv(envRequire) == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return addrs
}

// harnessPing sends a RESP PING to addr on a fresh connection and expects
// +PONG, all within harnessPingLimit.
func harnessPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, harnessPingLimit)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(harnessPingLimit)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimRight(line, "\r\n"))
	}
	return nil
}

package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

func TestSpawnStopContKill(t *testing.T) {
	s := Spawn(t)
	if err := harnessPing(s.Addr); err != nil {
		t.Fatalf("PING a fresh server: %v", err)
	}
	s.Stop(t)
	if err := harnessPing(s.Addr); err == nil {
		t.Fatal("a stopped server answered PING")
	}
	s.Cont(t)
	if err := harnessPing(s.Addr); err != nil {
		t.Fatalf("PING after SIGCONT: %v", err)
	}
	if got, err := s.Do(t, "SET", "k", "v").ToString(); err != nil || got != "OK" {
		t.Fatalf("SET = %q, %v", got, err)
	}
	s.Kill()
	s.Kill() // idempotent
	if err := harnessPing(s.Addr); err == nil {
		t.Fatal("a killed server answered PING")
	}
}

func TestSpawnExtraArgs(t *testing.T) {
	s := Spawn(t, "--zset-max-listpack-entries", "7")
	got, err := s.Do(t, "CONFIG", "GET", "zset-max-listpack-entries").AsStrMap()
	if err != nil || got["zset-max-listpack-entries"] != "7" {
		t.Fatalf("CONFIG GET = %q, %v; want the extra argument applied", got, err)
	}
}

func TestSpawnCluster(t *testing.T) {
	c := SpawnCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs() = %v", c.Addrs())
	}
	for _, n := range c.Nodes {
		info, err := n.Do(t, "CLUSTER", "INFO").ToString()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("CLUSTER INFO on %s = %q, %v", n.Addr, info, err)
		}
	}
	// NodeForSlot agrees with the cluster's own slot map.
	ranges, err := c.Nodes[0].Do(t, "CLUSTER", "SLOTS").ToArray()
	if err != nil || len(ranges) != 3 {
		t.Fatalf("CLUSTER SLOTS = %d ranges, %v; want 3", len(ranges), err)
	}
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			t.Fatalf("CLUSTER SLOTS entry %v: %v", r, err)
		}
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		owner, _ := f[2].ToArray()
		port, _ := owner[1].AsInt64()
		for _, slot := range []int64{lo, hi} {
			if got := c.NodeForSlot(int(slot)).Port; int64(got) != port {
				t.Errorf("NodeForSlot(%d) has port %d, CLUSTER SLOTS says %d", slot, got, port)
			}
		}
	}
	const key = "foo" // CLUSTER KEYSLOT foo = 12182
	if err := c.NodeForSlot(12182).Do(t, "SET", key, "1").Error(); err != nil {
		t.Fatalf("SET on the owner of slot 12182: %v", err)
	}
	if err := c.NodeForSlot(0).Do(t, "SET", key, "1").Error(); err == nil || !strings.HasPrefix(err.Error(), "MOVED 12182") {
		t.Fatalf("SET on another node = %v, want MOVED 12182", err)
	}
}

func TestDelayProxy(t *testing.T) {
	s := Spawn(t)
	const oneWay = 2 * time.Millisecond
	addr := DelayProxy(t, s.Addr, oneWay)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := range 3 {
		start := time.Now()
		if err := c.Do(ctx, c.B().Set().Key("k").Value(strconv.Itoa(i)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		// A lower bound only: the proxy holds each way at least oneWay.
		if rtt := time.Since(start); rtt < 2*oneWay {
			t.Fatalf("round trip through the proxy took %s, want at least %s", rtt, 2*oneWay)
		}
	}
	if got, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString(); err != nil || got != "2" {
		t.Fatalf("GET k = %q, %v; want 2", got, err)
	}
}

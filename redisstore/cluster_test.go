package redisstore

import (
	"fmt"
	"math"
	"testing"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// keySlots asks the cluster for CLUSTER KEYSLOT of every key, pipelined.
func keySlots(t *testing.T, client rueidis.Client, keys []string) []int64 {
	t.Helper()
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = client.B().ClusterKeyslot().Key(k).Build()
	}
	slots := make([]int64, len(keys))
	for i, res := range client.DoMulti(t.Context(), cmds...) {
		n, err := res.AsInt64()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", keys[i], err)
		}
		slots[i] = n
	}
	return slots
}

// TestClusterKeySlot: Redis agrees that all keys of one identity, hostile
// identities included, hash to one slot, and that slot is the one computed
// from the key's tag.
func TestClusterKeySlot(t *testing.T) {
	client := newClient(t, redistest.ClusterAddrs(t)...)
	var keys []string
	ids := identities()
	for _, id := range ids {
		for _, a := range algorithmlist.All() {
			keys = append(keys, Key(DefaultKeyPrefix, id, a))
		}
	}
	slots := keySlots(t, client, keys)
	per := len(algorithmlist.All())
	for i, id := range ids {
		for j := range per {
			k, slot := keys[i*per+j], slots[i*per+j]
			if slot != slots[i*per] {
				t.Errorf("identity %q (%d bytes): key %q in slot %d, key %q in slot %d", short(id), len(id), keys[i*per], slots[i*per], k, slot)
			}
			if want := int64(keySlot(k)); slot != want {
				t.Errorf("CLUSTER KEYSLOT %q = %d, computed %d", k, slot, want)
			}
		}
	}
}

func short(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// shardRanges returns, for each primary of the cluster, its slot ranges,
// from CLUSTER SHARDS.
func shardRanges(t *testing.T, client rueidis.Client) map[string][][2]int64 {
	t.Helper()
	shards, err := do(t, client, "CLUSTER", "SHARDS").ToArray()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	out := map[string][][2]int64{}
	for _, sh := range shards {
		m, err := sh.AsMap()
		if err != nil {
			t.Fatalf("CLUSTER SHARDS entry: %v", err)
		}
		slotsMsg := m["slots"]
		bounds, err := slotsMsg.AsIntSlice()
		if err != nil || len(bounds)%2 != 0 {
			t.Fatalf("CLUSTER SHARDS slots %v: %v", bounds, err)
		}
		nodesMsg := m["nodes"]
		nodes, _ := nodesMsg.ToArray()
		primary := ""
		for _, n := range nodes {
			nm, _ := n.AsMap()
			role, port := nm["role"], nm["port"]
			if r, _ := role.ToString(); r == "master" {
				port, _ := port.AsInt64()
				primary = fmt.Sprintf("port %d", port)
			}
		}
		for i := 0; i < len(bounds); i += 2 {
			out[primary] = append(out[primary], [2]int64{bounds[i], bounds[i+1]})
		}
	}
	return out
}

// TestClusterSpread: 10,000 identities spread over the primaries, each
// holding a third of them within 5 percentage points.
func TestClusterSpread(t *testing.T) {
	client := newClient(t, redistest.ClusterAddrs(t)...)
	ranges := shardRanges(t, client)
	if len(ranges) != 3 {
		t.Fatalf("CLUSTER SHARDS lists %d primaries with slots, want 3: %v", len(ranges), ranges)
	}
	const total = 10000
	keys := make([]string, total)
	for i := range keys {
		id := fmt.Sprintf("user-%d", i)
		if i%2 == 1 {
			id = fmt.Sprintf("198.51.%d.%d", i/256%256, i%256)
		}
		keys[i] = Key(DefaultKeyPrefix, id, floodgate.TokenBucket)
	}
	counts := map[string]int{}
	for _, slot := range keySlots(t, client, keys) {
		for primary, rs := range ranges {
			for _, r := range rs {
				if slot >= r[0] && slot <= r[1] {
					counts[primary]++
				}
			}
		}
	}
	sum := 0
	for primary, n := range counts {
		sum += n
		share := float64(n) / total
		t.Logf("%s: %d identities (%.1f%%)", primary, n, 100*share)
		if math.Abs(share-1.0/3) > 0.05 {
			t.Errorf("%s holds %.1f%% of the identities, want 33.3%% ± 5%%", primary, 100*share)
		}
	}
	if sum != total {
		t.Errorf("%d of %d identities fell in a primary's slots", sum, total)
	}
}

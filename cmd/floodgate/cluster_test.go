package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/storekey"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// redisSlot returns the cluster slot of a Redis key: that of its hash tag,
// the text between its first '{' and the first '}' after it, if not empty.
func redisSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % 16384
}

// keyPerSlot returns, for every one of the cluster's 16384 slots, an API
// key of rule whose Redis key (under prefix, for alg) lives in that slot:
// keys with a hash tag of their own, "{tN}", which serve's store key
// keeps, so they spread over every slot of every primary.
func keyPerSlot(prefix, rule string, alg floodgate.Algorithm) []string {
	keys := make([]string, 16384)
	for n, left := 0, len(keys); left > 0; n++ {
		key := "{t" + strconv.Itoa(n) + "}"
		if s := redisSlot(redisstore.Key(prefix, storekey.Of("", rule, key), alg)); keys[s] == "" {
			keys[s] = key
			left--
		}
	}
	return keys
}

// clusterTally counts one primary's answers, by what decided them.
type clusterTally struct {
	decided  atomic.Int64 // 200 from Redis (not store_unavailable)
	failMode atomic.Int64 // 503 store_unavailable: the rule's failure mode
	other    atomic.Int64 // anything else: overloaded, 500, a transport error
	lastErr  atomic.Value // the last "other" answer, for the report
	maxTook  atomic.Int64 // the longest answer, in nanoseconds
}

func (c *clusterTally) took(d time.Duration) {
	for {
		m := c.maxTook.Load()
		if int64(d) <= m || c.maxTook.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

func (c *clusterTally) String() string {
	s := fmt.Sprintf("%d decided by Redis, %d failure mode, %d other, longest %s", c.decided.Load(), c.failMode.Load(), c.other.Load(),
		time.Duration(c.maxTook.Load()).Round(time.Millisecond))
	if e, ok := c.lastErr.Load().(string); ok {
		s += " (last other: " + e + ")"
	}
	return s
}

// TestServeClusterPrimaryStopped drives serve on a Redis Cluster of its
// own (3 primaries, 3 replicas, a node timeout of a minute so no replica
// takes over) while callers check keys on every slot; one primary is
// stopped with SIGSTOP for a while. Every answer for the other primaries'
// keys, before, during and after, is decided by Redis: no failure-mode
// answer, no shed request, no error. Every request for the stopped
// primary's keys begun while it is stopped gets the rule's failure mode
// (503 store_unavailable, fail closed), within the store timeout.
func TestServeClusterPrimaryStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("a Redis Cluster of its own and seconds of load")
	}
	const (
		storeTimeout = time.Second     // missed by no healthy call, even under -race on a loaded machine
		margin       = 2 * time.Second // for the failure answer past the store timeout, on a loaded machine
		perPrimary   = 16              // callers per primary
		hang         = 6 * time.Second // how long the primary stays stopped
	)
	cluster := redistest.SpawnClusterWithReplicas(t, 3)
	prefix := "fgcluster:"
	quoted := make([]string, len(cluster.Nodes))
	for i, a := range cluster.Addrs() {
		quoted[i] = strconv.Quote(a)
	}
	cfg := writeFile(t, t.TempDir(), "floodgate.yaml", fmt.Sprintf(`store:
  type: redis-cluster
  addrs: [%s]
  timeout: %s
  key_prefix: %q
rules:
  - name: spread
    algorithm: fixed_window
    limit: 1000000
    window: 1h
    failure_mode: closed
`, strings.Join(quoted, ", "), storeTimeout, prefix))
	base, _, _ := startServe(t, "--config", cfg)

	// The callers of each primary, and that primary's keys: together, a
	// key on every slot. A few are checked against Redis's own hash.
	keys := keyPerSlot(prefix, "spread", floodgate.FixedWindow)
	byPrimary := make([][]string, len(cluster.Nodes))
	for slot, key := range keys {
		for i, n := range cluster.Nodes {
			if cluster.NodeForSlot(slot) == n {
				byPrimary[i] = append(byPrimary[i], key)
			}
		}
	}
	for _, slot := range []int{0, 5460, 5461, 10922, 10923, 16383} {
		got, err := cluster.Nodes[0].Do(t, "CLUSTER", "KEYSLOT", redisstore.Key(prefix, storekey.Of("", "spread", keys[slot]), floodgate.FixedWindow)).AsInt64()
		if err != nil || got != int64(slot) {
			t.Fatalf("CLUSTER KEYSLOT of key %q: %d (%v), want %d", keys[slot], got, err, slot)
		}
	}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 3 * perPrimary}}
	stopped := cluster.Nodes[0]
	var (
		phase    atomic.Int32 // 0 before the stop, 1 while stopped, 2 after
		before   [3]clusterTally
		during   [3]clusterTally
		after    [3]clusterTally
		tallies  = [3]*[3]clusterTally{&before, &during, &after}
		done     = make(chan struct{})
		wg       sync.WaitGroup
		recovery atomic.Int64 // answers for the stopped primary's keys decided by Redis after SIGCONT
	)
	ask := func(primary int, key string) {
		p := phase.Load()
		start := time.Now()
		tally := &tallies[p][primary]
		body := `{"rule":"spread","key":"` + key + `"}`
		resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		took := time.Since(start)
		if err != nil {
			tally.other.Add(1)
			tally.lastErr.Store(err.Error())
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if phase.Load() != p { // the phase changed under the request: count it nowhere
			return
		}
		tally.took(took)
		var r struct {
			Allowed          bool   `json:"allowed"`
			StoreUnavailable bool   `json:"store_unavailable"`
			Kind             string `json:"kind"`
		}
		_ = json.Unmarshal(raw, &r)
		switch {
		case resp.StatusCode == 200 && r.Allowed && !r.StoreUnavailable:
			tally.decided.Add(1)
			if p == 2 && primary == 0 {
				recovery.Add(1)
			}
		case resp.StatusCode == 503 && r.Kind == "store_unavailable":
			tally.failMode.Add(1)
		default:
			tally.other.Add(1)
			tally.lastErr.Store(fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(raw))))
		}
	}
	for primary, ks := range byPrimary {
		for c := range perPrimary {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; ; i += perPrimary { // this caller's share of the primary's keys, in turn
					select {
					case <-done:
						return
					default:
					}
					ask(primary, ks[i%len(ks)])
				}
			}()
		}
	}
	stopLoad := sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stopLoad)

	// waitFor polls until ok holds, for at most limit.
	waitFor := func(what string, limit time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s not within %s", what, limit)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Before: every primary answers.
	waitFor("answers from every primary", 30*time.Second, func() bool {
		return before[0].decided.Load() >= 200 && before[1].decided.Load() >= 200 && before[2].decided.Load() >= 200
	})

	stopped.Stop(t)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			stopped.Cont(t)
		}
	})
	phase.Store(1)
	// While stopped: long enough for calls to time out and the breaker to
	// open, and for the healthy primaries to answer thousands of calls.
	hangEnds := time.Now().Add(hang)
	waitFor("the hang", hang+time.Second, func() bool { return time.Now().After(hangEnds) })
	phase.Store(2)
	stopped.Cont(t)
	resumed = true
	waitFor("the stopped primary's keys decided again after SIGCONT", 30*time.Second, func() bool { return recovery.Load() >= 100 })
	stopLoad()

	for p, name := range []string{"before the stop", "while stopped", "after SIGCONT"} {
		for i := range 3 {
			t.Logf("%s, primary %d (%s)%s: %s", name, i, cluster.Nodes[i].Addr, map[bool]string{true: " [stopped]"}[i == 0 && p == 1], &tallies[p][i])
		}
	}
	for p, name := range []string{"before the stop", "while stopped", "after SIGCONT"} {
		for i := 1; i < 3; i++ {
			if c := &tallies[p][i]; c.failMode.Load() != 0 || c.other.Load() != 0 || c.decided.Load() == 0 {
				t.Errorf("%s, healthy primary %d: %s; want every answer decided by Redis", name, i, c)
			}
		}
	}
	if c := &before[0]; c.failMode.Load() != 0 || c.other.Load() != 0 {
		t.Errorf("before the stop, primary 0: %s; want every answer decided by Redis", c)
	}
	if c := &during[0]; c.decided.Load() != 0 || c.other.Load() != 0 || c.failMode.Load() == 0 {
		t.Errorf("while stopped, the stopped primary's keys: %s; want only the failure mode's answer", c)
	}
	if took := time.Duration(during[0].maxTook.Load()); took > storeTimeout+margin {
		t.Errorf("a failure-mode answer took %s, want within the store timeout %s (+%s)", took, storeTimeout, margin)
	}
}

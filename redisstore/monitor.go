package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate/health"
)

// clockScript reads a node's clock; on a cluster it is sent with a key of
// one of the node's slots, so it reaches that node. It writes nothing, so
// Redis runs it under maxmemory and on a busy replica too.
var clockScript = rueidis.NewLuaScript("#!lua flags=no-writes\nreturn redis.call('TIME')")

// newMonitor returns the monitor of g, whose single server (if not a
// cluster) is called name, and which connects with connect (nil: the store
// is connected already).
func newMonitor(g *guard, name string, connect func() (rueidis.Client, error)) *monitor {
	return &monitor{g: g, name: name, connect: connect, stop: make(chan struct{}), byAddr: map[string]*node{}}
}

// start runs the monitor until close.
func (m *monitor) start() {
	m.wg.Add(1)
	go m.run()
}

// close stops the monitor and waits for it.
func (m *monitor) close() {
	close(m.stop)
	m.wg.Wait()
}

func (m *monitor) run() {
	defer m.wg.Done()
	tick := time.NewTicker(probeInterval / 2)
	defer tick.Stop()
	var lastConnect, lastTopo, lastLog time.Time
	failures := 0
	for {
		if m.g.conn.Load() == nil && time.Since(lastConnect) >= reconnectInterval {
			lastConnect = time.Now()
			if err := m.dial(); err != nil {
				failures++
				msg := m.g.failedConnecting(err)
				// Loud, but once at first and then every 30s.
				if time.Since(lastLog) >= 30*time.Second {
					lastLog = time.Now()
					m.g.logger.Error(m.g.connectingMessage("meanwhile"), "attempts", failures, "error", msg)
				}
			} else if failures > 0 {
				m.g.logger.Warn("redisstore: connected to Redis", "after_attempts", failures)
			}
		}
		if c := m.g.conn.Load(); c != nil {
			// A node that stopped answering may have been replaced: read
			// the slot map every second until every breaker is closed.
			if c.cluster && (time.Since(lastTopo) >= topologyInterval || time.Since(lastTopo) >= time.Second && anyOpen(c)) {
				lastTopo = time.Now()
				m.spawn(func() { m.refreshTopology(c) })
			}
			now := m.g.now()
			for _, n := range c.topo.Load().nodes {
				every := clockInterval
				if n.open.Load() {
					every = probeInterval
				}
				if now-n.probedAt.Load() >= every.Microseconds() && n.probing.CompareAndSwap(false, true) {
					n.probedAt.Store(now)
					m.spawn(func() { defer n.probing.Store(false); m.probe(c, n) })
				}
				if at := n.policyAt.Load(); (at == 0 || now-at >= policyInterval.Microseconds()) && !n.open.Load() && n.reading.CompareAndSwap(false, true) {
					n.policyAt.Store(now)
					m.spawn(func() { defer n.reading.Store(false); m.readPolicy(c, n) })
				}
			}
		}
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
	}
}

// anyOpen reports whether a node of c has its breaker open.
func anyOpen(c *connection) bool {
	for _, n := range c.topo.Load().nodes {
		if n.open.Load() {
			return true
		}
	}
	return false
}

// spawn runs f in a goroutine that close waits for.
func (m *monitor) spawn(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// dial connects a store made with Config.LazyConnect.
func (m *monitor) dial() error {
	client, err := m.connect()
	if err != nil {
		return err
	}
	m.attach(client)
	return nil
}

// attach makes client the store's connection: it reads the slot map of a
// cluster and every node's clock first, so the first call already carries
// its deadline.
func (m *monitor) attach(client rueidis.Client) {
	c := &connection{client: client, cluster: client.Mode() == rueidis.ClientModeCluster}
	if !c.cluster {
		c.topo.Store(&topology{nodes: []*node{m.node(m.name)}})
	} else {
		c.topo.Store(&topology{nodes: []*node{m.node("cluster")}})
		m.refreshTopology(c)
	}
	for _, n := range c.topo.Load().nodes {
		n.probedAt.Store(m.g.now())
		m.probe(c, n)
	}
	m.g.conn.Store(c)
	m.g.connErr.Store(nil)
}

// node returns the node of addr, creating it on first sight.
func (m *monitor) node(addr string) *node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodeLocked(addr)
}

func (m *monitor) nodeLocked(addr string) *node {
	n, ok := m.byAddr[addr]
	if !ok {
		n = newNode(addr, m.g.maxInFlight)
		m.byAddr[addr] = n
	}
	return n
}

// probe samples n's clock. An answer closes n's breaker and frees the
// places of the calls abandoned before it; no answer counts as a failure.
func (m *monitor) probe(c *connection, n *node) {
	timeout := max(DefaultTimeout, time.Second/4)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	mark := n.abandoned.Load()
	var res rueidis.RedisResult
	if k := n.probeKey.Load(); k == nil {
		res = c.client.Do(ctx, c.client.B().Time().Build())
	} else {
		res = clockScript.Exec(ctx, c.client, []string{*k}, nil)
	}
	after := m.g.now()
	vals, err := res.ToArray()
	if err != nil {
		if isRedisReply(err) {
			m.g.releaseUpTo(n, mark)
			m.g.success(n) // it answers: a refusal is a call's business
			return
		}
		m.g.failure(n, fmt.Errorf("probe: %w", err))
		return
	}
	m.g.releaseUpTo(n, mark)
	if len(vals) == 2 {
		sec, err1 := vals[0].AsInt64()
		usec, err2 := vals[1].AsInt64()
		if err1 == nil && err2 == nil {
			// Redis read its clock at some moment between sending and
			// now: taking now makes the offset a lower bound, so a
			// deadline in Redis's clock is never later than the caller's.
			n.offset.Store(sec*1_000_000 + usec - after)
			n.clockOK.Store(true)
		}
	}
	m.g.success(n)
}

// readPolicy reads n's maxmemory-policy, where Redis allows CONFIG GET,
// and warns when it can evict the store's keys.
func (m *monitor) readPolicy(c *connection, n *node) {
	client := c.client
	if c.cluster {
		var ok bool
		if client, ok = c.client.Nodes()[n.addr]; !ok {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.readVersion(ctx, client, n)
	kv, err := client.Do(ctx, client.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	if err != nil {
		if isRedisReply(err) && !n.configRefused.Swap(true) {
			m.g.logger.Info("redisstore: cannot read maxmemory-policy (CONFIG GET refused); make sure it is noeviction", "node", n.addr, "error", err.Error())
		}
		return
	}
	policy := kv["maxmemory-policy"]
	// Stored after the warning is logged: whoever sees the policy in
	// Health can also find it in the log.
	defer n.policy.Store(&policy)
	if evicts(policy) {
		if !n.evictWarn.Swap(true) {
			m.g.logger.Error("redisstore: Redis evicts keys under memory pressure (maxmemory-policy "+policy+"): an evicted key forgets its limit's history and admits again; use noeviction (docs/RESILIENCE.md)",
				"node", n.addr, "maxmemory-policy", policy)
		}
	} else {
		n.evictWarn.Store(false)
	}
}

// readVersion reads n's Redis version (INFO server) and warns, once, when
// it is older than 7.0: the scripts' "#!lua" first line does not compile
// there, so every decision would fail as a store error.
func (m *monitor) readVersion(ctx context.Context, client rueidis.Client, n *node) {
	info, err := client.Do(ctx, client.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return
	}
	v := infoValue(info, "redis_version")
	if v == "" || versionAtLeast7(v) {
		n.oldVersion.Store(nil)
		return
	}
	if !n.versionWarn.Swap(true) {
		m.g.logger.Error("redisstore: Redis "+v+" is older than 7.0, which the store's scripts need (their #!lua line): every decision fails as a store error and is never admitted; upgrade Redis",
			"node", n.addr, "redis_version", v)
	}
	n.oldVersion.Store(&v) // after the log line, as readPolicy
}

// infoValue returns field's value in an INFO reply, or "".
func infoValue(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// versionAtLeast7 reports whether a redis_version such as "7.0.15" is 7.0
// or later (an unreadable one counts as recent: nothing to warn about).
func versionAtLeast7(v string) bool {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return err != nil || n >= 7
}

// evicts reports whether policy may evict any key, whatever its TTL.
func evicts(policy string) bool { return strings.HasPrefix(policy, "allkeys-") }

// refreshTopology reads a cluster's slot map (CLUSTER SLOTS) and maps each
// slot to its primary's node. Until it succeeds, every key is on one node.
func (m *monitor) refreshTopology(c *connection) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	reply, err := c.client.Do(ctx, c.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return
	}
	slots := make([]uint16, 16384)
	for i := range slots {
		slots[i] = noNode
	}
	var nodes []*node
	index := map[string]uint16{}
	for _, r := range reply {
		v, err := r.ToArray()
		if err != nil || len(v) < 3 {
			continue
		}
		lo, err1 := v[0].AsInt64()
		hi, err2 := v[1].AsInt64()
		primary, err3 := v[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(primary) < 2 || lo < 0 || hi > 16383 || lo > hi {
			continue
		}
		host, _ := primary[0].ToString()
		port, err := primary[1].AsInt64()
		if err != nil || host == "?" {
			continue
		}
		addr := host + ":" + strconv.FormatInt(port, 10)
		if strings.Contains(host, ":") {
			addr = "[" + host + "]:" + strconv.FormatInt(port, 10)
		}
		i, ok := index[addr]
		if !ok {
			n := m.node(addr)
			if k := n.probeKey.Load(); k == nil || keySlot(*k) < int(lo) || keySlot(*k) > int(hi) {
				key := slotKey(int(lo))
				n.probeKey.Store(&key)
			}
			i = uint16(len(nodes))
			index[addr] = i
			nodes = append(nodes, n)
		}
		for s := lo; s <= hi; s++ {
			slots[s] = i
		}
	}
	if len(nodes) == 0 {
		return
	}
	c.topo.Store(&topology{nodes: nodes, slots: slots})
}

// slotKey returns a key in hash slot slot.
func slotKey(slot int) string {
	for i := 0; ; i++ {
		k := "{fg-probe-" + strconv.Itoa(i) + "}"
		if keySlot(k) == slot {
			return k
		}
	}
}

// Health reports the store's connection and, for each node, its circuit
// breaker, calls in flight and eviction policy, without a round trip. It
// implements health.Reporter.
func (s *Store) Health() health.Report {
	g := s.guard
	c := g.conn.Load()
	if c == nil {
		h := health.Report{Error: g.unconnected().Error()}
		return h
	}
	h := health.Report{Connected: true}
	for _, n := range c.topo.Load().nodes {
		nh := health.Node{
			Addr:                n.addr,
			Available:           !n.open.Load(),
			ConsecutiveFailures: n.fails.Load(),
			Opens:               n.opens.Load(),
			InFlight:            int(n.places.used.Load()),
		}
		if e := n.lastErr.Load(); e != nil {
			nh.LastError = *e
		}
		if at := n.oomAt.Load(); at != 0 && g.now()-at < oomRecent.Microseconds() {
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s: Redis refused a decision for lack of memory (OOM: maxmemory reached under noeviction) in the last %s: decisions on its keys follow their failure mode until it has room", n.addr, oomRecent))
		}
		if v := n.oldVersion.Load(); v != nil {
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s: Redis %s is older than 7.0, which the store's scripts need: every decision fails as a store error; upgrade Redis", n.addr, *v))
		}
		if p := n.policy.Load(); p != nil {
			nh.EvictionPolicy = *p
			if evicts(*p) {
				nh.Evicting = true
				h.Warnings = append(h.Warnings, fmt.Sprintf("%s: maxmemory-policy %s can evict rate-limit keys, which resets their limits; use noeviction", n.addr, *p))
			}
		}
		h.Nodes = append(h.Nodes, nh)
	}
	return h
}

var _ health.Reporter = (*Store)(nil)

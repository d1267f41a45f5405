package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// DefaultMaxInFlight is the bound on calls in flight to one Redis node used
// when Config.MaxInFlight is zero. A call waits for a place under its own
// context instead of entering rueidis's command ring when it is full (a
// wait that ignores contexts), so it returns by its deadline even when a
// node stops answering. 256 is a quarter of that ring; see
// docs/RESILIENCE.md.
const DefaultMaxInFlight = 256

// DefaultBreakerFailures is how many calls to one node must fail in a row
// (timeouts or broken connections) to open its circuit breaker, used when
// Config.BreakerFailures is zero.
const DefaultBreakerFailures = 5

// probeInterval is how often an open breaker's node is probed; after the
// node answers a probe, calls resume. It keeps recovery well within a
// second.
const probeInterval = 200 * time.Millisecond

// clockInterval is how often each node's clock is sampled (the probe of a
// closed breaker): the offset of Redis's clock to the store's goes into
// every call's deadline.
const clockInterval = time.Second

// oomRecent is how long Health warns after a node refused a script for
// lack of memory.
const oomRecent = 10 * time.Second

// policyInterval is how often each node's maxmemory-policy is read again,
// besides after connecting and after an outage.
const policyInterval = time.Minute

// topologyInterval is how often a cluster's slot map is read again.
const topologyInterval = 5 * time.Second

// reconnectInterval is how often a store that has not connected yet
// (Config.LazyConnect) tries again.
const reconnectInterval = 250 * time.Millisecond

// node is one Redis server the store sends scripts to: its in-flight
// bound, circuit breaker and clock.
type node struct {
	addr     string
	probeKey atomic.Pointer[string] // a key in one of the node's slots (cluster); nil for a single server

	places        places        // one per command in flight
	abandoned     atomic.Uint64 // commands given up by their callers, ever
	released      atomic.Uint64 // of those, how many whose token was released
	fails         atomic.Int64  // consecutive failures
	open          atomic.Bool   // the breaker is open
	opens         atomic.Int64  // times the breaker opened
	lastErr       atomic.Pointer[string]
	offset        atomic.Int64 // Redis clock minus the store's monotonic clock, µs (a lower bound)
	clockOK       atomic.Bool  // offset holds a sample
	probing       atomic.Bool  // a probe is running
	probedAt      atomic.Int64 // when the last probe started (store µs)
	policy        atomic.Pointer[string]
	policyAt      atomic.Int64           // when the policy was last read (store µs); 0: read it now
	reading       atomic.Bool            // a policy read is running
	evictWarn     atomic.Bool            // the evicting policy was already reported
	configRefused atomic.Bool            // CONFIG GET was refused, and said so
	oldVersion    atomic.Pointer[string] // the Redis version, when older than 7.0
	oomAt         atomic.Int64           // when n last refused a script for lack of memory (store µs); 0: never
	versionWarn   atomic.Bool            // the old version was already reported
}

func newNode(addr string, maxInFlight int) *node {
	n := &node{addr: addr}
	n.places.max = int64(maxInFlight)
	n.places.free = make(chan struct{}, 1)
	return n
}

// connection is a connected rueidis client and what the store knows of
// its nodes.
type connection struct {
	client  rueidis.Client
	cluster bool
	topo    atomic.Pointer[topology]
}

// topology maps keys to nodes.
type topology struct {
	nodes []*node
	slots []uint16 // cluster: the index in nodes of each slot's primary (noNode: unassigned); nil: every key on nodes[0]
}

const noNode = ^uint16(0)

// nodeFor returns the node of a hash slot, or nil if none serves it.
func (t *topology) nodeFor(slot uint16) *node {
	if t.slots == nil {
		return t.nodes[0]
	}
	if int(slot) >= len(t.slots) || t.slots[slot] == noNode {
		return nil
	}
	return t.nodes[t.slots[slot]]
}

// guard is the client the store sends every call through. It implements
// rueidis.Client in front of the real client, which it may connect later
// (Config.LazyConnect): it bounds the commands in flight to each node
// (DefaultMaxInFlight), keeps a circuit breaker per node, and samples each
// node's clock. Commands without a key on a cluster are passed through.
type guard struct {
	conn        atomic.Pointer[connection]
	maxInFlight int           // the bound per node; negative: none
	threshold   int64         // consecutive failures that open a breaker; negative: never
	timeout     time.Duration // the store's own timeout (Config.Timeout)
	base        time.Time
	logger      *slog.Logger

	connErr atomic.Pointer[connFailure] // why connecting failed, while not connected
}

// connFailure is why the store could not connect: msg in words, and the
// *ConfigError when Redis refused the connection's set-up (nil for an
// outage).
type connFailure struct {
	msg     string
	refused error
}

// failedConnecting records err as why the store has not connected, and
// returns it in words.
func (g *guard) failedConnecting(err error) string {
	f := &connFailure{msg: err.Error()}
	var ce *ConfigError
	if errors.As(err, &ce) {
		f.refused = err
	}
	g.connErr.Store(f)
	return f.msg
}

var _ rueidis.Client = (*guard)(nil)

// now returns the store's monotonic clock in microseconds.
func (g *guard) now() int64 { return time.Since(g.base).Microseconds() }

// connectingMessage is the log message for a failed connection attempt:
// for an outage, rules follow their failure mode (when); for a refusal,
// every call is an error.
func (g *guard) connectingMessage(when string) string {
	if e := g.connErr.Load(); e != nil && e.refused != nil {
		return "redisstore: Redis refuses the connection (a misconfiguration, not an outage): every decision fails as a store error and is never admitted, whatever its failure mode, until it is fixed"
	}
	return "redisstore: cannot connect to Redis; its rules answer by their failure mode " + when
}

// unconnected is the error of calls made before the store connected: an
// outage, unless Redis refused the connection's set-up (a wrong password,
// user or database), which is a misconfiguration that never admits.
func (g *guard) unconnected() error {
	why := "not connected yet"
	if e := g.connErr.Load(); e != nil {
		if e.refused != nil {
			return fmt.Errorf("redisstore: not connected: %w", e.refused)
		}
		why = "not connected yet: " + e.msg
	}
	return fmt.Errorf("%w: redisstore: %s", floodgate.ErrStoreUnavailable, why)
}

// B returns the connected client's command builder. The store calls it
// only once connected (Store.connected).
func (g *guard) B() rueidis.Builder { return g.conn.Load().client.B() }

// Do sends cmd to its node, unless the node's breaker is open or its
// calls in flight do not fall below the bound before ctx ends.
func (g *guard) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c := g.conn.Load()
	if c == nil {
		return rueidis.NewErrorResult(g.unconnected())
	}
	n := c.topo.Load().nodeFor(cmd.Slot())
	if n == nil {
		return c.client.Do(ctx, cmd)
	}
	own := g.ownDeadline(ctx)
	if err := g.enter(ctx, n, own); err != nil {
		return rueidis.NewErrorResult(err)
	}
	if !own { // the closure escapes to detached's goroutine: only here
		return detached(g, ctx, func(ctx context.Context) rueidis.RedisResult { return g.call(ctx, c, n, cmd) }, rueidis.NewErrorResult)
	}
	return g.call(ctx, c, n, cmd)
}

// call sends cmd to n, holding its place in flight, and gives the place
// back with the outcome.
func (g *guard) call(ctx context.Context, c *connection, n *node, cmd rueidis.Completed) rueidis.RedisResult {
	mark := n.abandoned.Load()
	res := c.client.Do(ctx, cmd)
	g.leave(ctx, n, res.Error(), mark)
	return res
}

// ownDeadline reports whether ctx's deadline, if it passes, says something
// about the node: it is about the store's own timeout, or at least
// detachBelow. A caller's far shorter deadline (a gRPC grpc-timeout below a
// round trip) must not count against a healthy node and open its breaker,
// so such calls go through detached.
func (g *guard) ownDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= min(g.timeout-g.timeout/8, detachBelow)
}

// detachBelow is the caller's deadline under which a call is detached: far
// below any healthy round trip's worst case, far above none. Envoy's
// default rate-limit timeout (20ms) stays on the direct path, which takes
// no goroutine.
const detachBelow = 10 * time.Millisecond

// detached runs do (a call holding its places in flight) under the store's
// own timeout instead of ctx's shorter deadline, and returns its result, or
// fail's when ctx ends first; do then finishes alone and gives its place
// back when the reply comes. rueidis never closes the shared connection
// for a caller's short deadline, and the node is not counted as failing.
// The script still carries the caller's deadline and charges nothing if it
// starts after it.
func detached[T any](g *guard, ctx context.Context, do func(context.Context) T, fail func(error) T) T {
	ch := make(chan T, 1)
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
		defer cancel()
		ch <- do(rctx)
	}()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		select {
		case r := <-ch:
			return r
		default:
			return fail(ctx.Err())
		}
	}
}

// DoMulti sends the commands whose nodes admit them, pipelined, and fails
// the others at once.
func (g *guard) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c := g.conn.Load()
	if c == nil {
		return failAll(len(multi), g.unconnected())
	}
	own := g.ownDeadline(ctx)
	t := c.topo.Load()
	var nodes []*node // distinct, in order of first use
	which := make([]int, len(multi))
	for i := range multi {
		n := t.nodeFor(multi[i].Slot())
		which[i] = -1
		if n == nil {
			continue
		}
		j := 0
		for j < len(nodes) && nodes[j] != n {
			j++
		}
		if j == len(nodes) {
			nodes = append(nodes, n)
		}
		which[i] = j
	}
	refused := make([]error, len(nodes))
	marks := make([]uint64, len(nodes))
	for j, n := range nodes {
		if refused[j] = g.enter(ctx, n, own); refused[j] == nil {
			marks[j] = n.abandoned.Load()
		}
	}
	send := multi
	var sent []int // indexes in multi of the commands sent, if not all
	if slicesAnyErr(refused) {
		send = make([]rueidis.Completed, 0, len(multi))
		for i := range multi {
			if which[i] < 0 || refused[which[i]] == nil {
				send = append(send, multi[i])
				sent = append(sent, i)
			}
		}
	}
	call := func(ctx context.Context) []rueidis.RedisResult {
		return g.sendMulti(ctx, c, multi, send, sent, which, nodes, refused, marks)
	}
	if !own && len(send) > 0 {
		return detached(g, ctx, call, func(err error) []rueidis.RedisResult { return failAll(len(multi), err) })
	}
	return call(ctx)
}

// sendMulti is DoMulti's second half: it sends the commands of send (the
// indexes sent in multi, when not all), under ctx, and accounts for each
// node's call; which, nodes, refused and marks are DoMulti's.
func (g *guard) sendMulti(ctx context.Context, c *connection, multi, send []rueidis.Completed, sent, which []int, nodes []*node, refused []error, marks []uint64) []rueidis.RedisResult {
	var got []rueidis.RedisResult
	if len(send) > 0 {
		got = c.client.DoMulti(ctx, send...)
	}
	res := got
	if sent != nil || len(send) == 0 {
		res = make([]rueidis.RedisResult, len(multi))
		for k, i := range sent {
			res[i] = got[k]
		}
		for i := range multi {
			if j := which[i]; j >= 0 && refused[j] != nil {
				res[i] = rueidis.NewErrorResult(refused[j])
			}
		}
	}
	// The commands of one node travel together (one slot of its ring), so
	// the first one's result tells what happened to all of them.
	done := make([]bool, len(nodes))
	for i := range multi {
		if j := which[i]; j >= 0 && refused[j] == nil && !done[j] {
			done[j] = true
			g.leave(ctx, nodes[j], res[i].Error(), marks[j])
		}
	}
	return res
}

func slicesAnyErr(errs []error) bool {
	for _, e := range errs {
		if e != nil {
			return true
		}
	}
	return false
}

func failAll(n int, err error) []rueidis.RedisResult {
	res := make([]rueidis.RedisResult, n)
	for i := range res {
		res[i] = rueidis.NewErrorResult(err)
	}
	return res
}

// enter admits a call to n: it fails at once while n's breaker is open,
// and otherwise takes a place among n's calls in flight, waiting for one
// at most until ctx ends. Waiting until the store's own deadline (own)
// counts as a failure of n.
func (g *guard) enter(ctx context.Context, n *node, own bool) error {
	if n.open.Load() {
		return g.openError(n)
	}
	if err := n.places.take(ctx); err != nil {
		err = fmt.Errorf("%w: redisstore: %s has %d calls in flight without a reply (the bound, Config.MaxInFlight): %w", floodgate.ErrStoreUnavailable, n.addr, n.places.max, err)
		if own && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			g.failure(n, err)
		}
		return err
	}
	if err := ctx.Err(); err != nil {
		g.release(n, 1)
		return fmt.Errorf("%w: redisstore: %w", floodgate.ErrStoreUnavailable, err)
	}
	return nil
}

// openError is the error of a call that n's open breaker refuses.
func (g *guard) openError(n *node) error {
	last := ""
	if e := n.lastErr.Load(); e != nil {
		last = "; last failure: " + *e
	}
	return fmt.Errorf("%w: redisstore: %s is unavailable (circuit breaker open after %d failed calls in a row%s)", floodgate.ErrStoreUnavailable, n.addr, n.fails.Load(), last)
}

// leave accounts for a call to n that entered when n had had mark
// abandoned calls, and returned err. A call that passed its deadline counts
// as a failure of n (detached calls carry the store's own); one whose
// caller went away does not.
func (g *guard) leave(ctx context.Context, n *node, err error, mark uint64) {
	if err != nil && ctx.Err() != nil && !isRedisReply(err) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		// The caller gave up; rueidis keeps the command in its ring until
		// the reply comes or the connection ends, so its place stays taken
		// until a later call hears back from n.
		n.abandoned.Add(1)
		if errors.Is(err, context.DeadlineExceeded) {
			g.failure(n, err)
		}
		return
	}
	// A reply or a broken connection: n's pipeline has moved past every
	// command queued before this one, abandoned ones included.
	g.releaseUpTo(n, mark)
	g.release(n, 1)
	if err != nil && strings.HasPrefix(err.Error(), "OOM") && isRedisReply(err) {
		n.oomAt.Store(max(1, g.now())) // full: it answers, but every decision is an outage
	}
	if err == nil || isRedisReply(err) {
		g.success(n)
	} else {
		g.failure(n, err)
	}
}

func isRedisReply(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// release frees k places of n's calls in flight.
func (g *guard) release(n *node, k uint64) { n.places.give(int64(k)) }

// releaseUpTo frees the places of the first mark abandoned calls of n,
// which n has answered (or dropped with its connection) by now.
func (g *guard) releaseUpTo(n *node, mark uint64) {
	for {
		r := n.released.Load()
		if r >= mark {
			return
		}
		if n.released.CompareAndSwap(r, mark) {
			g.release(n, mark-r)
			return
		}
	}
}

// failure counts a call to n that got no answer, and opens n's breaker
// after threshold of them in a row.
func (g *guard) failure(n *node, err error) {
	msg := err.Error()
	n.lastErr.Store(&msg)
	f := n.fails.Add(1)
	if g.threshold > 0 && f >= g.threshold && n.open.CompareAndSwap(false, true) {
		n.opens.Add(1)
		g.logger.Error("redisstore: Redis node not answering: circuit breaker open, its keys fail at once as unavailable until it answers a probe",
			"node", n.addr, "failures", f, "error", msg)
	}
}

// success records that n answered, closing its breaker.
func (g *guard) success(n *node) {
	if n.fails.Load() != 0 {
		n.fails.Store(0)
	}
	if n.open.Load() && n.open.CompareAndSwap(true, false) {
		n.policyAt.Store(0) // read the policy again: it may be another server now
		g.logger.Warn("redisstore: Redis node answering again: circuit breaker closed", "node", n.addr)
	}
}

// Close closes the connected client.
func (g *guard) Close() {
	if c := g.conn.Load(); c != nil {
		c.client.Close()
	}
}

// The rest of rueidis.Client is passed through to the connected client
// unguarded; the store does not use it.

// Receive implements rueidis.Client.
func (g *guard) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	c := g.conn.Load()
	if c == nil {
		return g.unconnected()
	}
	return c.client.Receive(ctx, subscribe, fn)
}

// DoCache implements rueidis.Client.
func (g *guard) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c := g.conn.Load()
	if c == nil {
		return rueidis.NewErrorResult(g.unconnected())
	}
	return c.client.DoCache(ctx, cmd, ttl)
}

// DoMultiCache implements rueidis.Client.
func (g *guard) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c := g.conn.Load()
	if c == nil {
		return failAll(len(multi), g.unconnected())
	}
	return c.client.DoMultiCache(ctx, multi...)
}

// DoStream implements rueidis.Client.
func (g *guard) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	c := g.conn.Load()
	if c == nil {
		return rueidis.NewErrorResultStream(g.unconnected())
	}
	return c.client.DoStream(ctx, cmd)
}

// DoMultiStream implements rueidis.Client; the store connects before any
// call reaches it.
func (g *guard) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	return g.conn.Load().client.DoMultiStream(ctx, multi...)
}

// Dedicated implements rueidis.Client.
func (g *guard) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	c := g.conn.Load()
	if c == nil {
		return g.unconnected()
	}
	return c.client.Dedicated(fn)
}

// Dedicate implements rueidis.Client; the store connects before any call
// reaches it.
func (g *guard) Dedicate() (rueidis.DedicatedClient, func()) { return g.conn.Load().client.Dedicate() }

// Nodes implements rueidis.Client.
func (g *guard) Nodes() map[string]rueidis.Client {
	c := g.conn.Load()
	if c == nil {
		return nil
	}
	return c.client.Nodes()
}

// Mode implements rueidis.Client.
func (g *guard) Mode() rueidis.ClientMode {
	c := g.conn.Load()
	if c == nil {
		return ""
	}
	return c.client.Mode()
}

// monitor is the store's background work: connecting (Config.LazyConnect),
// probing open breakers, sampling clocks, reading eviction policies and a
// cluster's slot map.
type monitor struct {
	g       *guard
	name    string                         // the single server's name in Health
	connect func() (rueidis.Client, error) // nil: connected from the start
	stop    chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	byAddr map[string]*node // every node seen, so state survives a new slot map
}

// Package redisstore is floodgate's shared store: rate limits decided
// atomically inside Redis by one Lua script per algorithm, so every app
// instance sees the same limits. It runs on Redis standalone, Sentinel and
// Cluster through github.com/redis/rueidis.
//
// The scripts perform the same arithmetic as package algorithm, step for
// step, so this store and the memory store reach the same decisions for the
// same requests and times. Time comes from Redis (redis.call('TIME')), so the
// clocks of the app servers never matter; [Config.Clock] overrides it for
// tests and simulations.
//
// # Keys
//
// Every key of one identity shares a Redis Cluster hash tag, so all of them
// live in one slot, and distinct identities never share a key. See [Key]
// for the layout, which other languages can reproduce (docs/LUA.md).
//
// # Failures
//
// Every call runs under [Config.Timeout]. A call that times out, cannot
// reach Redis, or meets an outage reply (CLUSTERDOWN, LOADING, READONLY,
// OOM, BUSY, ...) returns an error matching [floodgate.ErrStoreUnavailable],
// and front ends apply their failure mode. A call returns by its deadline
// however long a node hangs: the calls in flight to each node are bounded
// ([DefaultMaxInFlight]), and a circuit breaker per node
// ([Config.BreakerFailures]) fails a silent node's calls at once until it
// answers a probe. [Store.Health] reports each node's state. With
// [Config.LazyConnect], New returns a store that answers
// ErrStoreUnavailable until Redis can be reached.
//
// Each decision carries its caller's deadline, in the Redis server's clock:
// a script that starts after it records nothing. Scripts are never retried,
// since a retry could charge twice, so a call that timed out may still have
// been counted. Errors that are not outages, a failed script ([ErrScript])
// or a reply of the wrong shape ([ErrReply]), do not match
// ErrStoreUnavailable: they mean a bug or a misconfiguration that failing
// open would hide. See docs/RESILIENCE.md.
//
// # Batches
//
// [Store.AllowBatch] decides the checks of one request together, all or
// nothing: in one script call when their keys share a hash slot (always on
// a single server or through Sentinel), and on a cluster in one call per
// slot, sent together, with refunds across slots when one slot denies.
//
// # Scripts
//
// The Lua files are embedded, and [Scripts] returns them so other languages
// can run the same algorithms on the same keys (see docs/LUA.md). They are
// sent with EVALSHA, falling back to EVAL on NOSCRIPT. Their "#!lua"
// shebang makes Redis refuse them, writing nothing, when it is over
// maxmemory under noeviction; they need Redis 7.0 or later.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/callbound"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

// Sentinel errors of this package, matched with errors.Is. Outages match
// floodgate.ErrStoreUnavailable instead.
var (
	// ErrScript means Redis answered with an error that is not an outage:
	// a script failed (a bug, or a key of the wrong type under the store's
	// prefix: WRONGTYPE), or the server refused the command (for example an
	// ACL without EVALSHA). It does not match floodgate.ErrStoreUnavailable.
	ErrScript = errors.New("redisstore: script failed")
	// ErrReply means a reply did not have the shape the script's contract
	// promises (an incompatible server or proxy, or a bug). It does not
	// match floodgate.ErrStoreUnavailable.
	ErrReply = errors.New("redisstore: unexpected reply")
)

// Store is a floodgate.Store backed by Redis. Create it with New or
// NewFromClient. It is safe for concurrent use.
type Store struct {
	client  rueidis.Client // the guard
	guard   *guard
	mon     *monitor
	owned   bool // the store made its client
	prefix  string
	timeout time.Duration
	clock   floodgate.Clock
	cluster bool // the client is a cluster client: a script's keys share a slot
	numbers numberStrings
}

var _ floodgate.Store = (*Store)(nil)

// New connects to Redis as cfg says and returns a Store that owns the
// connection: Close it when done. New fails with a *ConfigError for a bad
// cfg, and with an error matching floodgate.ErrStoreUnavailable if Redis
// cannot be reached within rueidis's dial timeout (5s) — unless
// cfg.LazyConnect is set: then it returns a store that answers
// ErrStoreUnavailable until it has connected in the background.
//
// The client is created with retries disabled, so a script is never sent
// twice.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opt := rueidis.ClientOption{
		InitAddress:  cfg.Addrs,
		Username:     cfg.Username,
		Password:     cfg.Password,
		TLSConfig:    cfg.TLS,
		SelectDB:     cfg.DB,
		DisableRetry: true, // a retried script could charge twice
		DisableCache: true, // the store never reads through the client-side cache
		ClientName:   "floodgate",
		// One pipelined connection per node: concurrent calls share fewer,
		// larger batches, so Redis makes fewer system calls per decision.
		PipelineMultiplex: -1,
	}
	switch {
	case cfg.FlushDelay == 0:
		opt.MaxFlushDelay = DefaultFlushDelay
	case cfg.FlushDelay > 0:
		opt.MaxFlushDelay = cfg.FlushDelay
	}
	mode := cfg.mode()
	name := strings.Join(cfg.Addrs, ",")
	switch mode {
	case ModeStandalone:
		opt.ForceSingleClient = true
	case ModeSentinel:
		name = "sentinel primary " + cfg.SentinelMaster
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet: cfg.SentinelMaster,
			Username:  cfg.SentinelUsername,
			Password:  cfg.SentinelPassword,
			TLSConfig: cfg.TLS,
			// Recover from a missed +switch-master event.
			TopologyRefreshInterval: 5 * time.Second,
		}
	}
	applyDial(&opt, &cfg)
	connect := func() (rueidis.Client, error) {
		client, err := rueidis.NewClient(opt)
		if err != nil {
			if refused := refusedSetUp(err, &cfg); refused != nil {
				return nil, refused // a misconfiguration, never an outage
			}
			return nil, fmt.Errorf("%w: redisstore: connecting to %s (%s): %w", floodgate.ErrStoreUnavailable, strings.Join(cfg.Addrs, ","), mode, connectError(err))
		}
		if mode == ModeCluster && client.Mode() != rueidis.ClientModeCluster {
			client.Close()
			return nil, &ConfigError{Field: "Mode", Value: "cluster", Reason: fmt.Sprintf("but %s is not a cluster node", cfg.Addrs[0])}
		}
		return client, nil
	}
	s := newStore(cfg, mode == ModeCluster)
	s.owned = true
	s.mon = newMonitor(s.guard, name, connect)
	client, err := connect()
	switch {
	case err == nil:
		s.mon.attach(client)
	case !cfg.LazyConnect:
		return nil, err
	default:
		msg := s.guard.failedConnecting(err)
		s.guard.logger.Error(s.guard.connectingMessage("until it can (LazyConnect)"), "error", msg)
	}
	s.mon.start()
	return s, nil
}

// NewFromClient returns a Store that runs on an existing rueidis client,
// which it does not own: Close the store when done, which stops its
// background checks and leaves the client open. cfg's KeyPrefix, Timeout,
// Clock, MaxInFlight, BreakerFailures and Logger apply; the connection
// fields must be left zero. Create the client with DisableRetry, so that
// no command on it is sent twice.
func NewFromClient(client rueidis.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, &ConfigError{Field: "client", Value: "nil", Reason: "must be a rueidis.Client"}
	}
	conn := []struct {
		field string
		set   bool
	}{
		{"Addrs", len(cfg.Addrs) > 0}, {"Mode", cfg.Mode != ModeAuto}, {"SentinelMaster", cfg.SentinelMaster != ""},
		{"SentinelUsername", cfg.SentinelUsername != ""}, {"SentinelPassword", cfg.SentinelPassword != ""},
		{"Username", cfg.Username != ""}, {"Password", cfg.Password != ""}, {"TLS", cfg.TLS != nil},
		{"TLSSkipHostnameVerification", cfg.TLSSkipHostnameVerification}, {"DB", cfg.DB != 0}, {"FlushDelay", cfg.FlushDelay != 0},
	}
	for _, f := range conn {
		if f.set {
			return nil, &ConfigError{Field: f.field, Value: "(set)", Reason: "is a connection setting; NewFromClient uses the client's own"}
		}
	}
	if err := cfg.validateStore(); err != nil {
		return nil, err
	}
	if cfg.LazyConnect {
		return nil, &ConfigError{Field: "LazyConnect", Value: "true", Reason: "is a connection setting; NewFromClient uses the client's own"}
	}
	s := newStore(cfg, client.Mode() == rueidis.ClientModeCluster)
	s.mon = newMonitor(s.guard, "redis", nil)
	s.mon.attach(client)
	s.mon.start()
	return s, nil
}

func newStore(cfg Config, cluster bool) *Store {
	g := &guard{maxInFlight: cfg.MaxInFlight, threshold: int64(cfg.BreakerFailures), timeout: cfg.Timeout, base: time.Now(), logger: cfg.Logger}
	if g.timeout == 0 {
		g.timeout = DefaultTimeout
	}
	if g.maxInFlight == 0 {
		g.maxInFlight = DefaultMaxInFlight
	}
	if g.threshold == 0 {
		g.threshold = DefaultBreakerFailures
	}
	if g.logger == nil {
		g.logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{client: g, guard: g, prefix: cfg.KeyPrefix, timeout: cfg.Timeout, clock: cfg.Clock, cluster: cluster}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	return s
}

// Close stops the store's background checks and closes the connection if
// the store created it (New); a client passed to NewFromClient stays open.
// The store must not be used after.
func (s *Store) Close() {
	s.mon.close()
	if s.owned {
		s.guard.Close()
	}
}

// Timeout returns the bound of every store call: Config.Timeout, or
// DefaultTimeout. The library front ends (httplimit, grpclimit) refuse a
// Timeout of their own at or above it, which would never end a call first.
func (s *Store) Timeout() time.Duration { return s.timeout }

// connected returns an error matching floodgate.ErrStoreUnavailable while
// a store made with Config.LazyConnect has not connected yet.
func (s *Store) connected() error {
	if s.guard.conn.Load() == nil {
		return s.guard.unconnected()
	}
	return nil
}

// deadline returns the ARGV that carries ctx's deadline, in the clock of
// the node that serves slot, to a script: "" if ctx has none or the node's
// clock is unknown. A script that starts later charges nothing (prelude.lua).
func (s *Store) deadline(ctx context.Context, slot int) string {
	dl, ok := ctx.Deadline()
	if !ok {
		return ""
	}
	c := s.guard.conn.Load()
	if c == nil {
		return ""
	}
	n := c.topo.Load().nodeFor(uint16(slot))
	if n == nil || !n.clockOK.Load() {
		return ""
	}
	return strconv.FormatInt(n.offset.Load()+dl.Sub(s.guard.base).Microseconds(), 10)
}

// Allow is AllowN with a cost of 1.
func (s *Store) Allow(ctx context.Context, key string, limit floodgate.Limit) (floodgate.Decision, error) {
	return s.AllowN(ctx, key, limit, 1)
}

// AllowN decides, atomically in Redis, whether a request of cost n fits
// limit for key, and records it if so; a cost of 0 reads the key and
// writes nothing. See floodgate.Store.
func (s *Store) AllowN(ctx context.Context, key string, limit floodgate.Limit, n int64) (floodgate.Decision, error) {
	if d, err := limitcheck.Allow(limit, n); err != nil {
		return d, err
	}
	reply, err := s.run(ctx, key, limit, opAllow, n)
	if err != nil {
		return floodgate.Decision{Limit: limit.Quota}, err
	}
	return decode(limit, reply)
}

// decode checks an "allow" reply against the scripts' contract and turns it
// into a Decision.
func decode(limit floodgate.Limit, reply rueidis.RedisMessage) (floodgate.Decision, error) {
	vals, err := reply.ToArray()
	if err != nil || len(vals) != 4 {
		return floodgate.Decision{Limit: limit.Quota}, replyError(limit, reply, "an array of 4 integers")
	}
	return decodeValues(limit, vals, reply)
}

// decodeValues checks the four integers of an "allow" reply, vals, found
// in reply (which error messages show), and turns them into a Decision.
func decodeValues(limit floodgate.Limit, vals []rueidis.RedisMessage, reply rueidis.RedisMessage) (floodgate.Decision, error) {
	d := floodgate.Decision{Limit: limit.Quota}
	var v [4]int64
	for i := range vals {
		if !vals[i].IsInt64() {
			return d, replyError(limit, reply, "an array of 4 integers")
		}
		v[i], _ = vals[i].ToInt64()
	}
	allowed, remaining, retry, reset := v[0], v[1], v[2], v[3]
	if allowed != 0 && allowed != 1 || remaining < 0 || remaining > limit.Quota || retry < 0 || reset < 0 || (allowed == 1) != (retry == 0) {
		return d, replyError(limit, reply, "{allowed 0|1, 0 <= remaining <= quota, retry_after_us >= 0 (0 exactly when allowed), reset_after_us >= 0}")
	}
	d.Allowed = allowed == 1
	d.Remaining = remaining
	d.RetryAfter = time.Duration(retry) * time.Microsecond
	d.ResetAfter = time.Duration(reset) * time.Microsecond
	return d, nil
}

// RefundN gives back n units of quota that an admitted request of cost n
// took from key, atomically in Redis. See floodgate.Store.
func (s *Store) RefundN(ctx context.Context, key string, limit floodgate.Limit, n int64) error {
	if _, err := limitcheck.Allow(limit, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := s.connected(); err != nil {
		return err
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return refundReply(ctx, limit, s.exec(ctx, key, limit, opRefund, n))
}

// refundReply checks the result of a "refund" call under ctx against the
// scripts' contract.
func refundReply(ctx context.Context, limit floodgate.Limit, res rueidis.RedisResult) error {
	reply, err := res.ToMessage()
	if err != nil {
		return classify(ctx, scripts[limit.Algorithm].file, err)
	}
	if v, err := reply.ToInt64(); err != nil || v != 0 && v != 1 {
		return replyError(limit, reply, "the integer 0 or 1")
	}
	return nil
}

// Reset deletes key's state under limit's algorithm: the whole quota is
// available again.
func (s *Store) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	if err := s.connected(); err != nil {
		return err
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	k := s.Key(key, limit.Algorithm)
	if err := s.client.Do(ctx, s.client.B().Del().Key(k).Build()).Error(); err != nil {
		return classify(ctx, "DEL "+strconv.Quote(limit.Algorithm.String()), err)
	}
	return nil
}

const (
	opAllow  = "allow"
	opRefund = "refund"
)

// bounded returns ctx bounded by the store's timeout: ctx itself when its
// own deadline comes first, so that a call sets one deadline, not two;
// otherwise a child of ctx with the timeout. A call the engine makes in
// the background, which no request waits on, may carry a bound of its own
// (internal/callbound) in place of the timeout.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() != nil {
		return ctx, func() {} // gone already: nothing is sent
	}
	timeout := s.timeout
	if d, ok := callbound.From(ctx); ok {
		timeout = d
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// run executes limit's script for op on key under the store's timeout and
// returns its reply, or an error already classified.
func (s *Store) run(ctx context.Context, key string, limit floodgate.Limit, op string, n int64) (rueidis.RedisMessage, error) {
	if err := s.connected(); err != nil {
		return rueidis.RedisMessage{}, err
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	msg, err := s.exec(ctx, key, limit, op, n).ToMessage()
	if err != nil {
		return msg, classify(ctx, scripts[limit.Algorithm].file, err)
	}
	return msg, nil
}

// exec executes limit's script for op on key under ctx. An "allow" carries
// ctx's deadline: if the script starts after it, it records nothing. So
// does a fixed window's refund: the script gives back to the window
// containing its own now, so one that starts late could credit the next
// window (the engine gives a lease's units back with their window's end
// as the deadline). Other refunds are right whenever they happen.
func (s *Store) exec(ctx context.Context, key string, limit floodgate.Limit, op string, n int64) rueidis.RedisResult {
	now := ""
	if s.clock != nil {
		now = strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
	}
	k := s.Key(key, limit.Algorithm)
	args := s.numbers.scriptArgs(op, limit, n, now)
	if op == opAllow || op == opRefund && limit.Algorithm == floodgate.FixedWindow {
		slot := 0
		if s.cluster {
			slot = keySlot(k)
		}
		if dl := s.deadline(ctx, slot); dl != "" {
			if len(args) == 5 {
				args = append(args, "") // ARGV[6], the bucket's refill: the default
			}
			args = append(args, dl)
		}
	}
	return scripts[limit.Algorithm].lua.Exec(ctx, s.client, []string{k}, args)
}

// scriptArgs returns the ARGV of a call of limit's script for op, of cost n,
// at now ("" for Redis's clock). A nil c formats every number.
func (c *numberStrings) scriptArgs(op string, limit floodgate.Limit, n int64, now string) []string {
	args := make([]string, 5, 7)
	args[0] = op
	args[1] = c.format(limit.Quota)
	args[2] = c.format(limit.Window.Microseconds())
	args[3] = c.format(n)
	args[4] = now
	// The script's refill defaults to the capacity: leaving it out then
	// saves Redis parsing a number.
	if limit.Algorithm == floodgate.TokenBucket && limit.Refill != 0 && limit.Refill != limit.Quota {
		args = append(args, c.format(limit.Refill))
	}
	return args
}

// numberStrings keeps the decimal strings of recent quotas, windows and
// costs, so that a decision under a limit seen before formats none of
// them: each slot holds the last number that hashed to it. It is safe for
// concurrent use; its zero value is empty.
type numberStrings [64]atomic.Pointer[numberString]

type numberString struct {
	v int64
	s string
}

// format returns v in decimal.
func (c *numberStrings) format(v int64) string {
	if c == nil || uint64(v) < 100 { // strconv has the small ones ready
		return strconv.FormatInt(v, 10)
	}
	slot := &c[uint64(v)*0x9E3779B97F4A7C15>>58]
	if p := slot.Load(); p != nil && p.v == v {
		return p.s
	}
	p := &numberString{v, strconv.FormatInt(v, 10)}
	slot.Store(p)
	return p.s
}

func replyError(limit floodgate.Limit, reply rueidis.RedisMessage, want string) error {
	return fmt.Errorf("%w: %s answered %s, want %s", ErrReply, scripts[limit.Algorithm].file, describe(reply), want)
}

// describe formats a reply for an error message, bounded in length.
func describe(m rueidis.RedisMessage) string {
	s := m.String()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// deadlineReply starts the error reply of a script that started after its
// caller's deadline and recorded nothing.
const deadlineReply = "DEADLINE"

// outages are the prefixes of Redis error replies that mean the server
// cannot serve the store right now, not that the command was wrong.
var outages = []string{
	"CLUSTERDOWN", "LOADING", "TRYAGAIN", "MASTERDOWN", "READONLY", "BUSY",
	"OOM", "NOREPLICAS", "MISCONF", "MOVED", "ASK", "NOSCRIPT",
}

// classify wraps err from a call under ctx: outages (timeouts, connection
// failures, outage replies) match floodgate.ErrStoreUnavailable; other
// Redis error replies match ErrScript.
//
// A script's DEADLINE reply is returned only once ctx has ended: the
// deadline may pass a little earlier in Redis's clock, and the caller must
// see its own deadline passed (the engine then denies instead of following
// the failure mode).
func classify(ctx context.Context, what string, err error) error {
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		msg := rerr.Error()
		if strings.HasPrefix(msg, deadlineReply) {
			if _, ok := ctx.Deadline(); ok {
				<-ctx.Done() // the store's calls always carry one: never forever
			}
			return fmt.Errorf("%w: redisstore: %s: %w: %w", floodgate.ErrStoreUnavailable, what, context.DeadlineExceeded, err)
		}
		for _, p := range outages {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%w: redisstore: %s: %w", floodgate.ErrStoreUnavailable, what, err)
			}
		}
		return fmt.Errorf("%w: %s: %w", ErrScript, what, err)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w (%w)", ctxErr, err)
	}
	return fmt.Errorf("%w: redisstore: %s: %w", floodgate.ErrStoreUnavailable, what, err)
}

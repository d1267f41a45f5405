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
// reach Redis, or meets an outage reply (CLUSTERDOWN, LOADING, READONLY after
// a failover, OOM, BUSY, ...) returns an error matching
// [floodgate.ErrStoreUnavailable], and front ends apply their failure mode.
// Scripts are never retried: a retried script could charge a request twice,
// so the outcome of a call that timed out is unknown (the request may or may
// not have been counted). Errors that are not outages — a script that failed
// ([ErrScript]) or a reply of the wrong shape ([ErrReply]) — do not match
// ErrStoreUnavailable: they mean a bug or a misconfiguration that retrying
// or failing open would only hide.
//
// # Batches
//
// [Store.AllowBatch] decides the checks of one request together, all or
// nothing: the checks whose keys share a hash slot (all of them on a single
// server or through Sentinel) in one call of the batch script, which undoes
// what it took when one of them is denied; on a cluster, one call per slot,
// sent together, and refunds across slots when one slot denies.
//
// # Scripts
//
// The Lua files are embedded, and [Scripts] returns them so other languages
// can run the same algorithms on the same keys (see docs/LUA.md). Scripts are
// sent with EVALSHA and fall back to EVAL when Redis answers NOSCRIPT (after
// a restart, a failover or SCRIPT FLUSH). They need Redis 6.2 or later
// (ZRANGE ... BYSCORE, and writes after TIME under effects replication); the
// tests run on 7.0.
package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

// DefaultTimeout is the per-call timeout used when Config.Timeout is zero.
const DefaultTimeout = 50 * time.Millisecond

// DefaultFlushDelay is the flush delay used when Config.FlushDelay is zero.
const DefaultFlushDelay = 20 * time.Microsecond

// maxFlushDelay bounds Config.FlushDelay: the delay adds up to itself to a
// call's latency.
const maxFlushDelay = time.Millisecond

// DefaultKeyPrefix is the key prefix used when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "fg:"

// Mode selects how the store connects to Redis.
type Mode uint8

// The modes. The zero value, ModeAuto, infers the mode from the Config.
const (
	// ModeAuto uses Sentinel if SentinelMaster is set; otherwise it asks
	// the server at Addrs and uses Cluster if it runs in cluster mode, and a
	// single server if not.
	ModeAuto Mode = iota
	// ModeStandalone talks to the single server at Addrs[0].
	ModeStandalone
	// ModeSentinel asks the sentinels at Addrs for the primary of
	// SentinelMaster and follows it across failovers.
	ModeSentinel
	// ModeCluster discovers a Redis Cluster from the nodes at Addrs, and
	// fails if they are not cluster nodes.
	ModeCluster
)

var modeNames = [...]string{ModeAuto: "auto", ModeStandalone: "standalone", ModeSentinel: "sentinel", ModeCluster: "cluster"}

// String returns the mode's name, such as "cluster".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Config configures a Store. The zero value is not usable: Addrs is
// required. Every other field has a working default.
type Config struct {
	// Addrs are the host:port addresses to connect to: the server, the
	// sentinels (ModeSentinel) or any cluster nodes (ModeCluster).
	Addrs []string
	// Mode selects standalone, Sentinel or Cluster. Zero (ModeAuto) infers
	// it.
	Mode Mode
	// SentinelMaster is the name of the primary the sentinels monitor.
	// Setting it selects ModeSentinel under ModeAuto.
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (empty: no AUTH). Username and Password apply to the Redis servers.
	SentinelUsername, SentinelPassword string
	// Username and Password authenticate with AUTH (Redis 6 ACL users);
	// leave Username empty for the default user.
	Username, Password string
	// TLS, if not nil, connects with TLS (to the sentinels too).
	TLS *tls.Config
	// DB selects the database (standalone and Sentinel only: a cluster has
	// only database 0).
	DB int
	// KeyPrefix is prepended to every key; empty means DefaultKeyPrefix. It
	// must not contain '{' or '}', which would break the hash tags.
	KeyPrefix string
	// Timeout bounds every store call, from sending the script to reading
	// its reply; zero means DefaultTimeout. A call never blocks longer
	// (plus scheduling delays), even when Redis hangs.
	Timeout time.Duration
	// FlushDelay is how long the connection's writer may pause after
	// sending a batch of calls, to gather the calls made meanwhile into the
	// next batch (rueidis's MaxFlushDelay). Under load, fewer and larger
	// batches mean fewer system calls on both sides: with one connection
	// per node it halved the Redis CPU a no-op script costs per call at 64
	// concurrent callers, and raised decisions per second
	// (docs/PERFORMANCE.md). A lone caller never waits.
	// Zero means DefaultFlushDelay (20µs); a negative value sends every
	// batch at once. At most 1ms.
	FlushDelay time.Duration
	// Clock, if not nil, supplies the time of each decision instead of
	// Redis's TIME. It is meant for tests and simulations: Redis still
	// expires keys on its own clock.
	Clock floodgate.Clock
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field  string // the field's name, such as "KeyPrefix"
	Value  string // the bad value, quoted or formatted
	Reason string // what is wrong with it
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("redisstore: invalid config: %s %s %s", e.Field, e.Value, e.Reason)
}

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
	client  rueidis.Client
	owned   bool // Close closes client
	prefix  string
	timeout time.Duration
	clock   floodgate.Clock
	cluster bool // the client is a cluster client: a script's keys share a slot
}

var _ floodgate.Store = (*Store)(nil)

// validateStore checks the fields every store uses, whoever made its
// connection: the key prefix and the timeout.
func (c *Config) validateStore() error {
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return &ConfigError{Field: "KeyPrefix", Value: strconv.Quote(c.KeyPrefix), Reason: "must not contain '{' or '}' (they would break the Redis Cluster hash tags)"}
	}
	if c.FlushDelay > maxFlushDelay {
		return &ConfigError{Field: "FlushDelay", Value: c.FlushDelay.String(), Reason: "must be at most 1ms (it adds up to itself to a call's latency; negative turns it off)"}
	}
	if c.Timeout < 0 {
		return &ConfigError{Field: "Timeout", Value: c.Timeout.String(), Reason: "must not be negative (zero means the default, 50ms)"}
	}
	return nil
}

// Validate reports whether c is usable, as a *ConfigError naming the first
// bad field. New calls it.
func (c *Config) Validate() error {
	if len(c.Addrs) == 0 {
		return &ConfigError{Field: "Addrs", Value: "[]", Reason: "must name at least one host:port"}
	}
	for i, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return &ConfigError{Field: fmt.Sprintf("Addrs[%d]", i), Value: strconv.Quote(a), Reason: "is not host:port"}
		}
	}
	if c.Mode > ModeCluster {
		return &ConfigError{Field: "Mode", Value: c.Mode.String(), Reason: "is not auto, standalone, sentinel or cluster"}
	}
	mode := c.mode()
	switch {
	case mode == ModeSentinel && c.SentinelMaster == "":
		return &ConfigError{Field: "SentinelMaster", Value: `""`, Reason: "must name the monitored primary in sentinel mode"}
	case mode != ModeSentinel && c.SentinelMaster != "":
		return &ConfigError{Field: "SentinelMaster", Value: strconv.Quote(c.SentinelMaster), Reason: "applies to sentinel mode only, but Mode is " + c.Mode.String()}
	case mode == ModeStandalone && len(c.Addrs) > 1:
		return &ConfigError{Field: "Addrs", Value: strconv.Quote(strings.Join(c.Addrs, ",")), Reason: "must hold exactly one address in standalone mode"}
	case c.DB < 0:
		return &ConfigError{Field: "DB", Value: strconv.Itoa(c.DB), Reason: "must not be negative"}
	case c.DB != 0 && mode == ModeCluster:
		return &ConfigError{Field: "DB", Value: strconv.Itoa(c.DB), Reason: "must be 0 in cluster mode (a cluster has only database 0)"}
	}
	return c.validateStore()
}

func (c *Config) mode() Mode {
	if c.Mode == ModeAuto && c.SentinelMaster != "" {
		return ModeSentinel
	}
	return c.Mode
}

// New connects to Redis as cfg says and returns a Store that owns the
// connection: Close it when done. New fails with a *ConfigError for a bad
// cfg, and with an error matching floodgate.ErrStoreUnavailable if Redis
// cannot be reached within rueidis's dial timeout (5s).
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
		// One pipelined connection per node (-1), as rueidis does for a
		// cluster, rather than up to four for a single server (one per
		// two cores): concurrent calls share fewer, larger batches, which
		// costs Redis fewer system calls per decision (docs/PERFORMANCE.md).
		PipelineMultiplex: -1,
	}
	switch {
	case cfg.FlushDelay == 0:
		opt.MaxFlushDelay = DefaultFlushDelay
	case cfg.FlushDelay > 0:
		opt.MaxFlushDelay = cfg.FlushDelay
	}
	mode := cfg.mode()
	switch mode {
	case ModeStandalone:
		opt.ForceSingleClient = true
	case ModeSentinel:
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet: cfg.SentinelMaster,
			Username:  cfg.SentinelUsername,
			Password:  cfg.SentinelPassword,
			TLSConfig: cfg.TLS,
			// Recover from a missed +switch-master event.
			TopologyRefreshInterval: 5 * time.Second,
		}
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("%w: redisstore: connecting to %s (%s): %w", floodgate.ErrStoreUnavailable, strings.Join(cfg.Addrs, ","), mode, err)
	}
	if mode == ModeCluster && client.Mode() != rueidis.ClientModeCluster {
		client.Close()
		return nil, &ConfigError{Field: "Mode", Value: "cluster", Reason: fmt.Sprintf("but %s is not a cluster node", cfg.Addrs[0])}
	}
	s := newStore(client, cfg)
	s.owned = true
	return s, nil
}

// NewFromClient returns a Store that runs on an existing rueidis client,
// which it does not own: Close leaves it open. Only cfg's KeyPrefix, Timeout
// and Clock apply; the connection fields must be left zero. The client
// should be created with DisableRetry (rueidis never retries scripts sent as
// this store sends them, but other commands on a shared client would be).
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
		{"Username", cfg.Username != ""}, {"Password", cfg.Password != ""}, {"TLS", cfg.TLS != nil}, {"DB", cfg.DB != 0}, {"FlushDelay", cfg.FlushDelay != 0},
	}
	for _, f := range conn {
		if f.set {
			return nil, &ConfigError{Field: f.field, Value: "(set)", Reason: "is a connection setting; NewFromClient uses the client's own"}
		}
	}
	if err := cfg.validateStore(); err != nil {
		return nil, err
	}
	return newStore(client, cfg), nil
}

func newStore(client rueidis.Client, cfg Config) *Store {
	s := &Store{client: client, prefix: cfg.KeyPrefix, timeout: cfg.Timeout, clock: cfg.Clock, cluster: client.Mode() == rueidis.ClientModeCluster}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	return s
}

// Close closes the connection if the store created it (New), and does
// nothing for a store from NewFromClient. The store must not be used after.
func (s *Store) Close() {
	if s.owned {
		s.client.Close()
	}
}

// Allow is AllowN with a cost of 1.
func (s *Store) Allow(ctx context.Context, key string, limit floodgate.Limit) (floodgate.Decision, error) {
	return s.AllowN(ctx, key, limit, 1)
}

// AllowN decides, atomically in Redis, whether a request of cost n fits
// limit for key, and records it if so. See floodgate.Store.
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
	d := floodgate.Decision{Limit: limit.Quota}
	vals, err := reply.ToArray()
	if err != nil || len(vals) != 4 {
		return d, replyError(limit, reply, "an array of 4 integers")
	}
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
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
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
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
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

// run executes limit's script for op on key under the store's timeout and
// returns its reply, or an error already classified.
func (s *Store) run(ctx context.Context, key string, limit floodgate.Limit, op string, n int64) (rueidis.RedisMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	msg, err := s.exec(ctx, key, limit, op, n).ToMessage()
	if err != nil {
		return msg, classify(ctx, scripts[limit.Algorithm].file, err)
	}
	return msg, nil
}

// exec executes limit's script for op on key under ctx.
func (s *Store) exec(ctx context.Context, key string, limit floodgate.Limit, op string, n int64) rueidis.RedisResult {
	now := ""
	if s.clock != nil {
		now = strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
	}
	return scripts[limit.Algorithm].lua.Exec(ctx, s.client, []string{s.Key(key, limit.Algorithm)}, scriptArgs(op, limit, n, now))
}

// scriptArgs returns the ARGV of a call of limit's script for op, of cost n,
// at now ("" for Redis's clock).
func scriptArgs(op string, limit floodgate.Limit, n int64, now string) []string {
	args := make([]string, 5, 6)
	args[0] = op
	args[1] = strconv.FormatInt(limit.Quota, 10)
	args[2] = strconv.FormatInt(limit.Window.Microseconds(), 10)
	args[3] = strconv.FormatInt(n, 10)
	args[4] = now
	// The script's refill defaults to the capacity: leaving it out then
	// saves Redis parsing a number.
	if limit.Algorithm == floodgate.TokenBucket && limit.Refill != 0 && limit.Refill != limit.Quota {
		args = append(args, strconv.FormatInt(limit.Refill, 10))
	}
	return args
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

// outages are the prefixes of Redis error replies that mean the server
// cannot serve the store right now, not that the command was wrong.
var outages = []string{
	"CLUSTERDOWN", "LOADING", "TRYAGAIN", "MASTERDOWN", "READONLY", "BUSY",
	"OOM", "NOREPLICAS", "MISCONF", "MOVED", "ASK", "NOSCRIPT",
}

// classify wraps err from a call under ctx: outages (timeouts, connection
// failures, outage replies) match floodgate.ErrStoreUnavailable; other
// Redis error replies match ErrScript.
func classify(ctx context.Context, what string, err error) error {
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		msg := rerr.Error()
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

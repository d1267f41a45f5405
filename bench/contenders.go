package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// The limit every contender enforces: 100 requests per second per key (a
// bucket of 100 refilled at 100 per second, for the bucket-shaped ones).
// With 10,000 keys no key comes near it, so almost every request is
// admitted; one hot key admits 100 per second and denies the rest.
const (
	Quota  = 100
	Window = time.Second
)

// A Contender is one rate limiter under test.
type Contender struct {
	// ID names it in flags and file names: fg-tb, fg-swl, redis_rate,
	// ulule, throttled.
	ID string
	// Name names it in tables and charts.
	Name string
	// Allow decides one request for key and reports whether it was
	// admitted.
	Allow func(ctx context.Context, key string) (bool, error)
	close func()
}

// Close releases the contender's clients.
func (c *Contender) Close() {
	if c.close != nil {
		c.close()
	}
}

// RedisContenderIDs lists the Redis contenders in table order: floodgate's
// token bucket and sliding-window log first, then the peers, then the
// floors, called like floodgate's scripts: a Lua script that does nothing
// (what any script-based limiter costs at least on this machine), and one
// per algorithm that runs exactly the Redis commands floodgate's script
// runs to admit a request, with no arithmetic and no branches (what that
// algorithm's state costs at least).
var RedisContenderIDs = []string{"fg-tb", "fg-swl", "redis_rate", "ulule", "throttled", "floor", "floor-tb", "floor-swl"}

// CommandFloors maps each floodgate contender to the floor that runs its
// commands.
var CommandFloors = map[string]string{"fg-tb": "floor-tb", "fg-swl": "floor-swl"}

// UnguardedContenderIDs are floodgate's Redis contenders with the store's
// guard taken off: no per-node in-flight bound and no circuit breaker
// (redisstore.Config MaxInFlight and BreakerFailures negative). They run
// only when asked for with -contenders, beside fg-tb and fg-swl, to measure
// what the guard costs in interleaved runs (docs/PERFORMANCE.md).
var UnguardedContenderIDs = []string{"fg-tb-unguarded", "fg-swl-unguarded"}

// floorScript does nothing and answers like floodgate's scripts.
const floorScript = "return {1, 0, 0, 0}"

// floorTBScript runs the token bucket's commands when it admits: TIME, GET
// of the 16-byte state and SET of it with PX (ARGV[1] the state, ARGV[2]
// the PX in ms), computing nothing.
const floorTBScript = `redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, 0, 0, 0}`

// floorSWLScript runs the sliding-window log's commands when it admits a
// request of cost 1 into a log that holds entries: TIME, ZREMRANGEBYSCORE
// of what left the window, ZCARD, ZADD NX of now and PEXPIRE (ARGV[1] the
// window in µs, ARGV[2] in ms). The one subtraction and the two formats are
// the least that names the window's start and the entry.
const floorSWLScript = `local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - ARGV[1]))
redis.call('ZCARD', key)
local e = string.format('%d', now)
redis.call('ZADD', key, 'NX', e, e)
redis.call('PEXPIRE', key, ARGV[2])
return {1, 0, 0, 0}`

// NewRedisContender returns the contender id on backend b, keeping its keys
// under prefix (which must hold no braces). Every contender has its own
// client: floodgate talks to Redis through redisstore's rueidis client (one
// auto-pipelined connection per node, redisstore.DefaultFlushDelay), the
// floor through rueidis set up the same way, the peers through go-redis v9
// with its defaults (a pool of 10 connections per GOMAXPROCS).
func NewRedisContender(id string, b Backend, prefix string) (*Contender, error) {
	switch id {
	case "fg-tb", "fg-swl", "fg-tb-unguarded", "fg-swl-unguarded":
		limit := floodgate.NewTokenBucket(Quota, Quota, Window)
		name := "floodgate token bucket"
		if strings.HasPrefix(id, "fg-swl") {
			limit = floodgate.NewLimit(floodgate.SlidingWindowLog, Quota, Window)
			name = "floodgate sliding-window log"
		}
		mode := redisstore.ModeStandalone
		if b.Cluster {
			mode = redisstore.ModeCluster
		}
		// A generous timeout: the benchmark measures latency, and a call
		// cut off at the default 50ms would be counted as an error.
		cfg := redisstore.Config{Addrs: b.Addrs, Mode: mode, KeyPrefix: prefix, Timeout: 3 * time.Second}
		if strings.HasSuffix(id, "-unguarded") {
			cfg.MaxInFlight, cfg.BreakerFailures = -1, -1
			name += " (no in-flight bound, no breaker)"
		}
		s, err := redisstore.New(cfg)
		if err != nil {
			return nil, err
		}
		return &Contender{ID: id, Name: name, close: s.Close, Allow: func(ctx context.Context, key string) (bool, error) {
			d, err := s.Allow(ctx, key, limit)
			return d.Allowed, err
		}}, nil
	case "redis_rate":
		rdb := b.GoRedis()
		l := redisrate.NewLimiter(rdb)
		limit := redisrate.PerSecond(Quota)
		return &Contender{ID: id, Name: "redis_rate (GCRA)", close: func() { _ = rdb.Close() }, Allow: func(ctx context.Context, key string) (bool, error) {
			res, err := l.Allow(ctx, prefix+key, limit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		}}, nil
	case "ulule":
		rdb := b.GoRedis()
		store, err := ululeredis.NewStoreWithOptions(rdb.(ululeredis.Client), ulule.StoreOptions{Prefix: prefix + "ulule"})
		if err != nil {
			_ = rdb.Close()
			return nil, fmt.Errorf("ulule redis store: %w", err)
		}
		l := ulule.New(store, ulule.Rate{Period: Window, Limit: Quota})
		return &Contender{ID: id, Name: "ulule/limiter (fixed window)", close: func() { _ = rdb.Close() }, Allow: func(ctx context.Context, key string) (bool, error) {
			lc, err := l.Get(ctx, key)
			if err != nil {
				return false, err
			}
			return !lc.Reached, nil
		}}, nil
	case "throttled":
		rdb := b.GoRedis()
		store, err := goredisstore.NewCtx(rdb, prefix)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		// throttled's limit is MaxBurst+1 at once, refilled at MaxRate.
		l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerSec(Quota), MaxBurst: Quota - 1})
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &Contender{ID: id, Name: "throttled (GCRA, CAS)", close: func() { _ = rdb.Close() }, Allow: func(ctx context.Context, key string) (bool, error) {
			limited, _, err := l.RateLimitCtx(ctx, key, 1)
			return !limited && err == nil, err
		}}, nil
	case "floor", "floor-tb", "floor-swl":
		// Connected as redisstore connects, so that the floor is floodgate's.
		opt := rueidis.ClientOption{InitAddress: b.Addrs, MaxFlushDelay: redisstore.DefaultFlushDelay, PipelineMultiplex: -1}
		if !b.Cluster {
			opt.ForceSingleClient = true
		}
		client, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, err
		}
		src, name, args := floorScript, "floor: no-op Lua script (rueidis)", []string(nil)
		switch id {
		case "floor-tb":
			src, name = floorTBScript, "floor: the token bucket's commands (rueidis)"
			args = []string{string(make([]byte, 16)), strconv.FormatInt(Window.Milliseconds(), 10)}
		case "floor-swl":
			src, name = floorSWLScript, "floor: the sliding-window log's commands (rueidis)"
			args = []string{strconv.FormatInt(Window.Microseconds(), 10), strconv.FormatInt(Window.Milliseconds(), 10)}
		}
		script := rueidis.NewLuaScript(src)
		return &Contender{ID: id, Name: name, close: client.Close, Allow: func(ctx context.Context, key string) (bool, error) {
			// The key is hash-tagged as floodgate's are, so a cluster
			// routes it the same way.
			vals, err := script.Exec(ctx, client, []string{prefix + "{" + key + "}"}, args).ToArray()
			if err != nil {
				return false, err
			}
			if len(vals) != 4 {
				return false, fmt.Errorf("%s script answered %d values, want 4", id, len(vals))
			}
			allowed, err := vals[0].AsInt64()
			return allowed == 1, err
		}}, nil
	}
	return nil, fmt.Errorf("unknown contender %q (want one of %v or %v)", id, RedisContenderIDs, UnguardedContenderIDs)
}

// ensure the go-redis clients satisfy the peers' narrow interfaces.
var (
	_ ululeredis.Client = (*redis.Client)(nil)
	_ ululeredis.Client = (*redis.ClusterClient)(nil)
)

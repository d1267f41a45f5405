package bench

import (
	"context"
	"fmt"
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
// token bucket and sliding-window log first, then the peers, then the floor
// (a Lua script that does nothing, called like floodgate's: what any
// script-based limiter costs at least on this machine).
var RedisContenderIDs = []string{"fg-tb", "fg-swl", "redis_rate", "ulule", "throttled", "floor"}

// UnguardedContenderIDs are floodgate's Redis contenders with the store's
// guard taken off: no per-node in-flight bound and no circuit breaker
// (redisstore.Config MaxInFlight and BreakerFailures negative). They run
// only when asked for with -contenders, beside fg-tb and fg-swl, to measure
// what the guard costs in interleaved runs (docs/PERFORMANCE.md).
var UnguardedContenderIDs = []string{"fg-tb-unguarded", "fg-swl-unguarded"}

// floorScript does nothing and answers like floodgate's scripts.
const floorScript = "return {1, 0, 0, 0}"

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
	case "floor":
		// Connected as redisstore connects, so that the floor is floodgate's.
		opt := rueidis.ClientOption{InitAddress: b.Addrs, MaxFlushDelay: redisstore.DefaultFlushDelay, PipelineMultiplex: -1}
		if !b.Cluster {
			opt.ForceSingleClient = true
		}
		client, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, err
		}
		script := rueidis.NewLuaScript(floorScript)
		return &Contender{ID: id, Name: "floor: no-op Lua script (rueidis)", close: client.Close, Allow: func(ctx context.Context, key string) (bool, error) {
			// The key is hash-tagged as floodgate's are, so a cluster
			// routes it the same way.
			vals, err := script.Exec(ctx, client, []string{prefix + "{" + key + "}"}, nil).ToArray()
			if err != nil {
				return false, err
			}
			if len(vals) != 4 {
				return false, fmt.Errorf("floor script answered %d values, want 4", len(vals))
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

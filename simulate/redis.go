package simulate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// RedisOptions selects the Redis server, cluster or Sentinel-managed primary
// a Redis backend runs on.
type RedisOptions struct {
	// Addrs holds one host:port for a standalone server, any nodes of a
	// cluster, or the sentinels.
	Addrs []string
	// Cluster requires Addrs to be Redis Cluster nodes.
	Cluster bool
	// SentinelMaster, if set, makes Addrs sentinels and names the primary
	// they monitor. It excludes Cluster.
	SentinelMaster string
	// KeyPrefix is prepended to every key. Empty means a prefix unique to
	// this backend, "fgsim:" and 8 random bytes in hex, so that concurrent
	// simulations on one server never share keys.
	KeyPrefix string
	// Timeout bounds each call; zero means 2 seconds.
	Timeout time.Duration
}

// NewRedisBackend returns a Backend on the Redis store (package redisstore)
// with its clock set to a manual clock, so scripts take the virtual time from
// the simulation, and memory measured with MEMORY USAGE ... SAMPLES 0 (exact
// for a sorted set). Close it when done.
//
// Redis still expires keys on its own clock, which runs far slower than the
// simulation's: a key's expiry only matters if it falls within the real
// milliseconds the simulation takes, which it does not for windows of a
// second or more.
func NewRedisBackend(ctx context.Context, o RedisOptions) (*Backend, error) {
	if len(o.Addrs) == 0 {
		return nil, fmt.Errorf("simulate: RedisOptions.Addrs is empty")
	}
	if o.Cluster && o.SentinelMaster != "" {
		return nil, fmt.Errorf("simulate: RedisOptions: Cluster and SentinelMaster %q exclude each other", o.SentinelMaster)
	}
	if o.KeyPrefix == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.KeyPrefix = "fgsim:" + hex.EncodeToString(b[:]) + ":"
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	opt := rueidis.ClientOption{
		InitAddress:       o.Addrs,
		DisableRetry:      true,
		DisableCache:      true,
		ForceSingleClient: !o.Cluster && o.SentinelMaster == "",
		ClientName:        "floodgate-simulate",
	}
	if o.SentinelMaster != "" {
		opt.Sentinel = rueidis.SentinelOption{MasterSet: o.SentinelMaster}
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("simulate: connecting to %s: %w", strings.Join(o.Addrs, ","), err)
	}
	if o.Cluster && client.Mode() != rueidis.ClientModeCluster {
		client.Close()
		return nil, fmt.Errorf("simulate: %s is not a Redis Cluster node", o.Addrs[0])
	}
	clock := clocktest.NewManual(time.Unix(0, 0))
	s, err := redisstore.NewFromClient(client, redisstore.Config{KeyPrefix: o.KeyPrefix, Timeout: o.Timeout, Clock: clock})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("simulate: %w", err)
	}
	name := "redis"
	switch {
	case o.Cluster:
		name = "redis-cluster"
	case o.SentinelMaster != "":
		name = "redis-sentinel"
	}
	// Check the connection now rather than on the first request.
	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := client.Do(pctx, client.B().Ping().Build()).Error(); err != nil {
		client.Close()
		return nil, fmt.Errorf("simulate: %w: %s: %w", floodgate.ErrStoreUnavailable, strings.Join(o.Addrs, ","), err)
	}
	return &Backend{
		Name:  name,
		Store: s,
		Clock: clock,
		MemoryUsage: func(ctx context.Context, key string, limit floodgate.Limit) (int64, error) {
			ctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			cmd := client.B().MemoryUsage().Key(s.Key(key, limit.Algorithm)).Samples(0).Build()
			n, err := client.Do(ctx, cmd).AsInt64()
			if rueidis.IsRedisNil(err) {
				return 0, nil // no such key
			}
			return n, err
		},
		close: client.Close,
	}, nil
}

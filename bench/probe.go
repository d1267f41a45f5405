package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// SWLMemory is what the sliding-window log costs in Redis while its key is
// a listpack.
type SWLMemory struct {
	// One and Hundred are MEMORY USAGE (SAMPLES 0) of one log with 1 and
	// with 100 entries; Key is its name (its length counts in both).
	One, Hundred int64
	Key          string
	// Encoding is OBJECT ENCODING at 100 entries: "listpack" is the target.
	Encoding string
	// MaxListpack is the server's zset-max-listpack-entries.
	MaxListpack string
}

// PerEntry returns the bytes per entry at 100 entries, key and overheads
// included (Hundred / 100).
func (m SWLMemory) PerEntry() float64 { return float64(m.Hundred) / 100 }

// Marginal returns the bytes each entry adds: (Hundred - One) / 99.
func (m SWLMemory) Marginal() float64 { return float64(m.Hundred-m.One) / 99 }

// KeyMemory is the Redis memory of one contender's key after one decision.
type KeyMemory struct {
	Contender string
	Key       string
	Bytes     int64
	Encoding  string
}

// ProbeMemory measures on a standalone backend the memory of a floodgate
// sliding-window log at 1 and 100 entries, and of every Redis contender's
// key after one decision. Its keys live under prefix and are deleted.
func ProbeMemory(ctx context.Context, b Backend, nodes *Nodes, prefix string) (SWLMemory, []KeyMemory, error) {
	var swl SWLMemory
	rdb := nodes.clients[0]
	s, err := redisstore.New(redisstore.Config{Addrs: b.Addrs, Mode: redisstore.ModeStandalone, KeyPrefix: prefix + "swl:", Timeout: 3 * time.Second})
	if err != nil {
		return swl, nil, err
	}
	defer s.Close()
	// A minute-long window of 1,000: every entry stays in the window and
	// is admitted; 100 stay under zset-max-listpack-entries (128 by
	// default).
	limit := floodgate.NewLimit(floodgate.SlidingWindowLog, 1000, time.Minute)
	swl.Key = s.Key("probe", floodgate.SlidingWindowLog)
	defer rdb.Del(context.WithoutCancel(ctx), swl.Key)
	for i := range 100 {
		d, err := s.Allow(ctx, "probe", limit)
		if err != nil {
			return swl, nil, err
		}
		if !d.Allowed {
			return swl, nil, fmt.Errorf("sliding-window log probe: entry %d denied", i+1)
		}
		if i == 0 {
			if swl.One, err = rdb.MemoryUsage(ctx, swl.Key, 0).Result(); err != nil {
				return swl, nil, fmt.Errorf("MEMORY USAGE %s: %w", swl.Key, err)
			}
		}
	}
	if swl.Hundred, err = rdb.MemoryUsage(ctx, swl.Key, 0).Result(); err != nil {
		return swl, nil, fmt.Errorf("MEMORY USAGE %s: %w", swl.Key, err)
	}
	swl.Encoding, _ = rdb.ObjectEncoding(ctx, swl.Key).Result()
	if cfg, err := rdb.ConfigGet(ctx, "zset-max-listpack-entries").Result(); err == nil {
		swl.MaxListpack = cfg["zset-max-listpack-entries"]
	}

	var keys []KeyMemory
	for _, id := range RedisContenderIDs {
		if strings.HasPrefix(id, "floor") {
			continue // the floors' state is not a limiter's
		}
		p := prefix + "key:"
		c, err := NewRedisContender(id, b, p)
		if err != nil {
			return swl, nil, err
		}
		_, err = c.Allow(ctx, "probe")
		c.Close()
		if err != nil {
			return swl, nil, fmt.Errorf("%s: %w", id, err)
		}
		k := redisKey(id, p, "probe")
		bytes, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return swl, nil, fmt.Errorf("MEMORY USAGE %s (%s): %w", k, id, err)
		}
		enc, _ := rdb.ObjectEncoding(ctx, k).Result()
		rdb.Del(ctx, k)
		keys = append(keys, KeyMemory{Contender: c.Name, Key: k, Bytes: bytes, Encoding: enc})
	}
	return swl, keys, nil
}

// redisKey returns the Redis key where contender id keeps key's state,
// as each library builds it.
func redisKey(id, prefix, key string) string {
	switch id {
	case "fg-tb":
		return redisstore.Key(prefix, key, floodgate.TokenBucket)
	case "fg-swl":
		return redisstore.Key(prefix, key, floodgate.SlidingWindowLog)
	case "redis_rate":
		return "rate:" + prefix + key
	case "ulule":
		return prefix + "ulule:" + key
	}
	return prefix + key // throttled
}

package main

import (
	"fmt"
	"log/slog"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/splitstore"
)

// openStore opens the store a config section names and returns it with its
// closer, for the one-shot commands (check, bench, config validate
// --connect): an unreachable Redis is an error, not a wait, whatever
// store.require_at_start says.
func openStore(c config.Store) (floodgate.Store, func(), error) {
	c.RequireAtStart = true
	if c.PerSecond != nil {
		ps := *c.PerSecond
		ps.RequireAtStart = true
		c.PerSecond = &ps
	}
	return openStoreFor(c, nil, nil)
}

// openStoreFor opens the store as serve does: the Redis store reads clock,
// if not nil, instead of its own time, logs to logger (nil: nowhere), and
// starts while Redis is unreachable unless store.require_at_start says
// otherwise.
func openStoreFor(c config.Store, clock floodgate.Clock, logger *slog.Logger) (floodgate.Store, func(), error) {
	rc, err := c.RedisConfig()
	if err != nil {
		return nil, nil, err
	}
	if rc == nil {
		opts := []memory.Option{memory.WithMaxKeys(c.MaxKeysValue())}
		if clock != nil {
			opts = append(opts, memory.WithClock(clock))
		}
		return memory.New(opts...), func() {}, nil
	}
	if clock != nil {
		rc.Clock = clock
	}
	rc.Logger = logger
	s, err := redisstore.New(*rc)
	if err != nil {
		return nil, nil, fmt.Errorf("store (%s): %w", c.String(), err)
	}
	psc, err := c.PerSecondRedisConfig()
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	if psc == nil {
		return s, s.Close, nil
	}
	// store.per_second: the limits of a 1s window in a Redis of their own.
	psc.Clock = clock
	if logger != nil {
		psc.Logger = logger.With("store", "per-second")
	}
	ps, err := redisstore.New(*psc)
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("per-second store (%s): %w", c.PerSecond.String(), err)
	}
	split, err := splitstore.New(s, ps)
	if err != nil {
		s.Close()
		ps.Close()
		return nil, nil, err
	}
	return split, func() { s.Close(); ps.Close() }, nil
}

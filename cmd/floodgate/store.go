package main

import (
	"fmt"
	"log/slog"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// openStore opens the store a config section names and returns it with its
// closer, for the one-shot commands (check, bench, config validate
// --connect): an unreachable Redis is an error, not a wait, whatever
// store.require_at_start says.
func openStore(c config.Store) (floodgate.Store, func(), error) {
	c.RequireAtStart = true
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
	return s, s.Close, nil
}

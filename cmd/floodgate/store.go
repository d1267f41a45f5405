package main

import (
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// openStore opens the store a config section names and returns it with its
// closer.
func openStore(c config.Store) (floodgate.Store, func(), error) { return openStoreClock(c, nil) }

// openStoreClock is openStore with the store reading clock, if not nil,
// instead of its own time.
func openStoreClock(c config.Store, clock floodgate.Clock) (floodgate.Store, func(), error) {
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
	s, err := redisstore.New(*rc)
	if err != nil {
		return nil, nil, fmt.Errorf("store (%s): %w", c.String(), err)
	}
	return s, s.Close, nil
}

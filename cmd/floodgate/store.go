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
func openStore(c config.Store) (floodgate.Store, func(), error) {
	rc, err := c.RedisConfig()
	if err != nil {
		return nil, nil, err
	}
	if rc == nil {
		return memory.New(memory.WithMaxKeys(c.MaxKeysValue())), func() {}, nil
	}
	s, err := redisstore.New(*rc)
	if err != nil {
		return nil, nil, fmt.Errorf("store (%s): %w", c.String(), err)
	}
	return s, s.Close, nil
}

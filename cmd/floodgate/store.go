package main

import (
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memory"
)

// openStore opens the store a config names and returns it with its closer.
func openStore(_ context.Context, c config.Store) (floodgate.Store, func(), error) {
	switch c.Type {
	case config.StoreMemory:
		return memory.New(), func() {}, nil
	}
	return nil, nil, fmt.Errorf("store.type %q: not available in this build yet", c.Type)
}

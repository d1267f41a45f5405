package memory_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
		return memory.New(memory.WithClock(clock))
	})
}

package floodgate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// plainStore is a store with only the methods of floodgate.Store: a real
// store whose AllowBatch the helpers cannot see, so they take their path
// for stores without batches.
type plainStore struct{ floodgate.Store }

// namedStore makes a fresh store for a test.
type namedStore struct {
	name string
	make func(t *testing.T) floodgate.Store
}

// stores are the stores the helpers are tested on: the memory store and a
// real Redis, each with its batches and without.
func stores() []namedStore {
	return []namedStore{
		{"memory", func(*testing.T) floodgate.Store { return memory.New() }},
		{"memory-without-batch", func(*testing.T) floodgate.Store { return plainStore{memory.New()} }},
		{"redis", func(t *testing.T) floodgate.Store { return redisStore(t) }},
		{"redis-without-batch", func(t *testing.T) floodgate.Store { return plainStore{redisStore(t)} }},
	}
}

// redisStore returns a store on the harness's standalone Redis, its keys
// under a prefix of the test's own.
func redisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{
		Addrs:     []string{redistest.StandaloneAddr(t)},
		KeyPrefix: fmt.Sprintf("floodgate-test:%s:%d:", t.Name(), time.Now().UnixNano()),
		Timeout:   5 * time.Second, // many calls at once under -race on busy cores
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// remaining returns what key has left under limit, read with a cost of 0.
func remaining(t *testing.T, s floodgate.Store, key string, limit floodgate.Limit) int64 {
	t.Helper()
	d, err := s.AllowN(t.Context(), key, limit, 0)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return d.Remaining
}

package memory

import (
	"context"
	"sync"
)

// listeners are a store's Listen callers.
type listeners struct {
	mu   sync.RWMutex
	next int
	fns  map[int]func(string)
}

// Broadcast calls every Listen caller's fn with msg, in this process (the
// memory store's instances are the engines that share it). It never fails.
func (s *Store) Broadcast(_ context.Context, msg string) error {
	s.listeners.mu.RLock()
	defer s.listeners.mu.RUnlock()
	for _, fn := range s.listeners.fns {
		fn(msg)
	}
	return nil
}

// Listen calls fn with every message Broadcast sends until ctx ends, then
// returns ctx's error. fn must not block.
func (s *Store) Listen(ctx context.Context, fn func(msg string)) error {
	l := &s.listeners
	l.mu.Lock()
	if l.fns == nil {
		l.fns = map[int]func(string){}
	}
	id := l.next
	l.next++
	l.fns[id] = fn
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	delete(l.fns, id)
	l.mu.Unlock()
	return ctx.Err()
}

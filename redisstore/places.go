package redisstore

import (
	"context"
	"sync/atomic"
)

// places counts the commands in flight to a node against a bound. The
// common case, a place free, is one atomic add; only a caller that finds
// none waits, on a channel, with its context.
type places struct {
	used    atomic.Int64
	waiting atomic.Int64
	max     int64         // <= 0: unbounded (used still counts)
	free    chan struct{} // a place was given back while someone waited
}

// take takes a place, waiting at most until ctx ends.
func (p *places) take(ctx context.Context) error {
	if p.used.Add(1) <= p.max || p.max <= 0 {
		return nil
	}
	p.used.Add(-1)
	// Announce the wait before trying again: a give that does not see it
	// happened before the try, which then sees the place it freed.
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	for {
		if p.used.Add(1) <= p.max {
			if p.used.Load() < p.max {
				p.wake() // room for another waiter too
			}
			return nil
		}
		p.used.Add(-1)
		select {
		case <-p.free:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// give gives back k places.
func (p *places) give(k int64) {
	p.used.Add(-k)
	if p.waiting.Load() > 0 {
		p.wake()
	}
}

func (p *places) wake() {
	select {
	case p.free <- struct{}{}:
	default:
	}
}

// Package clocktest provides a floodgate.Clock that moves only when told
// to, for tests and simulations: give it to a store (memory.WithClock) or a
// front end, and step time instead of sleeping.
package clocktest

import (
	"sync"
	"time"
)

// Manual is a clock moved by hand. The zero value reads the Unix epoch.
// It is safe for concurrent use and satisfies floodgate.Clock.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a clock reading t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Manual) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

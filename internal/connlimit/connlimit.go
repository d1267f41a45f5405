// Package connlimit caps the open connections of a listener, so a flood of
// connections cannot exhaust the process's file descriptors: at the cap, a
// new connection takes the place of the longest-idle one (a connection that
// has sent no request yet, or that waits between keep-alive requests), or
// is closed at once when every connection is busy. Idle connections are
// known from an http.Server's ConnState hook; without it (a gRPC server),
// a new connection at the cap is closed.
package connlimit

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener with a cap on open connections. Create it
// with New; it is safe for concurrent use.
type Listener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open int
	idle list.List // of *conn, longest idle first

	rejected, evicted atomic.Int64
}

// New caps ln at n open connections (at least 1).
func New(ln net.Listener, n int) *Listener {
	return &Listener{Listener: ln, max: max(1, n)}
}

// conn is a connection of a Listener.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
	elem *list.Element // in l.idle, or nil; under l.mu
	gave bool          // its slot went to the connection that evicted it; under l.mu
}

// Accept returns the next connection, making room at the cap by closing
// the longest-idle connection, or closing connections it cannot make room
// for.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim *conn
		if l.open >= l.max {
			if front := l.idle.Front(); front != nil {
				victim = front.Value.(*conn)
				l.idle.Remove(front)
				victim.elem = nil
			}
		}
		if l.open >= l.max && victim == nil {
			l.mu.Unlock()
			l.rejected.Add(1)
			_ = c.Close()
			continue
		}
		if victim != nil {
			victim.gave = true // the new connection takes its slot: open stays at the cap
		} else {
			l.open++
		}
		wrapped := &conn{Conn: c, l: l}
		l.mu.Unlock()
		if victim != nil {
			l.evicted.Add(1)
			_ = victim.Close()
		}
		return wrapped, nil
	}
}

// Close closes the connection and frees its place, once.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if !c.gave {
			c.l.open--
		}
		if c.elem != nil {
			c.l.idle.Remove(c.elem)
			c.elem = nil
		}
		c.l.mu.Unlock()
	})
	return err
}

// ConnState is the http.Server ConnState hook that tells the listener which
// connections are idle: set it on the server that serves the listener.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateNew, http.StateIdle: // a new connection is idle until it sends a request
		if c.elem == nil {
			c.elem = l.idle.PushBack(c)
		}
	case http.StateActive, http.StateHijacked, http.StateClosed:
		if c.elem != nil {
			l.idle.Remove(c.elem)
			c.elem = nil
		}
	}
}

// Open returns the number of open connections.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Rejected returns the number of connections closed at once at the cap.
func (l *Listener) Rejected() int64 { return l.rejected.Load() }

// Evicted returns the number of idle connections closed to make room.
func (l *Listener) Evicted() int64 { return l.evicted.Load() }

// Package connlimit caps the open connections of a listener, so a flood of
// connections cannot exhaust the process's file descriptors: at the cap, a
// new connection takes the place of the longest-idle one (a connection that
// has sent no request yet, or that waits between keep-alive requests), or
// is closed at once when every connection is busy. Idle connections are
// known from an http.Server's ConnState hook, or for a server without one
// (gRPC) from the calls it reports (TrackCalls); with neither, a new
// connection at the cap is closed.
//
// A connection whose request body stalls holds no place either: with the
// server's ConnContext hook and its handler wrapped in Bodies, an HTTP/1
// connection counts as idle while its handler waits for body bytes, and a
// body the handler leaves unread closes the connection at once rather than
// being drained until the server's ReadTimeout.
package connlimit

import (
	"container/list"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Listener is a net.Listener with a cap on open connections. Create it
// with New; it is safe for concurrent use.
type Listener struct {
	net.Listener
	max int

	mu     sync.Mutex
	open   int
	idle   list.List        // of *conn, longest idle first
	byAddr map[string]*conn // by remote address, with TrackCalls; nil without

	rejected, evicted atomic.Int64
}

// New caps ln at n open connections (at least 1).
func New(ln net.Listener, n int) *Listener {
	return &Listener{Listener: ln, max: max(1, n)}
}

// conn is a connection of a Listener.
type conn struct {
	net.Conn
	l      *Listener
	once   sync.Once
	elem   *list.Element // in l.idle, or nil; under l.mu
	gave   bool          // its slot went to the connection that evicted it; under l.mu
	closed bool          // under l.mu: never idle again
	calls  int           // calls in progress, with TrackCalls; under l.mu
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
		if l.byAddr != nil { // idle until its first call begins
			l.byAddr[c.RemoteAddr().String()] = wrapped
			wrapped.setIdleLocked(true)
		}
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
		c.closed = true
		c.setIdleLocked(false)
		if c.l.byAddr != nil {
			if addr := c.RemoteAddr().String(); c.l.byAddr[addr] == c {
				delete(c.l.byAddr, addr)
			}
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
	// A new connection is idle until it sends a request.
	c.setIdleLocked(state == http.StateNew || state == http.StateIdle)
}

// setIdleLocked puts c at the back of the idle list, or takes it off; a
// closed connection is never put back. The caller holds c.l.mu.
func (c *conn) setIdleLocked(idle bool) {
	switch {
	case idle && c.elem == nil && !c.closed:
		c.elem = c.l.idle.PushBack(c)
	case !idle && c.elem != nil:
		c.l.idle.Remove(c.elem)
		c.elem = nil
	}
}

// connKey is the context key of a request's *conn.
type connKey struct{}

// ConnContext is the http.Server ConnContext hook that lets Bodies find a
// request's connection: set it on the server that serves the listener.
func (l *Listener) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if c, ok := nc.(*conn); ok && c.l == l {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// Bodies wraps h so that a stalled request body holds no place: while the
// handler waits for body bytes its connection counts as idle (the first a
// new connection at the cap evicts), and a body the handler leaves unread
// closes the connection as soon as the answer is written, where net/http
// would read on for up to its ReadTimeout to reuse the connection. Requests
// over HTTP/2 share their connection and pass through.
func Bodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := r.Context().Value(connKey{}).(*conn)
		if !ok || r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &body{ReadCloser: r.Body, c: c}
		r.Body = b
		h.ServeHTTP(w, r)
		if !b.eof.Load() {
			// Cut the drain short: the read fails at once and net/http
			// closes the connection after the answer.
			w.Header().Set("Connection", "close")
			_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
		}
	})
}

// body is a request body whose reads leave its connection idle while they
// wait.
type body struct {
	io.ReadCloser
	c   *conn
	eof atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.eof.Load() {
		return 0, io.EOF
	}
	b.c.l.mu.Lock()
	b.c.setIdleLocked(true)
	b.c.l.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.c.l.mu.Lock()
	b.c.setIdleLocked(false)
	b.c.l.mu.Unlock()
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// TrackCalls makes l's connections idle from their accept until a call
// begins on them, and again when their last call ends, as Begin and End
// report them by the connection's remote address: for a server with no
// ConnState hook whose calls are known (gRPC, by a stats handler). Call it
// before the first Accept; the remote addresses must tell connections
// apart (TCP, not a unix socket).
func (l *Listener) TrackCalls() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byAddr = map[string]*conn{}
}

// Begin reports that a call began on the connection from remote.
func (l *Listener) Begin(remote net.Addr) { l.call(remote, 1) }

// End reports that a call on the connection from remote ended.
func (l *Listener) End(remote net.Addr) { l.call(remote, -1) }

func (l *Listener) call(remote net.Addr, delta int) {
	if remote == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.byAddr[remote.String()]
	if c == nil {
		return
	}
	c.calls = max(0, c.calls+delta)
	c.setIdleLocked(c.calls == 0)
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

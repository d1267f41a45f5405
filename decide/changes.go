package decide

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// changeStore is a store with a channel to every instance on it: the
// Redis store's pub/sub channel, the memory store's engines in process.
type changeStore interface {
	Broadcast(ctx context.Context, msg string) error
	Listen(ctx context.Context, fn func(msg string)) error
}

// The messages on the change channel: a kind byte, then its fields.
const (
	msgBeat  = 'h' // an engine's heartbeat: its id
	msgReset = 'r' // a reset: the algorithm's digit, then the key
	msgStale = 'i' // a refund: the key, whose cached denial may be stale
)

// changes is what an engine knows of the change channel. Until it hears
// its own heartbeat, and whenever it has not for two beats (of real time,
// whatever the engine's clock), it is out of sync: then no cached denial
// or leased unit is used past maxAge after it was taken, since a reset
// elsewhere might not reach it.
type changes struct {
	store  changeStore // nil: the store has none
	id     string
	maxAge int64 // microseconds
	beat   time.Duration
	once   sync.Once
	start  time.Time    // heard counts from it, on the monotonic clock
	heard  atomic.Int64 // microseconds since start when its own heartbeat last came back
	synced atomic.Bool
}

// init sets up the engine's view of store's change channel.
func (c *changes) init(store floodgate.Store, maxAge time.Duration) {
	c.maxAge, c.beat, c.start = maxAge.Microseconds(), max(maxAge/4, time.Millisecond), time.Now()
	c.store, _ = store.(changeStore)
	var b [8]byte
	_, _ = rand.Read(b[:])
	c.id = hex.EncodeToString(b[:])
}

// expiresBy returns the latest an entry taken at at may be used: without
// limit while in sync, at + maxAge otherwise.
func (e *Engine) expiresBy(at int64) int64 {
	if e.changes.synced.Load() {
		return 1<<62 - 1
	}
	return at + e.changes.maxAge
}

// listen starts, once, the goroutines that follow the change channel: the
// listener, and the heartbeat that tells whether messages get through. An
// engine starts them when it first holds local state (a cached denial, a
// lease).
func (e *Engine) listen() {
	if e.changes.store == nil {
		return
	}
	e.changes.once.Do(func() {
		if !e.leases.startWork() {
			return
		}
		e.leases.wg.Add(1) // startWork counted the listener; this is the heartbeat
		ctx := e.leases.ctx
		go func() {
			defer e.leases.wg.Done()
			_ = e.changes.store.Listen(ctx, e.onChange)
		}()
		go func() {
			defer e.leases.wg.Done()
			t := time.NewTicker(e.changes.beat)
			defer t.Stop()
			for {
				bctx, cancel := context.WithTimeout(ctx, e.leaseTimeout())
				_ = e.changes.store.Broadcast(bctx, string(msgBeat)+e.changes.id)
				cancel()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if e.changes.synced.Load() && time.Since(e.changes.start).Microseconds()-e.changes.heard.Load() > 2*e.changes.beat.Microseconds() {
					e.desync()
				}
			}
		}()
	})
}

// onChange applies one message from the change channel.
func (e *Engine) onChange(msg string) {
	if len(msg) < 2 {
		return
	}
	switch msg[0] {
	case msgBeat:
		if msg[1:] == e.changes.id {
			e.changes.heard.Store(time.Since(e.changes.start).Microseconds())
			e.changes.synced.Store(true)
		}
	case msgStale:
		e.invalidate(msg[1:])
	case msgReset:
		if len(msg) < 3 {
			return
		}
		alg, err := strconv.Atoi(msg[1:2])
		if err != nil {
			return
		}
		e.forget(msg[2:], floodgate.Algorithm(alg))
	}
}

// forget drops what the engine holds about key after a reset under
// algorithm alg: its cached denials, its leases and its local fallback
// state.
func (e *Engine) forget(key string, alg floodgate.Algorithm) {
	e.invalidate(key)
	e.dropLeases(key)
	if e.localMade.Load() {
		_ = e.local().Reset(context.Background(), key, floodgate.NewLimit(alg, 1, time.Second))
	}
}

// announce tells every instance, through the change channel, that key
// was reset under alg (or, for msgStale, refunded).
func (e *Engine) announce(ctx context.Context, kind byte, key string, alg floodgate.Algorithm) {
	if e.changes.store == nil {
		return
	}
	msg := string(kind) + key
	if kind == msgReset {
		msg = string(kind) + strconv.Itoa(int(alg)) + key
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.leaseTimeout())
	defer cancel()
	if err := e.changes.store.Broadcast(ctx, msg); err != nil {
		e.warn.Warn(ctx, "floodgate: telling the other instances about a reset failed: their cached denials and leases of the key last at most store.over_limit_cache.max_age",
			slog.String("error", err.Error()))
	}
}

// desync caps, once the engine stopped hearing the change channel, every
// cached denial and leased unit at maxAge from now.
func (e *Engine) desync() {
	e.changes.synced.Store(false)
	by := e.micros() + e.changes.maxAge
	if e.cache != nil {
		e.cache.capExpiry(by)
	}
	e.leases.m.Range(func(_, v any) bool {
		l := v.(*lease)
		l.mu.Lock()
		for i := range l.blocks {
			l.blocks[i].expires = min(l.blocks[i].expires, by)
		}
		l.mu.Unlock()
		return true
	})
}

package decide

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Reset clears key's state under limit in the store, and everything the
// engine holds about it: the over-limit cache's denial, its leases (their
// units are not given back: the reset cleared what they were taken from)
// and the local fallback's state. Front ends reset through the engine, never the store,
// so that a cached denial cannot outlive a reset. The error is the
// store's; the engine's own state is cleared either way.
func (e *Engine) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	e.invalidate(key)
	e.dropLeases(key)
	cctx, call := e.callStart(ctx, "reset", 1)
	err := e.store.Reset(cctx, key, limit)
	e.called(cctx, "reset", call, err)
	e.invalidate(key)
	e.dropLeases(key)
	if err == nil {
		e.announce(ctx, msgReset, key, limit.Algorithm)
	}
	// The fallback state is kept under the local limit's algorithm, which
	// is limit's: resetting under limit clears it. A fallback that never
	// decided holds nothing.
	if !e.localMade.Load() {
		return err
	}
	if lerr := e.local().Reset(ctx, key, limit); err == nil && lerr != nil {
		err = lerr
	}
	return err
}

// refund gives back every cost the store holds for a request that is not
// admitted, even if the caller has gone away.
func (e *Engine) refund(ctx context.Context, checks []Check, out []Outcome) {
	var cancel context.CancelFunc
	for i := range out {
		o := &out[i]
		if !o.taken {
			continue
		}
		if o.lease != nil {
			e.unspend(o.lease, checks[i].cost(), e.micros())
			o.lease = nil
			o.giveBack(checks[i].cost())
			continue
		}
		if cancel == nil {
			ctx = context.WithoutCancel(ctx)
			cancel = func() {}
			if e.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, e.timeout)
			}
			defer cancel()
		}
		c := &checks[i]
		store, limit := e.giveBackTo(c, o)
		if err := e.refundTo(ctx, store, c.Key, limit, c.cost()); err != nil {
			e.warn.Warn(ctx, "floodgate: refund failed: a request that was not admitted keeps the quota it took",
				slog.String("rule", c.Rule), slog.String("error", err.Error()))
			o.taken = false
			o.RefundErr = fmt.Errorf("rule %q: refund: %w", c.Rule, err)
			continue
		}
		o.giveBack(c.cost())
	}
}

// Refund gives back n units of quota under limit for key in the store
// ([floodgate.Store.RefundN]) and forgets the over-limit cache's denial of
// it, which the refund may have made stale. Front ends refund through the
// engine, never the store (Envoy's negative hits, for one).
func (e *Engine) Refund(ctx context.Context, key string, limit floodgate.Limit, n int64) error {
	err := e.refundTo(ctx, e.store, key, limit, n)
	if err == nil && e.changes.store != nil && e.leases.startWork() {
		// The other instances' cached denials of key may be stale now.
		go func() {
			defer e.leases.wg.Done()
			e.announce(ctx, msgStale, key, 0)
		}()
	}
	return err
}

// refundTo refunds n under limit for key in store, keeping the over-limit
// cache from holding a denial the refund made stale: one that was being
// decided meanwhile is not stored either.
func (e *Engine) refundTo(ctx context.Context, store floodgate.Store, key string, limit floodgate.Limit, n int64) error {
	if store != e.store {
		return store.RefundN(ctx, key, limit, n)
	}
	e.invalidate(key)
	cctx, call := e.callStart(ctx, "refund", 1)
	err := store.RefundN(cctx, key, limit, n)
	e.called(cctx, "refund", call, err)
	e.invalidate(key)
	return err
}

func (e *Engine) invalidate(key string) {
	if e.cache != nil {
		e.cache.invalidate(key)
	}
}

// CacheStats returns the over-limit cache's counters and size; zero when
// the cache is off.
func (e *Engine) CacheStats() CacheStats {
	if e.cache == nil {
		return CacheStats{}
	}
	return e.cache.stats()
}

// clockFunc is a floodgate.Clock reading a func.
type clockFunc func() time.Time

// Now returns f().
func (f clockFunc) Now() time.Time { return f() }

// micros returns the engine's clock in microseconds since New: monotonic
// when the clock is time.Now, so a stepped wall clock moves no cache entry.
func (e *Engine) micros() int64 {
	if e.system {
		return time.Since(e.start).Microseconds()
	}
	return e.now().Sub(e.start).Microseconds()
}

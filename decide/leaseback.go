package decide

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// unspend gives cost back to the lease it was spent from, for a request
// that was not admitted.
func (e *Engine) unspend(l *lease, cost, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spent -= min(cost, l.spent)
	for i := len(l.blocks) - 1; i >= 0; i-- {
		if now < l.blocks[i].expires {
			l.blocks[i].units += cost
			if l.gone {
				e.retireAll(l, now) // dropped meanwhile: the cost goes back to the store
			}
			return
		}
	}
	// Every block ran out, or the lease is gone with its blocks: a bucket's
	// cost goes back to the store; a fixed window's block, whose end is no
	// longer known, keeps it until its window ends.
	if !l.reset && l.key.limit.Algorithm != floodgate.FixedWindow {
		l.back = append(l.back, block{units: cost})
		e.giveBackLease(l)
	}
}

// retire moves b's units to those to give back at now: a bucket's at any
// time, a fixed window's only while its window lasts (b.expires).
func (l *lease) retire(b block, now int64) {
	switch {
	case b.units == 0:
	case l.key.limit.Algorithm != floodgate.FixedWindow:
		l.back = append(l.back, block{units: b.units})
	case now < b.expires:
		l.back = append(l.back, b)
	}
}

// retireAll retires every block of l at now; l.mu is held.
func (e *Engine) retireAll(l *lease, now int64) {
	for _, b := range l.blocks {
		l.retire(b, now)
	}
	l.blocks = nil
	e.giveBackLease(l)
}

// startSweeper starts the goroutine that gives back idle leases and units
// whose time ran out.
func (e *Engine) startSweeper() {
	if !e.leases.startWork() {
		return
	}
	go func() {
		defer e.leases.wg.Done()
		t := time.NewTicker(leaseSweep)
		defer t.Stop()
		for {
			select {
			case <-e.leases.ctx.Done():
				return
			case <-t.C:
				e.sweepLeases()
			}
		}
	}()
}

// sweepLeases drops the idle leases and gives back what each has to give.
func (e *Engine) sweepLeases() {
	now := e.micros()
	e.leases.m.Range(func(k, v any) bool {
		l := v.(*lease)
		l.mu.Lock()
		l.prune(now)
		if now-l.used >= l.opts.Idle.Microseconds() && l.fetch == nil {
			e.leases.m.Delete(k)
			l.gone = true
			e.retireAll(l, now)
		} else if len(l.back) > 0 {
			e.giveBackLease(l)
		}
		l.mu.Unlock()
		return true
	})
}

// giveBackLease gives l's units to give back to the store in the
// background; l.mu is held.
func (e *Engine) giveBackLease(l *lease) {
	back := l.back
	l.back = nil
	if len(back) == 0 || !e.leases.startWork() {
		return
	}
	go func() {
		defer e.leases.wg.Done()
		e.returnUnits(context.WithoutCancel(e.leases.ctx), l.key, back)
	}()
}

// returnUnits refunds back to the store under k, within ctx and the
// engine's timeout. A fixed window's units carry their window's end as
// the call's deadline: the store counts a refund in the window containing
// its own now, so one that starts later records nothing (the Redis store
// sends the deadline with it) rather than credit the next window.
func (e *Engine) returnUnits(ctx context.Context, k leaseKey, back []block) {
	var bucket int64
	for _, b := range back {
		if b.expires == 0 {
			bucket += b.units
			continue
		}
		left := time.Duration(b.expires-e.micros()) * time.Microsecond
		if left <= 0 {
			continue // its window has ended: nothing to give back to
		}
		cctx, cancel := context.WithTimeout(ctx, min(left, e.leaseTimeout()))
		e.refundLease(cctx, k, b.units)
		cancel()
	}
	if bucket > 0 {
		cctx, cancel := context.WithTimeout(ctx, e.leaseTimeout())
		e.refundLease(cctx, k, bucket)
		cancel()
	}
}

// refundLease gives n of k's leased units back to the store.
func (e *Engine) refundLease(ctx context.Context, k leaseKey, n int64) {
	cctx, call := e.callStart(ctx, "refund", 1)
	err := e.store.RefundN(cctx, k.key, k.limit, n)
	e.called(cctx, "refund", call, err)
	if err != nil {
		e.warn.Warn(ctx, "floodgate: giving back a lease's unspent units failed: they stay taken until the window ends or the bucket refills",
			slog.Int64("units", n), slog.String("error", err.Error()))
	}
}

// dropLeases forgets every lease of key, without giving anything back: a
// reset cleared the store's state they were taken from.
func (e *Engine) dropLeases(key string) {
	e.leases.m.Range(func(k, v any) bool {
		if k.(leaseKey).key == key {
			l := v.(*lease)
			l.mu.Lock()
			e.leases.m.Delete(k)
			l.gone, l.reset = true, true
			l.blocks, l.back = nil, nil
			l.mu.Unlock()
		}
		return true
	})
}

// Close gives back every lease's unspent units to the store and waits for
// that (and for fetches under way) until ctx ends. Decisions after Close
// go on, each asking the store as a check without a lease does. Safe to
// call more than once, and concurrently with Decide.
func (e *Engine) Close(ctx context.Context) error {
	e.leases.closeMu.Lock()
	already := e.leases.closed.Swap(true)
	e.leases.closeMu.Unlock()
	if already {
		return nil
	}
	e.leases.cancel() // stops the sweeper; fetches under way fail
	var wg sync.WaitGroup
	e.leases.m.Range(func(k, v any) bool {
		l := v.(*lease)
		l.mu.Lock()
		e.leases.m.Delete(k)
		l.gone = true
		now := e.micros()
		l.prune(now)
		for _, b := range l.blocks {
			l.retire(b, now)
		}
		back := l.back
		l.blocks, l.back = nil, nil
		l.mu.Unlock()
		if len(back) > 0 {
			wg.Go(func() { e.returnUnits(ctx, l.key, back) })
		}
		return true
	})
	done := make(chan struct{})
	go func() { wg.Wait(); e.leases.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

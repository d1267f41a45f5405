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
	if l.gone {
		if !l.reset {
			l.expired += cost
			e.giveBackLease(l)
		}
		return
	}
	l.spent -= min(cost, l.spent)
	for i := len(l.blocks) - 1; i >= 0; i-- {
		if now < l.blocks[i].expires {
			l.blocks[i].units += cost
			return
		}
	}
	l.expired += cost // every block's time ran out: back to the store
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
			l.expired += l.held()
			l.blocks = nil
		}
		if l.expired > 0 {
			e.giveBackLease(l)
		}
		l.mu.Unlock()
		return true
	})
}

// giveBackLease gives l's expired units back to the store in the
// background; l.mu is held. A fixed window's units go back only while
// their window lasts: the store counts a refund in the window containing
// its own now, so one after the end changes nothing or the wrong window.
func (e *Engine) giveBackLease(l *lease) {
	n := l.expired
	l.expired = 0
	if n == 0 || l.key.limit.Algorithm == floodgate.FixedWindow {
		return // a fixed window's expired units ended with their window
	}
	if !e.leases.startWork() {
		return
	}
	go func() {
		defer e.leases.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.leases.ctx), e.leaseTimeout())
		defer cancel()
		start := e.callStart()
		err := e.store.RefundN(ctx, l.key.key, l.key.limit, n)
		e.called("refund", start)
		if err != nil {
			e.warn.Warn(ctx, "floodgate: giving back a lease's unspent units failed: they stay taken until the bucket refills",
				slog.Int64("units", n), slog.String("error", err.Error()))
		}
	}()
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
			l.blocks, l.expired = nil, 0
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
		l.prune(e.micros())
		n := l.expired + l.held()
		l.blocks, l.expired = nil, 0
		l.mu.Unlock()
		if n > 0 && l.key.limit.Algorithm != floodgate.FixedWindow {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := e.callStart()
				if err := e.store.RefundN(ctx, l.key.key, l.key.limit, n); err != nil {
					e.warn.Warn(ctx, "floodgate: giving back a lease's unspent units at close failed",
						slog.Int64("units", n), slog.String("error", err.Error()))
				}
				e.called("refund", start)
			}()
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

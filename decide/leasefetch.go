package decide

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/callbound"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// fetchResult is what a fetch brought: units, the store's refusal of the
// cost, or nothing because the lease was dropped meanwhile.
type fetchResult int

const (
	fetchGranted fetchResult = iota
	fetchRefused
	fetchGone
)

// fetchLease takes a block for c's lease l from the store for a request of
// cost and ends l's fetch. On a refusal d is the store's for cost; on an
// error nothing changed but the lease's note of the failure.
func (e *Engine) fetchLease(ctx context.Context, c *Check, l *lease, cost int64) (fetchResult, floodgate.Decision, error) {
	at := e.micros()
	want := l.nextWant(cost, at)
	granted, d, err := e.take(ctx, c, want, cost)
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.fetch)
	l.fetch = nil
	switch {
	case err != nil:
		// Until half a refresh has passed, requests the units held cannot
		// pay fail with this error at once: one call per lease asks an
		// unavailable store, not every request, each waiting its timeout.
		l.failErr, l.failUntil = err, e.micros()+l.opts.Refresh.Microseconds()/2
		return fetchRefused, d, err
	case l.gone:
		// Dropped meanwhile. Idle or closed: give the units back. Reset:
		// the store may have taken them before its reset, when they are
		// no longer counted, so giving them back would add to the quota.
		if granted > 0 && !l.reset {
			l.retire(block{units: granted, expires: l.blockExpiry(e, d, at)}, at)
			e.giveBackLease(l)
		}
		return fetchGone, d, nil
	}
	l.last, l.lastAt, l.failErr, l.failUntil = d, at, nil, 0
	l.holdUntil = 0
	if granted < want {
		// Refused, or given less than asked: the store is short, so the
		// instance asks again no sooner than half a refresh, calling it at
		// its refresh rate, not at the rate units come back; nor before
		// the store could admit cost again, as far as its answer says.
		l.holdUntil = at + max(l.opts.Refresh.Microseconds()/2, l.untilFits(d, granted, cost))
	}
	if granted == 0 {
		return fetchRefused, l.refusal(l.held(), e.micros()), nil
	}
	l.blocks = append(l.blocks, block{units: granted, expires: l.blockExpiry(e, d, at)})
	return fetchGranted, d, nil
}

// blockExpiry returns when units the store granted with d, asked at at,
// stop being spendable: after the TTL (or the out-of-sync maximum age),
// and for a fixed window at its end: at + ResetAfter is no later than the
// window's end, as the store decided after at.
func (l *lease) blockExpiry(e *Engine, d floodgate.Decision, at int64) int64 {
	expires := min(at+l.opts.TTL.Microseconds(), e.expiresBy(at))
	if l.key.limit.Algorithm == floodgate.FixedWindow {
		expires = min(expires, at+d.ResetAfter.Microseconds())
	}
	return expires
}

// untilFits returns how long after a fetch's store call a request of cost
// cannot fit, by the store's answer d: a refusal's retry delay; after a
// grant that emptied the store, a window's end or a bucket's time to
// refill cost (from an empty bucket: never early); otherwise 0.
func (l *lease) untilFits(d floodgate.Decision, granted, cost int64) int64 {
	switch {
	case granted == 0:
		return ceilMicros(d.RetryAfter)
	case d.Remaining > 0:
		return 0
	case l.key.limit.Algorithm == floodgate.FixedWindow:
		return ceilMicros(d.ResetAfter)
	}
	lim := l.key.limit
	w, refill := lim.Window.Microseconds(), fixedpoint.Refill(lim.Quota, lim.Refill)
	unit, perMicro := fixedpoint.Scale(w, refill)
	return (cost*unit + perMicro - 1) / perMicro
}

// ceilMicros returns d in microseconds, rounded up.
func ceilMicros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// take takes up to want units (at least cost) for c in the store and
// returns how many it took with the store's decision: the grant, or with
// 0 the refusal of cost. When want does not fit, it takes what the store
// said remains, and asks for cost alone when even that is short, so a
// refusal's retry delay is cost's own.
func (e *Engine) take(ctx context.Context, c *Check, want, cost int64) (int64, floodgate.Decision, error) {
	n := want
	for {
		cctx, call := e.callStart(ctx, "lease", 1)
		d, err := e.store.AllowN(cctx, c.Key, c.Limit, n)
		e.called(cctx, "lease", call, err)
		switch {
		case err != nil:
			return 0, d, err
		case d.Allowed:
			return n, d, nil
		case n == cost:
			return 0, d, nil
		case d.Remaining >= cost && d.Remaining < n:
			n = d.Remaining
		default:
			n = cost
		}
	}
}

// prefetch fetches l's next block in the background.
func (e *Engine) prefetch(c Check, l *lease) {
	if !e.fetchInBackground(nil, c, l, c.cost()) {
		l.mu.Lock()
		close(l.fetch)
		l.fetch = nil
		l.mu.Unlock()
	}
}

// fetchInBackground starts l's fetch (begun by spend) for a request of cost
// in the background, unless the engine is closing: then it reports false
// and the fetch is the caller's to make or end. The store call's span is a
// child of parent's, when a request (parent) starts the fetch and waits.
func (e *Engine) fetchInBackground(parent context.Context, c Check, l *lease, cost int64) bool {
	if !e.leases.startWork() {
		return false
	}
	go func() {
		defer e.leases.wg.Done()
		// No request waits on this call while units are held (those that
		// run out wait at most waitBound): it may take longer than a
		// request's timeout, as the goroutines that carry it may wait
		// that long to run on a busy machine.
		bound := max(e.leaseTimeout(), backgroundBound)
		ctx := callbound.With(e.leases.ctx, bound)
		if parent != nil {
			ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(parent))
		}
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		if _, _, err := e.fetchLease(ctx, &c, l, cost); err != nil && e.leases.ctx.Err() == nil {
			e.warn.Warn(ctx, "floodgate: fetching a lease failed; the units held are spent first, then the rule's failure mode applies",
				slog.String("rule", c.Rule), slog.String("error", err.Error()))
		}
	}()
	return true
}

// backgroundBound is the least bound of a fetch in the background.
const backgroundBound = time.Second

// waitBound bounds a request's wait for a fetch under way: half a refresh,
// as long as a failed fetch makes requests fail at once.
func waitBound(l *lease) time.Duration { return l.opts.Refresh / 2 }

// leaseTimeout bounds a background fetch or give-back.
func (e *Engine) leaseTimeout() time.Duration {
	if e.timeout > 0 {
		return e.timeout
	}
	return time.Second
}

// startWork adds one to wg unless the table is closed.
func (t *leaseTable) startWork() bool {
	t.closeMu.RLock()
	defer t.closeMu.RUnlock()
	if t.closed.Load() {
		return false
	}
	t.wg.Add(1)
	return true
}

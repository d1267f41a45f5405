package decide

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// Defaults of LeaseOptions.
const (
	// DefaultLeaseRefresh is LeaseOptions.Refresh's default.
	DefaultLeaseRefresh = 100 * time.Millisecond
	// DefaultLeaseMaxShare is LeaseOptions.MaxShare's default.
	DefaultLeaseMaxShare = 0.1
)

// leaseSweep is how often the engine looks for leases that are idle or
// whose units expired, to give their units back.
const leaseSweep = 50 * time.Millisecond

// LeaseOptions turn on leased quota for a check (Check.Lease): the engine
// takes a block of units from the store in one call, debited there so that
// every instance sees it, and spends it in memory, fetching the next block
// in the background before this one runs out. A lease holds only the
// token bucket and the fixed window (docs/ALGORITHMS.md says what each
// promises under a lease and why the windows that slide cannot keep
// theirs). The zero value is the defaults. A store that decides in this
// process (InProcess) is asked directly: a lease would only repeat it.
type LeaseOptions struct {
	// Refresh is about how long a block lasts at this instance's own rate:
	// a block is the units spent in the last Refresh (twice the last block
	// while they run out faster), within [the cost, MaxShare of the
	// quota]; the next block is fetched when half of the units held are
	// spent. Zero: DefaultLeaseRefresh.
	Refresh time.Duration
	// TTL is how long leased units may be spent after they were taken:
	// then the unspent ones are given back. A fixed window's units end
	// with their window first. Zero: ten times Refresh.
	TTL time.Duration
	// Idle gives back a lease no request spent from for this long. Zero:
	// five times Refresh.
	Idle time.Duration
	// MaxShare bounds a block, as a fraction of the quota (0 < MaxShare
	// <= 1): N instances strand at most N blocks. Zero:
	// DefaultLeaseMaxShare.
	MaxShare float64
}

// Validate reports whether o can lease under l, as an error naming the
// first bad field: durations not negative, a TTL of at least Refresh, a
// MaxShare in (0, 1], and an algorithm a lease keeps exact (the token
// bucket or the fixed window).
func (o LeaseOptions) Validate(l floodgate.Limit) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Refresh", o.Refresh}, {"TTL", o.TTL}, {"Idle", o.Idle}} {
		if f.d < 0 {
			return &fielderr.Error{Field: f.name, Value: f.d.String(), Reason: "must not be negative (0: the default)"}
		}
	}
	r := o.resolve()
	if r.TTL < r.Refresh {
		return &fielderr.Error{Field: "TTL", Value: r.TTL.String(), Reason: "must be at least the refresh (" + r.Refresh.String() + "): a block must outlive the time it is meant to last"}
	}
	if !(o.MaxShare >= 0 && o.MaxShare <= 1) {
		return &fielderr.Error{Field: "MaxShare", Value: strconv.FormatFloat(o.MaxShare, 'g', -1, 64), Reason: "must be above 0 and at most 1 (0: the default " + strconv.FormatFloat(DefaultLeaseMaxShare, 'g', -1, 64) + ")"}
	}
	switch l.Algorithm {
	case floodgate.TokenBucket, floodgate.FixedWindow:
		return nil
	}
	return &fielderr.Error{Field: "Algorithm", Value: l.Algorithm.String(),
		Reason: "cannot be leased (only a token bucket or a fixed window can): a sliding window promises its limit in every window ending at a request, and a leased unit is taken before the request it admits"}
}

// resolve fills o's defaults.
func (o LeaseOptions) resolve() LeaseOptions {
	if o.Refresh == 0 {
		o.Refresh = DefaultLeaseRefresh
	}
	if o.TTL == 0 {
		o.TTL = 10 * o.Refresh
	}
	if o.Idle == 0 {
		o.Idle = 5 * o.Refresh
	}
	if o.MaxShare == 0 {
		o.MaxShare = DefaultLeaseMaxShare
	}
	return o
}

// leaseKey names a lease: a key under one limit (a reloaded limit leases
// afresh).
type leaseKey struct {
	key   string
	limit floodgate.Limit
}

// block is units taken from the store in one call, spendable until
// expires (microseconds on the engine's clock).
type block struct {
	units   int64
	expires int64
}

// lease is an instance's leased quota for one key and limit. Its fields are
// guarded by mu.
type lease struct {
	key      leaseKey
	opts     LeaseOptions // resolved
	maxBlock int64

	mu     sync.Mutex
	blocks []block       // oldest first
	used   int64         // the last spend, or the lease's making
	want   int64         // the block last asked for; 0 before the first
	since  int64         // when the demand counted in spent began
	spent  int64         // units spent and denied since: the demand
	fetch  chan struct{} // closed when the fetch under way ends; nil if none
	// holdUntil is when the instance may ask the store again after a
	// refusal or a short grant; until then a request the units held cannot
	// pay is denied.
	holdUntil int64
	// The store's last answer to a fetch and when it was asked: what
	// remained and when it resets estimate what a leased answer reports.
	last      floodgate.Decision
	lastAt    int64
	failErr   error // the last fetch's error, answered until failUntil
	failUntil int64
	expired   int64 // units whose time ran out unspent, to give back
	gone      bool  // dropped from the table: a fetch under way keeps nothing
	reset     bool  // dropped by a reset: what it held or fetches is not given back
}

// leaseTable holds an engine's leases.
type leaseTable struct {
	m       sync.Map // leaseKey -> *lease
	once    sync.Once
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the sweeper, fetches and give-backs
	closeMu sync.RWMutex   // held for reading by whoever starts work on wg
	closed  atomic.Bool    // set under closeMu: no leases from then on
}

// leaseFor returns c's lease, making it (and starting the sweeper) on
// first use.
func (e *Engine) leaseFor(c *Check, now int64) *lease {
	k := leaseKey{c.Key, c.Limit}
	if v, ok := e.leases.m.Load(k); ok {
		return v.(*lease)
	}
	o := c.Lease.resolve()
	maxBlock := max(1, int64(o.MaxShare*float64(c.Limit.Quota)))
	v, loaded := e.leases.m.LoadOrStore(k, &lease{key: k, opts: o, maxBlock: maxBlock, used: now, since: now})
	if !loaded {
		e.leases.once.Do(func() { e.startSweeper() })
	}
	return v.(*lease)
}

// leaseResult is what spending from a lease said.
type leaseResult int

const (
	leaseAdmitted leaseResult = iota // spent from units held
	leaseDenied                      // answered by the store's last refusal
	leaseFetch                       // the caller fetches a block, then spends
	leaseWait                        // a fetch is under way: wait for it, then spend
	leaseFailed                      // the last fetch failed a moment ago: its error (failErr)
)

// spend takes cost from l's units at now, or says what to do instead. It
// reports whether a background fetch should begin (prefetch).
func (l *lease) spend(cost, now int64) (r leaseResult, d floodgate.Decision, wait chan struct{}, prefetch bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.prune(now)
	if held >= cost {
		for i := 0; cost > 0; i++ {
			n := min(cost, l.blocks[i].units)
			l.blocks[i].units -= n
			cost -= n
			l.spent += n
		}
		l.used = now
		left := l.held()
		prefetch = l.fetch == nil && left*2 < l.want && now >= l.holdUntil && now >= l.failUntil
		if prefetch {
			l.fetch = make(chan struct{})
		}
		return leaseAdmitted, l.answer(left, now), nil, prefetch
	}
	if now < l.holdUntil {
		l.spent += cost // demand: the next block is sized by it
		return leaseDenied, l.refusal(held, now), nil, false
	}
	if now < l.failUntil {
		return leaseFailed, d, nil, false
	}
	if l.fetch != nil {
		return leaseWait, d, l.fetch, false
	}
	l.fetch = make(chan struct{})
	return leaseFetch, d, nil, false
}

// prune drops blocks that are spent or whose time ran out (keeping the
// latter's units to give back) and returns the units held.
func (l *lease) prune(now int64) int64 {
	keep := l.blocks[:0]
	for _, b := range l.blocks {
		switch {
		case b.units == 0:
		case now >= b.expires:
			l.expired += b.units
		default:
			keep = append(keep, b)
		}
	}
	clear(l.blocks[len(keep):])
	l.blocks = keep
	return l.held()
}

func (l *lease) held() int64 {
	var n int64
	for _, b := range l.blocks {
		n += b.units
	}
	return n
}

// answer is a leased admission's decision: the store's last answer's
// remaining plus the units still held, and its reset delay less the time
// passed (estimates: other instances spend meanwhile).
func (l *lease) answer(held, now int64) floodgate.Decision {
	d := floodgate.Decision{Allowed: true, Limit: l.key.limit.Quota}
	l.estimate(&d, l.last.Remaining+held, now)
	return d
}

// estimate sets d's Remaining and ResetAfter from remaining, what the
// store had left at its last answer plus what this instance holds: for a
// bucket refilled since, and full again when that much has refilled; for a
// window, its end.
func (l *lease) estimate(d *floodgate.Decision, remaining, now int64) {
	lim := l.key.limit
	elapsed := max(0, now-l.lastAt)
	if lim.Algorithm != floodgate.TokenBucket {
		d.Remaining = min(lim.Quota, remaining)
		d.ResetAfter = max(0, l.last.ResetAfter-time.Duration(elapsed)*time.Microsecond)
		return
	}
	w, refill := lim.Window.Microseconds(), fixedpoint.Refill(lim.Quota, lim.Refill)
	unit, perMicro := fixedpoint.Unit(w, refill), fixedpoint.PerMicro(w, refill)
	full := lim.Quota * unit
	level := full
	if gap := (full - min(full, remaining*unit)) / perMicro; elapsed < gap {
		level = min(full, remaining*unit+elapsed*perMicro)
	}
	d.Remaining = level / unit
	d.ResetAfter = time.Duration((full-level+perMicro-1)/perMicro) * time.Microsecond
}

// lastErr returns the last fetch's error.
func (l *lease) lastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failErr
}

// refusal is the denial of a request the units held cannot pay while the
// instance holds off the store: retry when it asks again.
func (l *lease) refusal(held, now int64) floodgate.Decision {
	d := floodgate.Decision{Limit: l.key.limit.Quota}
	l.estimate(&d, l.last.Remaining+held, now)
	d.RetryAfter = time.Duration(l.holdUntil-now) * time.Microsecond
	return d
}

// nextWant returns the block to ask for at now for a request of cost, and
// starts counting the demand afresh.
func (l *lease) nextWant(cost, now int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	refresh := l.opts.Refresh.Microseconds()
	w := cost
	if l.want > 0 {
		elapsed := now - l.since
		switch {
		case elapsed <= 0 && l.spent > 0:
			w = l.maxBlock // all at once
		case elapsed > 0:
			w = int64(math.Ceil(float64(l.spent) * float64(refresh) / float64(elapsed)))
		}
		if elapsed < refresh && l.spent >= l.want {
			w = max(w, 2*l.want) // running out before Refresh: grow
		}
	}
	w = max(cost, min(w, l.maxBlock))
	l.want, l.since, l.spent = w, now, 0
	return w
}

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
			l.expired += granted
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
	expires := at + l.opts.TTL.Microseconds()
	if c.Limit.Algorithm == floodgate.FixedWindow {
		// at + ResetAfter is no later than the window's end: the store
		// decided after at.
		expires = min(expires, at+d.ResetAfter.Microseconds())
	}
	l.blocks = append(l.blocks, block{units: granted, expires: expires})
	return fetchGranted, d, nil
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
	unit, perMicro := fixedpoint.Unit(w, refill), fixedpoint.PerMicro(w, refill)
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
		start := e.callStart()
		d, err := e.store.AllowN(ctx, c.Key, c.Limit, n)
		e.called("lease", start)
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
	if !e.leases.startWork() {
		l.mu.Lock()
		close(l.fetch)
		l.fetch = nil
		l.mu.Unlock()
		return
	}
	go func() {
		defer e.leases.wg.Done()
		ctx, cancel := context.WithTimeout(e.leases.ctx, e.leaseTimeout())
		defer cancel()
		if _, _, err := e.fetchLease(ctx, &c, l, c.cost()); err != nil && e.leases.ctx.Err() == nil {
			e.warn.Warn(ctx, "floodgate: fetching a lease failed; the units held are spent first, then the rule's failure mode applies",
				slog.String("rule", c.Rule), slog.String("error", err.Error()))
		}
	}()
}

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

// decideLeased decides the enforced leased checks from their leases,
// fetching a block where one is needed, and reports whether one was
// denied: then the request is, without asking the store about the others.
// Every leased check's outcome is set (settled), so the store path skips it.
func (e *Engine) decideLeased(ctx context.Context, checks []Check, out []Outcome) bool {
	denied := false
	for i := range checks {
		c, o := &checks[i], &out[i]
		if !e.leased(c) || o.settled() {
			continue
		}
		if err := c.Lease.Validate(c.Limit); err != nil {
			o.set(Outcome{Verdict: Invalid, Err: fmt.Errorf("rule %q: lease: %w", c.Rule, err)})
			continue
		}
		if denied {
			continue // the request is denied already: not asked, as after a denial without batches
		}
		cost := c.cost()
		l := e.leaseFor(c, e.micros())
		for {
			now := e.micros()
			r, d, wait, pre := l.spend(cost, now)
			switch r {
			case leaseAdmitted:
				o.set(Outcome{Decision: d, Verdict: Admitted, Decided: true, Leased: true, taken: true})
				o.lease = l
				if pre {
					e.prefetch(*c, l)
				}
			case leaseDenied:
				o.set(Outcome{Decision: d, Verdict: Denied, Decided: true, Leased: true})
			case leaseFailed:
				err := l.lastErr()
				if err == nil {
					continue // a fetch succeeded since: spend again
				}
				setOutcome(o, floodgate.Decision{}, err)
				o.Leased = true
			case leaseWait:
				select {
				case <-wait:
					continue
				case <-ctx.Done():
					setOutcome(o, floodgate.Decision{}, ctx.Err())
					o.Leased = true
				}
			case leaseFetch:
				res, d, err := e.fetchLease(ctx, c, l, cost)
				switch {
				case err != nil:
					setOutcome(o, d, err)
					o.Leased = true
				case res == fetchGranted:
					continue // spend from the new block
				case res == fetchGone:
					l = e.leaseFor(c, now) // reset or dropped meanwhile: lease afresh
					continue
				default:
					o.set(Outcome{Decision: d, Verdict: Denied, Decided: true, Leased: true})
				}
			}
			break
		}
		if o.Verdict == Denied {
			denied = true
		}
	}
	return denied
}

// leased reports whether c is decided from a lease: an enforced check that
// takes something, with LeaseOptions, over a store that decides elsewhere.
func (e *Engine) leased(c *Check) bool {
	return c.Lease != nil && !e.inProcess && !c.Shadow && !c.CheckOnly && !c.Blocked && !e.leases.closed.Load()
}

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

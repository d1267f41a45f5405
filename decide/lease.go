package decide

import (
	"context"
	"fmt"
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
	back      []block // units to give back to the store; a fixed window's only before expires
	gone      bool    // dropped from the table: a fetch under way keeps nothing
	reset     bool    // dropped by a reset: what it held or fetches is not given back
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
		e.listen()
	}
	return v.(*lease)
}

// leaseResult is what spending from a lease said.
type leaseResult int

const (
	leaseAdmitted leaseResult = iota // spent from units held
	leaseDenied                      // answered by the store's last refusal
	leaseFetch                       // the caller starts a fetch (wait is its end), then spends
	leaseWait                        // a fetch is under way: wait for it, then spend
	leaseFailed                      // the last fetch failed a moment ago: its error (failErr)
	leaseGone                        // dropped (idle, reset or closed) since the caller found it: find it again
)

// spend takes cost from l's units at now, or says what to do instead. It
// reports whether a background fetch should begin (prefetch).
func (l *lease) spend(cost, now int64) (r leaseResult, d floodgate.Decision, wait chan struct{}, prefetch bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return leaseGone, d, nil, false
	}
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
	return leaseFetch, d, l.fetch, false
}

// prune drops blocks that are spent or whose time ran out (keeping the
// latter's units to give back) and returns the units held.
func (l *lease) prune(now int64) int64 {
	keep := l.blocks[:0]
	for _, b := range l.blocks {
		switch {
		case b.units == 0:
		case now >= b.expires:
			l.retire(b, now)
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
	unit, perMicro := fixedpoint.Scale(w, refill)
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
			case leaseGone:
				l = e.leaseFor(c, now)
				continue
			case leaseFailed:
				err := l.lastErr()
				if err == nil {
					continue // a fetch succeeded since: spend again
				}
				setOutcome(o, floodgate.Decision{}, err)
				o.Leased = true
			case leaseWait:
				if waitFetch(ctx, wait, waitBound(l)) {
					continue
				}
				setOutcome(o, floodgate.Decision{}, waitErr(ctx))
				o.Leased = true
			case leaseFetch:
				// In the background, under its own bound, as a prefetch:
				// a fetch late on a busy machine then lands for the
				// requests after this one, instead of failing them all
				// for half a refresh; this one waits for it as any would.
				if e.fetchInBackground(ctx, *c, l, cost) {
					if waitFetch(ctx, wait, waitBound(l)) {
						continue
					}
					setOutcome(o, floodgate.Decision{}, waitErr(ctx))
					o.Leased = true
					break
				}
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

// errFetchUnderWay answers a request whose lease ran out while a fetch is
// under way for longer than the request may wait: an outage, as far as it
// can tell.
var errFetchUnderWay = fmt.Errorf("%w: the lease's fetch from the store is still under way", floodgate.ErrStoreUnavailable)

// waitErr is the error of a request that stopped waiting for a fetch.
func waitErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return errFetchUnderWay
}

// waitFetch waits for the fetch under way (wait closed) for at most d, or
// until ctx ends, and reports whether it ended.
func waitFetch(ctx context.Context, wait chan struct{}, d time.Duration) bool {
	select {
	case <-wait:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wait:
		return true
	case <-ctx.Done():
		return false
	case <-t.C:
		return false
	}
}

// unsettled counts the enforced checks still to ask the store about.
func unsettled(checks []Check, out []Outcome) int {
	n := 0
	for i := range checks {
		if c := &checks[i]; !c.Shadow && !c.CheckOnly && !out[i].settled() {
			n++
		}
	}
	return n
}

// anyLeased reports whether a check is decided from a lease.
func (e *Engine) anyLeased(checks []Check) bool {
	for i := range checks {
		if e.leased(&checks[i]) {
			return true
		}
	}
	return false
}

// leased reports whether c is decided from a lease: an enforced check that
// takes something, with LeaseOptions, over a store that decides elsewhere.
func (e *Engine) leased(c *Check) bool {
	return c.Lease != nil && !e.inProcess && !c.Shadow && !c.CheckOnly && !c.Blocked && !e.leases.closed.Load()
}

package decide

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// Defaults of the over-limit cache's bounds.
const (
	// DefaultCacheEntries is the most denials the over-limit cache holds.
	DefaultCacheEntries = 65536
	// DefaultCacheBytes is the most memory, in bytes, the over-limit cache
	// holds (its estimate: each entry's key plus CacheEntryOverhead).
	DefaultCacheBytes = 16 << 20
	// CacheEntryOverhead is the bytes the over-limit cache counts for an
	// entry besides its key's: the entry and its map slot.
	CacheEntryOverhead = 160
	// DefaultMaxAge is CacheOptions.MaxAge's default.
	DefaultMaxAge = time.Second
)

// CacheOptions bound the engine's over-limit cache, which remembers each
// denial until its retry delay has passed and answers further requests of
// that cost for the same key and limit without asking the store, exactly
// as the store would have.
// The zero value turns it on with the default bounds for a store that
// decides elsewhere (Redis, a remote floodgate) and off for one that
// decides in this process (the memory store).
type CacheOptions struct {
	// Disabled turns the cache off for every check.
	Disabled bool
	// Enabled turns the cache on whatever the store, an in-process one
	// included. It excludes Disabled.
	Enabled bool
	// MaxEntries bounds the number of denials held. Zero:
	// DefaultCacheEntries.
	MaxEntries int
	// MaxBytes bounds the memory held, as estimated: each entry's key
	// length plus CacheEntryOverhead. Zero: DefaultCacheBytes.
	MaxBytes int64
	// MaxAge is the longest a denial is answered, and a leased unit
	// spent, after the store gave it, while the engine does not hear the
	// store's change channel (the Redis store's pub/sub, on which every
	// instance announces its resets; a store without one is never heard):
	// a reset made elsewhere then reaches this instance within MaxAge.
	// While it hears the channel, resets arrive as messages and a denial
	// lasts its retry delay. Zero: DefaultMaxAge.
	MaxAge time.Duration
}

// CacheStats are the over-limit cache's counters and size.
type CacheStats struct {
	// Hits counts checks answered from the cache, without the store.
	Hits uint64
	// Waits counts checks that waited for another caller's store call for
	// the same key (its denial having expired) before looking again.
	Waits uint64
	// Evictions counts denials dropped before their retry delay passed, to
	// stay within the bounds.
	Evictions uint64
	// Entries and Bytes are the cache's size now (Bytes as estimated).
	Entries int64
	Bytes   int64
}

const (
	cacheShards = 64
	// evictSample is how many entries an insert into a full cache looks at
	// to find one to drop: an expired one, or the one expiring soonest.
	evictSample = 8
)

// denial is a cached denial: the store denied cost under limit when the
// engine's clock read at (before the call), so cost (and every larger
// one) stays denied until expires = at + the decision's RetryAfter, if nothing
// is given back meanwhile.
//
// After expires the entry stays for a window of its limit, so that the
// key's callers take turns rather than all asking the store at once: one
// probe asks while the others wait. An admitted flight leaves the least
// remaining it saw as tickets, that many units' worth of callers for the
// next flight. flight and tickets are guarded by the shard's lock.
type denial struct {
	limit   floodgate.Limit
	cost    int64
	at      int64 // microseconds on the engine's clock
	expires int64
	d       floodgate.Decision
	until   int64 // the entry answers no later than this (Options.LocalMaxAge, out of sync)
	flight  *flight
	tickets int64
}

// flight is the store calls under way for a key whose cached denial
// expired; the key's other callers wait on done. Its fields are guarded by
// the shard's lock.
type flight struct {
	done      chan struct{}
	closed    bool
	open      int   // calls not finished
	admitted  bool  // one of them was admitted
	remaining int64 // the least remaining an admitted one reported
	failed    bool  // one failed: the waiters keep the cached answer
	entry     *denial
}

// wake closes done once.
func (f *flight) wake() {
	if !f.closed {
		f.closed = true
		close(f.done)
	}
}

// lookupResult is what the cache says about one check: answered (hit); or
// ask the store, noting epoch, possibly as part of the key's flight (then
// finish it); or wait for the flight under way and look again.
type lookupResult struct {
	d     floodgate.Decision
	hit   bool
	epoch uint64
	wait  *flight
	entry *denial // the expired entry whose flight the caller joined
	in    *flight // that flight
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]*denial
	// epoch moves on every invalidation: a denial is stored only if its
	// shard's epoch did not move while the store decided it, so a Reset or
	// refund racing with a denial never leaves a stale entry.
	epoch atomic.Uint64
	_     [64]byte // keep shards off each other's cache lines
}

// overLimitCache is the engine's over-limit cache. It is safe for
// concurrent use.
type overLimitCache struct {
	seed       maphash.Seed
	shards     [cacheShards]cacheShard
	maxEntries int64
	maxBytes   int64
	entries    atomic.Int64
	bytes      atomic.Int64
	hits       atomic.Uint64
	waits      atomic.Uint64
	evictions  atomic.Uint64
}

// Validate reports whether o's bounds are usable, as an error naming the
// first bad one (MaxEntries, MaxBytes, MaxAge, Enabled): none may be
// negative, and Enabled and Disabled exclude each other. New
// calls it; front ends that read the bounds from a file call it to report
// the error under their own names.
func (o CacheOptions) Validate() error {
	if o.MaxEntries < 0 {
		return &fielderr.Error{Field: "MaxEntries", Value: strconv.Itoa(o.MaxEntries), Reason: "must not be negative"}
	}
	if o.MaxBytes < 0 {
		return &fielderr.Error{Field: "MaxBytes", Value: strconv.FormatInt(o.MaxBytes, 10), Reason: "must not be negative"}
	}
	if o.MaxAge < 0 {
		return &fielderr.Error{Field: "MaxAge", Value: o.MaxAge.String(), Reason: "must not be negative (0: the default " + DefaultMaxAge.String() + ")"}
	}
	if o.Enabled && o.Disabled {
		return &fielderr.Error{Field: "Enabled", Value: "true", Reason: "excludes Disabled: set one of them"}
	}
	return nil
}

func newCache(o CacheOptions) (*overLimitCache, error) {
	if fe, ok := o.Validate().(*fielderr.Error); ok && fe != nil {
		return nil, &fielderr.Error{Field: "OverLimitCache." + fe.Field, Value: fe.Value, Reason: fe.Reason}
	}
	if o.Disabled {
		return nil, nil
	}
	c := &overLimitCache{seed: maphash.MakeSeed(), maxEntries: int64(o.MaxEntries), maxBytes: o.MaxBytes}
	if c.maxEntries == 0 {
		c.maxEntries = DefaultCacheEntries
	}
	if c.maxBytes == 0 {
		c.maxBytes = DefaultCacheBytes
	}
	for i := range c.shards {
		c.shards[i].m = map[string]*denial{}
	}
	return c, nil
}

func (c *overLimitCache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

// lookup returns the cached answer to cost under limit for key at now, if
// a denial that answers it (denial.answers) is held and its retry delay
// has not passed.
// Otherwise the caller asks the store, noting the key's shard epoch. With
// gate and an expired denial, the caller either joins the key's next
// flight (and must call finish) or is told to wait for the flight under
// way and look again.
func (c *overLimitCache) lookup(key string, limit floodgate.Limit, cost, now int64, gate bool) lookupResult {
	sh := c.shard(key)
	for {
		epoch := sh.epoch.Load()
		sh.mu.RLock()
		e := sh.m[key]
		sh.mu.RUnlock()
		switch {
		case e == nil || e.limit != limit:
			return lookupResult{epoch: epoch}
		case now < e.expires && (!e.answers(cost) || now >= e.until):
			return lookupResult{epoch: epoch}
		case now < e.expires:
			c.hits.Add(1)
			return lookupResult{d: e.answer(now), hit: true}
		}
		if r, ok := c.expired(sh, key, e, cost, now, gate, epoch); ok {
			return r
		}
		// Replaced meanwhile (by a new denial, most likely): look again.
	}
}

// expired is lookup's answer for e, key's expired entry in sh, unless e
// was replaced before sh was locked.
func (c *overLimitCache) expired(sh *cacheShard, key string, e *denial, cost, now int64, gate bool, epoch uint64) (lookupResult, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case sh.m[key] != e:
		return lookupResult{}, false
	case now >= e.expires+e.limit.Window.Microseconds():
		// Long expired: forget it (and any flight stuck past it).
		c.remove(sh, key)
		return lookupResult{epoch: epoch}, true
	case !gate:
		return lookupResult{epoch: epoch}, true
	case e.tickets >= cost:
		e.tickets -= cost
	case e.flight != nil:
		c.waits.Add(1)
		return lookupResult{wait: e.flight}, true
	}
	if e.flight == nil {
		e.flight = &flight{done: make(chan struct{}), entry: e}
	}
	e.flight.open++
	return lookupResult{epoch: epoch, entry: e, in: e.flight}, true
}

// finish ends one call of flight f of the expired entry e of key, whose
// check came out as o. A new denial wakes the waiters to be answered from
// it; an error (an outage, most likely) ends the flight and wakes them to
// keep the cached answer, so they do not all ask a failing store at once,
// and the key's next caller asks again. When the flight's last call is
// in, its least remaining becomes the tickets and the waiters look again.
func (c *overLimitCache) finish(key string, e *denial, f *flight, o *Outcome) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	f.open--
	admitted := o.Decided && !o.Local && o.Verdict == Admitted
	if admitted {
		f.remaining = min(f.remaining, o.Decision.Remaining)
		if !f.admitted {
			f.remaining = o.Decision.Remaining
		}
		f.admitted = true
	}
	switch {
	case sh.m[key] != e || e.flight != f:
		f.wake() // a new denial, a Reset or an eviction: look again
	case o.Err != nil: // an outage (decided locally or not) or an error
		f.failed = true
		e.flight = nil
		f.wake()
	case f.open == 0:
		e.flight = nil
		if f.admitted {
			e.tickets = max(0, f.remaining)
		}
		f.wake()
	}
}

// answers reports whether the denial answers cost exactly: the same cost;
// or, in a fixed window, any larger one, whose retry is the window's end
// too. A larger cost under the other algorithms is denied as well, but
// with a later retry than the cache knows, so the store is asked.
func (e *denial) answers(cost int64) bool {
	return cost == e.cost || cost > e.cost && e.limit.Algorithm == floodgate.FixedWindow
}

// answer is the denial as the store would give it at now if nothing were
// admitted meanwhile: the retry and reset delays shrink with the time
// passed; Remaining is the denial's, or for a bucket what it has refilled
// since (the windows' remaining only grows when entries leave them, which
// for a cost above 1 may be before the retry: then it is a lower bound).
func (e *denial) answer(now int64) floodgate.Decision {
	d := e.d
	elapsed := now - e.at
	d.RetryAfter = time.Duration(e.expires-now) * time.Microsecond
	d.ResetAfter = max(0, d.ResetAfter-time.Duration(elapsed)*time.Microsecond)
	if e.limit.Algorithm == floodgate.TokenBucket && elapsed > 0 {
		// At the retry the bucket holds cost tokens; before it, what it
		// refills per microsecond less for each microsecond still to go.
		w, refill := e.limit.Window.Microseconds(), fixedpoint.Refill(e.limit.Quota, e.limit.Refill)
		unit, perMicro := fixedpoint.Scale(w, refill)
		if level := e.cost*unit - (e.expires-now)*perMicro; level > 0 {
			d.Remaining = min(e.cost-1, max(d.Remaining, level/unit))
		}
	}
	return d
}

// store remembers that the store denied cost under limit for key with d,
// asked when the engine's clock read at and the key's shard epoch was
// epoch, to answer until at most until.
func (c *overLimitCache) store(key string, limit floodgate.Limit, cost int64, d floodgate.Decision, at int64, epoch uint64, until int64) {
	r := d.RetryAfter.Microseconds()
	if d.RetryAfter%time.Microsecond != 0 {
		r++ // the stores' delays are whole microseconds; never be early
	}
	if r <= 0 {
		return
	}
	e := &denial{limit: limit, cost: cost, at: at, expires: at + r, d: d, until: until}
	i := maphash.String(c.seed, key) % cacheShards
	sh := &c.shards[i]
	size := int64(len(key)) + CacheEntryOverhead
	if c.put(sh, key, e, epoch, size, false) {
		return
	}
	// Full: drop entries, from this shard on, until this one fits.
	reserved := false
	for j := range uint64(cacheShards) {
		if reserved = c.reserve(size); reserved {
			break
		}
		victim := &c.shards[(i+j)%cacheShards]
		victim.mu.Lock()
		c.evictOne(victim, at)
		victim.mu.Unlock()
	}
	if reserved || c.reserve(size) {
		c.put(sh, key, e, epoch, size, true)
	}
}

// put stores e under key in sh unless sh's epoch moved from epoch, and
// reports whether it is done: stored, replaced, or not to be stored. With
// reserved, e's size is already counted in (and counted out if not used);
// otherwise put counts it in if the bounds allow, and reports false if not.
func (c *overLimitCache) put(sh *cacheShard, key string, e *denial, epoch uint64, size int64, reserved bool) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, replace := sh.m[key]
	switch {
	case sh.epoch.Load() != epoch:
		// Reset or refunded meanwhile: the denial may be stale.
	case replace:
		sh.m[key] = e // the newest denial; the key's size is counted already
	case reserved || c.reserve(size):
		sh.m[key] = e
		return true
	default:
		return false
	}
	if reserved {
		c.entries.Add(-1)
		c.bytes.Add(-size)
	}
	return true
}

// reserve counts an entry of size bytes in, if the bounds allow it.
func (c *overLimitCache) reserve(size int64) bool {
	if c.entries.Add(1) > c.maxEntries {
		c.entries.Add(-1)
		return false
	}
	if c.bytes.Add(size) > c.maxBytes {
		c.bytes.Add(-size)
		c.entries.Add(-1)
		return false
	}
	return true
}

// evictOne drops one entry of sh, which the caller has locked: among a few,
// an expired one, else the one expiring soonest. It reports false when sh
// is empty.
func (c *overLimitCache) evictOne(sh *cacheShard, now int64) bool {
	var victim string
	var soonest int64
	n := 0
	for k, e := range sh.m {
		if e.expires <= now {
			c.remove(sh, k)
			return true
		}
		if n == 0 || e.expires < soonest {
			victim, soonest = k, e.expires
		}
		if n++; n == evictSample {
			break
		}
	}
	if n == 0 {
		return false
	}
	c.remove(sh, victim)
	c.evictions.Add(1)
	return true
}

// remove deletes key from sh, which the caller has locked, waking the
// waiters of its flight if one is under way.
func (c *overLimitCache) remove(sh *cacheShard, key string) {
	if e, ok := sh.m[key]; ok {
		if e.flight != nil {
			e.flight.wake() // its waiters look again, and ask
		}
		delete(sh.m, key)
		c.entries.Add(-1)
		c.bytes.Add(-(int64(len(key)) + CacheEntryOverhead))
	}
}

// invalidate forgets key's denial and keeps any denial being decided now
// from being stored.
func (c *overLimitCache) invalidate(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	sh.epoch.Add(1)
	c.remove(sh, key)
	sh.mu.Unlock()
}

// invalidateOwn is invalidate for a key that the request deciding checks
// (with outcomes out) gave back itself, in a denied batch: that request's
// own denials of other keys in the same shard stay storable, or a flooded
// key sharing a shard with a key the same requests give back would never
// be cached.
func (c *overLimitCache) invalidateOwn(key string, checks []Check, out []Outcome) {
	sh := c.shard(key)
	sh.mu.Lock()
	after := sh.epoch.Add(1)
	c.remove(sh, key)
	sh.mu.Unlock()
	for i := range checks {
		if o := &out[i]; checks[i].Key != key && o.epoch == after-1 && c.shard(checks[i].Key) == sh {
			o.epoch = after
		}
	}
}

// capExpiry makes every entry answer no later than by.
func (c *overLimitCache) capExpiry(by int64) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			e.until = min(e.until, by)
		}
		sh.mu.Unlock()
	}
}

func (c *overLimitCache) stats() CacheStats {
	return CacheStats{Hits: c.hits.Load(), Waits: c.waits.Load(), Evictions: c.evictions.Load(), Entries: c.entries.Load(), Bytes: c.bytes.Load()}
}

// cached answers from the over-limit cache every enforced check it holds a
// denial for, noting the others' cache epochs, and reports whether one was
// denied: then the request is, without asking the store. A check whose
// key's denial has expired may wait (within ctx) for another caller's
// flight, unless the request is in a flight itself, so no two requests
// wait on each other. It returns the clock's reading after any wait.
func (e *Engine) cached(ctx context.Context, checks []Check, out []Outcome, now int64) (bool, int64) {
	hit, flying := false, false
	for i := range checks {
		c, o := &checks[i], &out[i]
		if c.Shadow || c.CheckOnly || o.Err != nil || c.NoCache || e.leased(c) {
			continue
		}
		for {
			r := e.cache.lookup(c.Key, c.Limit, c.cost(), now, !flying)
			if r.wait == nil {
				if r.hit {
					*o = Outcome{Decision: r.d, Verdict: Denied, Decided: true, Cached: true}
					hit = true
				} else {
					o.epoch, o.entry, o.in = r.epoch, r.entry, r.in
					flying = flying || r.in != nil
				}
				break
			}
			select {
			case <-r.wait.done:
				now = e.micros()
				if r.wait.failed {
					// The call this check waited for failed: the cached
					// answer stands, retry at once.
					d := r.wait.entry.answer(now)
					d.RetryAfter = max(d.RetryAfter, time.Microsecond)
					d.ResetAfter = max(d.ResetAfter, 0)
					e.cache.hits.Add(1)
					*o = Outcome{Decision: d, Verdict: Denied, Decided: true, Cached: true}
					hit = true
					break
				}
				continue
			case <-ctx.Done():
				// The deadline passed waiting: the store call fails with
				// it, and the check follows its failure mode.
			}
			break
		}
	}
	return hit, now
}

// finishFlights ends the store calls the request's checks made as part of
// a key's flight, with their outcomes, after remember stored its denials.
func (e *Engine) finishFlights(checks []Check, out []Outcome) {
	for i := range out {
		if o := &out[i]; o.in != nil {
			e.cache.finish(checks[i].Key, o.entry, o.in, o)
			o.entry, o.in = nil, nil
		}
	}
}

// cachedOne answers the shadow check c from the over-limit cache if it
// holds a denial for it (shadow checks never wait for a flight), and
// otherwise notes the key's cache epoch in o.
func (e *Engine) cachedOne(c *Check, o *Outcome, now int64) bool {
	if c.NoCache {
		return false
	}
	r := e.cache.lookup(c.Key, c.Limit, c.cost(), now, false)
	if !r.hit {
		o.epoch = r.epoch
		return false
	}
	*o = Outcome{Decision: r.d, Verdict: Denied, Decided: true, Cached: true}
	return true
}

// remember stores in the over-limit cache the store's denials of the
// enforced checks (or the shadow ones), asked when the engine's clock read
// now. A key that appears twice is not stored: its second decision saw the
// first's cost.
func (e *Engine) remember(checks []Check, out []Outcome, now int64, shadow bool) {
	for i := range checks {
		c, o := &checks[i], &out[i]
		if c.Shadow != shadow || c.CheckOnly || c.NoCache || o.Verdict != Denied || !o.Decided || o.Cached || o.Local || o.final || o.Leased {
			continue
		}
		twice := false
		for j := range checks {
			if j != i && checks[j].Key == c.Key && checks[j].Shadow == shadow {
				twice = true
				break
			}
		}
		if !twice {
			e.listen()
			e.cache.store(c.Key, c.Limit, c.cost(), o.Decision, now, o.epoch, e.expiresBy(now))
		}
	}
}

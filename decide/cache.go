package decide

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
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
)

// CacheOptions bound the engine's over-limit cache, which remembers each
// denial until its retry delay has passed and answers further requests of
// at least that cost for the same key and limit without asking the store.
// The zero value turns it on with the default bounds (for every store but
// the memory store, which needs no cache).
type CacheOptions struct {
	// Disabled turns the cache off for every check.
	Disabled bool
	// MaxEntries bounds the number of denials held. Zero:
	// DefaultCacheEntries.
	MaxEntries int
	// MaxBytes bounds the memory held, as estimated: each entry's key
	// length plus CacheEntryOverhead. Zero: DefaultCacheBytes.
	MaxBytes int64
}

// CacheStats are the over-limit cache's counters and size.
type CacheStats struct {
	// Hits counts checks answered from the cache, without the store.
	Hits uint64
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
// engine's clock read at (before the call), so every cost of at least cost
// stays denied until expires = at + the decision's RetryAfter, if nothing
// is given back meanwhile.
type denial struct {
	limit   floodgate.Limit
	cost    int64
	at      int64 // microseconds on the engine's clock
	expires int64
	d       floodgate.Decision
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
	evictions  atomic.Uint64
}

func newCache(o CacheOptions) (*overLimitCache, error) {
	if o.MaxEntries < 0 {
		return nil, fmt.Errorf("decide: Options.OverLimitCache.MaxEntries %d must not be negative", o.MaxEntries)
	}
	if o.MaxBytes < 0 {
		return nil, fmt.Errorf("decide: Options.OverLimitCache.MaxBytes %d must not be negative", o.MaxBytes)
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
// a denial of at most that cost is held and its retry delay has not passed;
// otherwise the key's shard epoch, for store.
func (c *overLimitCache) lookup(key string, limit floodgate.Limit, cost, now int64) (floodgate.Decision, bool, uint64) {
	sh := c.shard(key)
	epoch := sh.epoch.Load()
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	switch {
	case e == nil:
		return floodgate.Decision{}, false, epoch
	case now >= e.expires:
		sh.mu.Lock()
		if sh.m[key] == e {
			c.remove(sh, key)
		}
		sh.mu.Unlock()
		return floodgate.Decision{}, false, epoch
	case e.limit != limit || cost < e.cost:
		return floodgate.Decision{}, false, epoch
	}
	c.hits.Add(1)
	return e.answer(now), true, 0
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
		unit, perMicro := fixedpoint.Unit(w, refill), fixedpoint.PerMicro(w, refill)
		if level := e.cost*unit - (e.expires-now)*perMicro; level > 0 {
			d.Remaining = min(e.cost-1, max(d.Remaining, level/unit))
		}
	}
	return d
}

// store remembers that the store denied cost under limit for key with d,
// asked when the engine's clock read at and the key's shard epoch was
// epoch.
func (c *overLimitCache) store(key string, limit floodgate.Limit, cost int64, d floodgate.Decision, at int64, epoch uint64) {
	r := d.RetryAfter.Microseconds()
	if d.RetryAfter%time.Microsecond != 0 {
		r++ // the stores' delays are whole microseconds; never be early
	}
	if r <= 0 {
		return
	}
	e := &denial{limit: limit, cost: cost, at: at, expires: at + r, d: d}
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

// remove deletes key from sh, which the caller has locked.
func (c *overLimitCache) remove(sh *cacheShard, key string) {
	if _, ok := sh.m[key]; ok {
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

func (c *overLimitCache) stats() CacheStats {
	return CacheStats{Hits: c.hits.Load(), Evictions: c.evictions.Load(), Entries: c.entries.Load(), Bytes: c.bytes.Load()}
}

// cached answers from the over-limit cache every enforced check it holds a
// denial for, noting the others' cache epochs, and reports whether one was
// denied: then the request is, without asking the store.
func (e *Engine) cached(checks []Check, out []Outcome, now int64) bool {
	hit := false
	for i := range checks {
		if c := &checks[i]; !c.Shadow && out[i].Err == nil && e.cachedOne(c, &out[i], now) {
			hit = true
		}
	}
	return hit
}

// cachedOne answers c from the over-limit cache if it holds a denial for
// it, and otherwise notes the key's cache epoch in o.
func (e *Engine) cachedOne(c *Check, o *Outcome, now int64) bool {
	if c.NoCache {
		return false
	}
	d, ok, epoch := e.cache.lookup(c.Key, c.Limit, c.cost(), now)
	if !ok {
		o.epoch = epoch
		return false
	}
	*o = Outcome{Decision: d, Verdict: Denied, Decided: true, Cached: true}
	return true
}

// remember stores in the over-limit cache the store's denials of the
// enforced checks (or the shadow ones), asked when the engine's clock read
// now. A key that appears twice is not stored: its second decision saw the
// first's cost.
func (e *Engine) remember(checks []Check, out []Outcome, now int64, shadow bool) {
	for i := range checks {
		c, o := &checks[i], &out[i]
		if c.Shadow != shadow || c.NoCache || o.Verdict != Denied || !o.Decided || o.Cached || o.Local {
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
			e.cache.store(c.Key, c.Limit, c.cost(), o.Decision, now, o.epoch)
		}
	}
}

// Package memory is floodgate's embedded store: rate limits decided in
// process, with no Redis. It implements every algorithm with exactly the
// semantics of the Redis store, so a service can start on it and move to
// Redis when several instances must share limits.
//
// The store is sharded, and a decision locks only its key. It evicts keys
// that have been fully replenished for longer than an eviction grace
// (DefaultEvictionGrace, one minute), so memory stays proportional to the
// keys active within their windows plus the grace, even under millions of
// distinct keys.
package memory

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

const (
	// shardBits selects the shard of a key: the top bits of its hash.
	shardBits  = 8
	shardCount = 1 << shardBits
	// minSweep is the number of keys below which a table never sweeps:
	// shardCount*minSweep keys per algorithm stay unswept at most.
	minSweep = 256
	// DefaultEvictionGrace is how long a fully replenished key stays in
	// memory before a sweep may drop it (see WithEvictionGrace).
	DefaultEvictionGrace = time.Minute
)

// Store is the in-process store. Create it with New; it is safe for
// concurrent use. It needs no Close: eviction runs inline, amortised over
// inserts, with no background goroutine.
type Store struct {
	// One table per algorithm and shard, each on its own cache line (see
	// table). They come first: a Store is a large allocation, so it starts
	// on a page and the tables on cache-line boundaries.
	buckets  [shardCount]table[algorithm.Bucket]
	fixed    [shardCount]table[algorithm.Window]
	counters [shardCount]table[algorithm.Window]
	logs     [shardCount]table[algorithm.Log]

	clock      floodgate.Clock // nil: the system clock, read through start
	start      time.Time       // the store's creation, with its monotonic reading
	startMicro int64           // start in microseconds since the Unix epoch
	grace      int64           // microseconds a replenished key is kept
	seed       maphash.Seed
}

var _ floodgate.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithEvictionGrace sets how long a fully replenished key stays in memory
// before a sweep may drop it (default DefaultEvictionGrace). Decisions never
// depend on it: a replenished key reads as new either way. A longer grace
// saves rebuilding keys that come back; a shorter one bounds memory closer
// to the keys active within their windows.
func WithEvictionGrace(d time.Duration) Option {
	return func(s *Store) { s.grace = max(0, d.Microseconds()) }
}

// WithClock makes the store read time from c instead of the system clock.
// Tests use it to move time by hand.
func WithClock(c floodgate.Clock) Option {
	return func(s *Store) { s.clock = c }
}

// New returns an empty store. Its tables allocate their indexes on first
// use.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), start: time.Now(), grace: DefaultEvictionGrace.Microseconds()}
	s.startMicro = s.start.UnixMicro()
	for _, o := range opts {
		o(s)
	}
	return s
}

// now returns the current time in microseconds since the Unix epoch. With
// no injected clock it is the wall time at New plus the monotonic time
// elapsed since: half the cost of time.Now (one clock read, not two), and
// immune to the wall clock being stepped while the store runs.
func (s *Store) now() int64 {
	if s.clock != nil {
		return s.clock.Now().UnixMicro()
	}
	return s.startMicro + time.Since(s.start).Microseconds()
}

// hash returns key's hash and its shard: the hash is computed once and
// serves both the shard (its top bits) and the slot in the shard's table
// (its low bits).
func (s *Store) hash(key string) (h uint64, shard int) {
	h = maphash.String(s.seed, key)
	return h, int(h >> (64 - shardBits))
}

// Allow is AllowN with a cost of 1.
func (s *Store) Allow(ctx context.Context, key string, limit floodgate.Limit) (floodgate.Decision, error) {
	return s.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether a request of cost n fits limit for key at the
// store's current time, and records it if so. See floodgate.Store.
func (s *Store) AllowN(_ context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if d, err := floodgate.Check(l, n); err != nil {
		return d, err
	}
	now := s.now()
	h, i := s.hash(key)
	// An entry that has expired (a new one has, at the start of time) is
	// fully replenished: its state starts again as a key never seen's.
	switch l.Algorithm {
	case floodgate.TokenBucket:
		e := s.buckets[i].lockOrInsert(h, key, now, s.grace)
		if e.expires <= now {
			e.state = algorithm.NewBucket(l, now)
		}
		d := e.state.Take(l, now, n)
		e.record(d.ResetAfter, now)
		return d, nil
	case floodgate.FixedWindow:
		e := s.lockWindow(&s.fixed[i], h, key, now)
		d := e.state.FixedWindow(l, now, n)
		e.record(d.ResetAfter, now)
		return d, nil
	case floodgate.SlidingWindowCounter:
		e := s.lockWindow(&s.counters[i], h, key, now)
		d := e.state.SlidingWindowCounter(l, now, n)
		e.record(d.ResetAfter, now)
		return d, nil
	default: // floodgate.SlidingWindowLog; Check rejected anything else.
		// An expired log empties itself: every entry is out of the window.
		// Its ring is kept for reuse.
		e := s.logs[i].lockOrInsert(h, key, now, s.grace)
		d := e.state.Add(l, now, n)
		e.state.Shrink()
		e.record(d.ResetAfter, now)
		return d, nil
	}
}

// lockWindow returns key's entry in t, a table of window counts, locked,
// with an expired state zeroed.
func (s *Store) lockWindow(t *table[algorithm.Window], h uint64, key string, now int64) *entry[algorithm.Window] {
	e := t.lockOrInsert(h, key, now, s.grace)
	if e.expires <= now {
		e.state = algorithm.Window{}
	}
	return e
}

// record notes a decision made at now on e's state, with resetAfter its
// ResetAfter, and unlocks e. A decision that leaves nothing to remember
// (ResetAfter 0) clears the entry, as if the key had never been seen; any
// other sets its expiry, the moment the key is fully replenished again.
func (e *entry[S]) record(resetAfter time.Duration, now int64) {
	if resetAfter <= 0 {
		e.clear()
	} else {
		e.expires = now + resetAfter.Microseconds()
	}
	e.mu.Unlock()
}

// RefundN gives back n units of quota to key under limit. See
// floodgate.Store.
func (s *Store) RefundN(_ context.Context, key string, l floodgate.Limit, n int64) error {
	if _, err := floodgate.Check(l, n); err != nil {
		return err
	}
	now := s.now()
	h, i := s.hash(key)
	switch l.Algorithm {
	case floodgate.TokenBucket:
		refund(&s.buckets[i], h, key, now, func(b *algorithm.Bucket) { b.Refund(l, now, n) })
	case floodgate.FixedWindow:
		refund(&s.fixed[i], h, key, now, func(w *algorithm.Window) { w.Refund(l, now, n) })
	case floodgate.SlidingWindowCounter:
		refund(&s.counters[i], h, key, now, func(w *algorithm.Window) { w.Refund(l, now, n) })
	default:
		refund(&s.logs[i], h, key, now, func(g *algorithm.Log) { g.Refund(n) })
	}
	return nil
}

// refund runs give on key's state in t if it has one that has not expired:
// a missing or expired key is fully replenished, with nothing to give back.
func refund[S any](t *table[S], h uint64, key string, now int64, give func(*S)) {
	if e := t.lock(h, key); e != nil {
		if e.expires > now {
			give(&e.state)
		}
		e.mu.Unlock()
	}
}

// Reset clears key's state under limit's algorithm: the key reads as never
// seen.
func (s *Store) Reset(_ context.Context, key string, limit floodgate.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	h, i := s.hash(key)
	switch limit.Algorithm {
	case floodgate.TokenBucket:
		reset(&s.buckets[i], h, key)
	case floodgate.FixedWindow:
		reset(&s.fixed[i], h, key)
	case floodgate.SlidingWindowCounter:
		reset(&s.counters[i], h, key)
	default:
		reset(&s.logs[i], h, key)
	}
	return nil
}

// reset clears key's entry in t, if t holds one; a sweep drops it later.
func reset[S any](t *table[S], h uint64, key string) {
	if e := t.lock(h, key); e != nil {
		e.clear()
		e.mu.Unlock()
	}
}

// Len returns the number of keys the store holds state for, expired or not
// yet swept. It is meant for tests and metrics.
func (s *Store) Len() int {
	n := 0
	for i := range shardCount {
		n += s.buckets[i].len() + s.fixed[i].len() + s.counters[i].len() + s.logs[i].len()
	}
	return n
}

// MemoryUsage returns an estimate of the bytes the store spends on key under
// limit's algorithm, or 0 if it holds no state for it: the key's bytes, its
// entry (lock, key header, expiry and the algorithm's state), its share of
// the index (two 16-byte slots: an index is about half full) and, for the
// log, its ring buffer.
func (s *Store) MemoryUsage(key string, limit floodgate.Limit) int {
	h, i := s.hash(key)
	switch limit.Algorithm {
	case floodgate.TokenBucket:
		return s.buckets[i].usage(h, key, nil)
	case floodgate.FixedWindow:
		return s.fixed[i].usage(h, key, nil)
	case floodgate.SlidingWindowCounter:
		return s.counters[i].usage(h, key, nil)
	case floodgate.SlidingWindowLog:
		return s.logs[i].usage(h, key, func(g *algorithm.Log) int { return 8 * g.Cap() })
	}
	return 0
}

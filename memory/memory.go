// Package memory is floodgate's embedded store: rate limits decided in
// process, with no Redis. It implements every algorithm with exactly the
// semantics of the Redis store, so a service can start on it and move to
// Redis when several instances must share limits.
//
// The store is sharded, and a decision locks only its key. It evicts keys
// that have been fully replenished for longer than an eviction grace
// (DefaultEvictionGrace, one minute), so memory stays proportional to the
// keys active within their windows plus the grace, even under millions of
// distinct keys. [WithMaxKeys] bounds the keys outright, evicting the least
// recently decided, and [Store.Sweep] drops replenished keys while no new
// key arrives (floodgate serve calls it every minute), so memory is given
// back after a burst even when the store is idle.
//
// Keys are kept as given: callers bound their length (every floodgate front
// end keys through storekey.Of, which hashes keys over
// storekey.MaxLen bytes).
package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithm"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
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
// concurrent use. It holds no goroutine or connection: eviction runs
// inline, amortised over inserts. [Store.Close] is there only so that
// switching to another store changes one line.
type Store struct {
	// The keys' states, one keyspace per algorithm, indexed by it.
	keyspaces [len(algorithms)]keyspace

	clock      floodgate.Clock // nil: the system clock, read through start
	start      time.Time       // the store's creation, with its monotonic reading
	startMicro int64           // start in microseconds since the Unix epoch
	grace      int64           // microseconds a replenished key is kept
	seed       maphash.Seed

	// With a cap (WithMaxKeys): the keys of each shard, in every
	// algorithm, and the most a shard holds before it evicts.
	shardKeys []shardKeys
	perShard  int64
	maxKeys   int64 // WithMaxKeys's n, as configured
	evictions atomic.Int64

	listeners listeners // Listen's callers, for Broadcast
}

// shardKeys counts one shard's keys; each counter has its cache line, so
// inserts in two shards do not contend.
type shardKeys struct {
	n atomic.Int64
	_ [cacheLine - 8]byte
}

// algorithms makes each algorithm's keyspace: its state type, which
// implements algorithm.State. Adding an algorithm adds a line here.
var algorithms = [...]func() keyspace{
	floodgate.SlidingWindowLog:     newKeyspace[algorithm.Log],
	floodgate.TokenBucket:          newKeyspace[algorithm.Bucket],
	floodgate.SlidingWindowCounter: newKeyspace[algorithm.Counter],
	floodgate.FixedWindow:          newKeyspace[algorithm.Fixed],
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

// WithMaxKeys bounds the keys the store holds to about n, whatever their
// algorithm: when a shard (one of 256, by the key's hash) holds more than
// its share, n/256 rounded up, the next decision in it evicts its least
// recently decided (or refunded) quarter, and Stats counts them in Evictions. An evicted
// key reads as new when it comes back, so a cap too small for the keys
// active within their windows lets their clients start afresh: size it for
// the keys you expect, as a bound on memory against a flood of new keys.
// Zero or less: no cap (the default), at no cost to decisions.
func WithMaxKeys(n int) Option {
	return func(s *Store) {
		if n <= 0 {
			s.shardKeys, s.perShard, s.maxKeys = nil, 0, 0
			return
		}
		s.maxKeys = int64(n)
		s.perShard = int64((n + shardCount - 1) / shardCount)
		s.shardKeys = make([]shardKeys, shardCount)
	}
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
	for a, newKeyspace := range algorithms {
		if newKeyspace != nil {
			s.keyspaces[a] = newKeyspace()
		}
	}
	for _, o := range opts {
		o(s)
	}
	if s.shardKeys != nil {
		for _, k := range s.keyspaces {
			if k != nil {
				k.setCounters(s.shardKeys)
			}
		}
	}
	return s
}

// now returns the current time in microseconds since the Unix epoch. With
// no injected clock it is the wall time at New plus the monotonic time
// elapsed since: one clock read, not time.Now's two, and immune to the
// wall clock being stepped while the store runs.
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
// store's current time, and records it if so; a cost of 0 reads the key
// and changes nothing. See floodgate.Store.
func (s *Store) AllowN(_ context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	if d, err := limitcheck.Allow(l, n); err != nil {
		return d, err
	}
	h, i := s.hash(key)
	// Check rejected an algorithm without a keyspace.
	if n == 0 {
		return s.keyspaces[l.Algorithm].peek(h, i, key, l, s.now()).decision(l.Quota), nil
	}
	o := s.keyspaces[l.Algorithm].allow(h, i, key, l, s, n, s.grace)
	if s.shardKeys != nil {
		s.capShard(i)
	}
	return o.decision(l.Quota), nil
}

// capShard evicts the least recently decided quarter of shard i if it holds
// more than its share of the cap. It locks the shard's tables in algorithm
// order (nothing else holds two tables' locks), holding no entry.
func (s *Store) capShard(i int) {
	if s.shardKeys[i].n.Load() <= s.perShard {
		return
	}
	var tables [len(algorithms)]shardTable
	n := 0
	for _, k := range s.keyspaces {
		if k != nil {
			tables[n] = k.shard(i)
			tables[n].lockTable()
			n++
		}
	}
	defer func() {
		for _, t := range tables[:n] {
			t.unlockTable()
		}
	}()
	total := s.shardKeys[i].n.Load()
	if total <= s.perShard {
		return // another call evicted meanwhile
	}
	now := usedAt(s.now())
	var ages []uint32
	for _, t := range tables[:n] {
		ages = t.ages(now, ages)
	}
	drop := int(min(int64(len(ages)), total-s.perShard*3/4))
	if drop <= 0 {
		return
	}
	slices.Sort(ages)
	cutoff := ages[len(ages)-drop] // the youngest age to drop
	dropped := 0
	for _, t := range tables[:n] {
		dropped += t.evict(now, cutoff, drop-dropped)
	}
	s.evictions.Add(int64(dropped))
}

// Sweep drops every key that has been fully replenished for longer than the
// eviction grace, in every table, and shrinks the tables to the keys left.
// Inserts sweep on their own as tables grow; Sweep gives memory back when
// no new key arrives, as after a burst. It takes each table's lock in
// turn, so decisions on other tables go on meanwhile.
func (s *Store) Sweep() {
	now := s.now()
	for _, k := range s.keyspaces {
		if k == nil {
			continue
		}
		for i := range shardCount {
			k.shard(i).sweepAll(now, s.grace)
		}
	}
}

// Stats are a store's counts, for metrics.
type Stats struct {
	// Keys is the number of keys held, as Len.
	Keys int
	// KeyBytes is the total length of the keys held.
	KeyBytes int
	// Evictions counts the keys evicted to keep within WithMaxKeys (not
	// those dropped because they were replenished).
	Evictions int64
	// MaxKeys is the cap of WithMaxKeys, as configured; 0 without one.
	// Each shard holds up to its share, MaxKeys/256 rounded up, so the
	// store may briefly hold up to 255 keys more than MaxKeys before a
	// shard evicts.
	MaxKeys int64
}

// Stats returns the store's counts. It takes every table's lock in turn.
func (s *Store) Stats() Stats {
	st := Stats{Evictions: s.evictions.Load(), MaxKeys: s.maxKeys}
	for _, k := range s.keyspaces {
		if k == nil {
			continue
		}
		for i := range shardCount {
			n, b := k.shard(i).stats()
			st.Keys += n
			st.KeyBytes += b
		}
	}
	return st
}

// RefundN gives back n units of quota to key under limit. See
// floodgate.Store.
func (s *Store) RefundN(_ context.Context, key string, l floodgate.Limit, n int64) error {
	if _, err := limitcheck.Allow(l, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	h, i := s.hash(key)
	s.keyspaces[l.Algorithm].refund(h, i, key, l, s.now(), n)
	return nil
}

// InProcess reports true: the store decides in this process, so an engine
// in front of it (httplimit, grpclimit, serve) needs no over-limit cache.
func (s *Store) InProcess() bool { return true }

// Reset clears key's state under limit's algorithm: the key reads as never
// seen.
func (s *Store) Reset(_ context.Context, key string, limit floodgate.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	h, i := s.hash(key)
	s.keyspaces[limit.Algorithm].reset(h, i, key)
	return nil
}

// Close does nothing and the store stays usable: there is nothing to
// release. It makes a memory store a drop-in for redisstore.Store and
// remotestore.Store, whose Close a program defers.
func (s *Store) Close() {}

// Len returns the number of keys the store holds state for, expired or not
// yet swept. It is meant for tests and metrics.
func (s *Store) Len() int {
	n := 0
	for _, k := range s.keyspaces {
		if k != nil {
			n += k.len()
		}
	}
	return n
}

// MemoryUsage returns an estimate of the bytes the store spends on key under
// limit's algorithm, or 0 if it holds no state for it: the key's bytes, its
// entry (lock, key header, expiry and the algorithm's state), its share of
// the index (one and a half 16-byte slots: an index is between half and
// seven eighths full, and a store's average runs from 1.3 to 2.1 slots a
// key with how its key count sits against the indexes' sizes) and what the
// state holds outside the entry (the log's ring buffer).
func (s *Store) MemoryUsage(key string, limit floodgate.Limit) int {
	if int(limit.Algorithm) >= len(s.keyspaces) || s.keyspaces[limit.Algorithm] == nil {
		return 0
	}
	h, i := s.hash(key)
	return s.keyspaces[limit.Algorithm].usage(h, i, key)
}

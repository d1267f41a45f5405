// Package memory is floodgate's embedded store: rate limits decided in
// process, with no Redis. It implements every algorithm with exactly the
// semantics of the Redis store, so a service can start on it and move to
// Redis when several instances must share limits.
//
// The store is sharded (no global lock) and evicts keys that have been fully
// replenished for longer than an eviction grace (DefaultEvictionGrace, one
// minute), so memory stays proportional to the keys active within their
// windows plus the grace, even under millions of distinct keys.
package memory

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

const (
	shardCount = 64
	// minSweep is the table size below which a shard never sweeps.
	minSweep = 1024
	// DefaultEvictionGrace is how long a fully replenished key stays in
	// memory before a sweep may drop it (see WithEvictionGrace).
	DefaultEvictionGrace = time.Minute
)

// Store is the in-process store. Create it with New; it is safe for
// concurrent use. It needs no Close: eviction runs inline, amortised over
// inserts, with no background goroutine.
type Store struct {
	clock  floodgate.Clock // nil: the system clock, read through start
	start  time.Time       // the store's creation, with its monotonic reading
	grace  int64           // microseconds a replenished key is kept
	seed   maphash.Seed
	shards [shardCount]shard
}

var _ floodgate.Store = (*Store)(nil)

type shard struct {
	mu       sync.Mutex
	buckets  table[algorithm.Bucket]
	fixed    table[algorithm.Window]
	counters table[algorithm.Window]
	logs     table[algorithm.Log]
	_        [64]byte // keep shards on separate cache lines
}

// table maps keys to states with their expiry time.
type table[S any] struct {
	items   map[string]*item[S]
	sweepAt int
}

type item[S any] struct {
	state   S
	expires int64 // microseconds; at or after it, the key is fully replenished
}

// get returns the item for key and whether it is in the table. fresh
// reports that its state must be initialised: the key is new, or its item
// expired (fully replenished, so it reads as new).
func (t *table[S]) get(key string, now int64) (it *item[S], present, fresh bool) {
	it, present = t.items[key]
	if !present {
		return new(item[S]), false, true
	}
	return it, true, it.expires <= now
}

// keep records it after a decision d at now with its expiry, the moment the
// key is fully replenished; a sweep may drop it a grace after that. A
// decision that leaves nothing to remember deletes it at once.
func (t *table[S]) keep(key string, it *item[S], present bool, d floodgate.Decision, now, grace int64) {
	if d.ResetAfter <= 0 {
		if present {
			delete(t.items, key)
		}
		return
	}
	it.expires = now + d.ResetAfter.Microseconds()
	if !present {
		t.sweep(now, grace)
		t.items[key] = it
	}
}

// sweep deletes the items that have been fully replenished for longer than
// grace, once the table has doubled since the last sweep: the cost is
// amortised O(1) per insert, and the table holds at most about twice the
// keys seen within their window plus the grace. The grace keeps a key that
// is used steadily (but refills between uses) from being dropped and
// rebuilt, an allocation and two map writes, on every visit.
func (t *table[S]) sweep(now, grace int64) {
	if len(t.items) < max(minSweep, t.sweepAt) {
		return
	}
	for k, it := range t.items {
		if it.expires+grace <= now {
			delete(t.items, k)
		}
	}
	t.sweepAt = 2 * len(t.items)
}

// Option configures a Store.
type Option func(*Store)

// now returns the current time in microseconds since the Unix epoch. With
// no injected clock it is the wall time at New plus the monotonic time
// elapsed since: half the cost of time.Now (one clock read, not two), and
// immune to the wall clock being stepped while the store runs.
func (s *Store) now() int64 {
	if s.clock != nil {
		return s.clock.Now().UnixMicro()
	}
	return s.start.UnixMicro() + time.Since(s.start).Microseconds()
}

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

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), start: time.Now(), grace: DefaultEvictionGrace.Microseconds()}
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.buckets.items = map[string]*item[algorithm.Bucket]{}
		sh.fixed.items = map[string]*item[algorithm.Window]{}
		sh.counters.items = map[string]*item[algorithm.Window]{}
		sh.logs.items = map[string]*item[algorithm.Log]{}
	}
	return s
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%shardCount]
}

// Allow is AllowN with a cost of 1.
func (s *Store) Allow(ctx context.Context, key string, limit floodgate.Limit) (floodgate.Decision, error) {
	return s.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether a request of cost n fits limit for key at the
// store's current time, and records it if so. See floodgate.Store.
func (s *Store) AllowN(_ context.Context, key string, limit floodgate.Limit, n int64) (floodgate.Decision, error) {
	if d, err := floodgate.Check(limit, n); err != nil {
		return d, err
	}
	return s.decide(key, limit, s.now(), n), nil
}

func (s *Store) decide(key string, l floodgate.Limit, now, n int64) floodgate.Decision {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var d floodgate.Decision
	switch l.Algorithm {
	case floodgate.TokenBucket:
		it, present, fresh := sh.buckets.get(key, now)
		if fresh {
			it.state = algorithm.NewBucket(l, now)
		}
		d = it.state.Take(l, now, n)
		sh.buckets.keep(key, it, present, d, now, s.grace)
	case floodgate.FixedWindow:
		it, present, fresh := sh.fixed.get(key, now)
		if fresh {
			it.state = algorithm.Window{}
		}
		d = it.state.FixedWindow(l, now, n)
		sh.fixed.keep(key, it, present, d, now, s.grace)
	case floodgate.SlidingWindowCounter:
		it, present, fresh := sh.counters.get(key, now)
		if fresh {
			it.state = algorithm.Window{}
		}
		d = it.state.SlidingWindowCounter(l, now, n)
		sh.counters.keep(key, it, present, d, now, s.grace)
	default: // floodgate.SlidingWindowLog; Check rejected anything else.
		it, present, _ := sh.logs.get(key, now)
		// An expired log empties itself: every entry is out of the window.
		d = it.state.Add(l, now, n)
		it.state.Shrink()
		sh.logs.keep(key, it, present, d, now, s.grace)
	}
	return d
}

// RefundN gives back n units of quota to key under limit. See
// floodgate.Store.
func (s *Store) RefundN(_ context.Context, key string, limit floodgate.Limit, n int64) error {
	if _, err := floodgate.Check(limit, n); err != nil {
		return err
	}
	now := s.now()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// A missing or expired key is fully replenished: nothing to give back.
	switch limit.Algorithm {
	case floodgate.TokenBucket:
		if it, _, fresh := sh.buckets.get(key, now); !fresh {
			it.state.Refund(limit, now, n)
		}
	case floodgate.FixedWindow:
		if it, _, fresh := sh.fixed.get(key, now); !fresh {
			it.state.Refund(limit, now, n)
		}
	case floodgate.SlidingWindowCounter:
		if it, _, fresh := sh.counters.get(key, now); !fresh {
			it.state.Refund(limit, now, n)
		}
	default:
		if it, _, fresh := sh.logs.get(key, now); !fresh {
			it.state.Refund(n)
		}
	}
	return nil
}

// Reset clears key's state under limit's algorithm.
func (s *Store) Reset(_ context.Context, key string, limit floodgate.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch limit.Algorithm {
	case floodgate.TokenBucket:
		delete(sh.buckets.items, key)
	case floodgate.FixedWindow:
		delete(sh.fixed.items, key)
	case floodgate.SlidingWindowCounter:
		delete(sh.counters.items, key)
	default:
		delete(sh.logs.items, key)
	}
	return nil
}

// Len returns the number of keys the store holds state for, expired or not
// yet swept. It is meant for tests and metrics.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets.items) + len(sh.fixed.items) + len(sh.counters.items) + len(sh.logs.items)
		sh.mu.Unlock()
	}
	return n
}

// mapEntryOverhead approximates the bytes a Go map spends per entry beyond
// the key's bytes and the value: the key's string header, control bytes and
// load-factor slack.
const mapEntryOverhead = 16 + 8

// MemoryUsage returns an estimate of the bytes the store spends on key under
// limit's algorithm, or 0 if it holds no state for it: the key's bytes, the
// map entry and the algorithm's state (for the log, its ring buffer).
func (s *Store) MemoryUsage(key string, limit floodgate.Limit) int {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	base := len(key) + mapEntryOverhead
	switch limit.Algorithm {
	case floodgate.TokenBucket:
		if it, ok := sh.buckets.items[key]; ok {
			return base + int(unsafe.Sizeof(*it))
		}
	case floodgate.FixedWindow:
		if it, ok := sh.fixed.items[key]; ok {
			return base + int(unsafe.Sizeof(*it))
		}
	case floodgate.SlidingWindowCounter:
		if it, ok := sh.counters.items[key]; ok {
			return base + int(unsafe.Sizeof(*it))
		}
	case floodgate.SlidingWindowLog:
		if it, ok := sh.logs.items[key]; ok {
			return base + int(unsafe.Sizeof(*it)) + 8*it.state.Cap()
		}
	}
	return 0
}

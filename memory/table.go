package memory

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// table maps the keys of one shard of one algorithm to their entries. A
// decision locks only its key's entry, so a warm key's decision writes one
// cache line (lock and state together) and reads the index without a lock.
//
// The index is an open-addressing hash table (linear probing, at most seven
// eighths full) of slots, each a hash and an entry pointer, written once
// with atomic stores (hash, then entry). Only inserts write to an index,
// under mu; sweeps and growth build a new index and publish it, sharing the
// entries. A reader that misses a key looks again under mu in the current
// index, and one that locks an entry a sweep dropped (droppedAt) looks again too.
// The current index holds at most one live entry per key, so decisions are
// serialised per key.
type table[S any] struct {
	mu       sync.Mutex               // serialises inserts, sweeps and growth
	index    atomic.Pointer[index[S]] // nil until the first insert
	live     int                      // entries in the current index
	sweepAt  int                      // live at which the next insert sweeps
	keyBytes int                      // the lengths of the live entries' keys
	// keys counts the keys of the table's shard in every algorithm, when
	// the store has a cap (WithMaxKeys); nil otherwise.
	keys *atomic.Int64
	// The padding makes a table a cache line long, so that in an array of
	// them no two headers share a line: inserts in one do not evict
	// another's header from the other core's cache.
	_ [cacheLine - tableHeader]byte
}

// tableHeader is the size of a table's fields, before its padding.
const tableHeader = unsafe.Sizeof(sync.Mutex{}) + unsafe.Sizeof(atomic.Pointer[int]{}) + 3*unsafe.Sizeof(0) + unsafe.Sizeof((*atomic.Int64)(nil))

// cacheLine is the size of a CPU cache line on the common platforms.
const cacheLine = 64

// minSlots is the size of a table's first index.
const minSlots = 8

// index is a table's index, replaced whole when it grows or is swept.
type index[S any] struct {
	slots []slot[S] // a power of two long
}

// slot is one entry of an index.
type slot[S any] struct {
	hash  atomic.Uint64            // the key's hash, stored before entry
	entry atomic.Pointer[entry[S]] // nil: the slot is empty
}

// entry is one key with its state.
type entry[S any] struct {
	mu sync.Mutex
	// at is the moment of the key's last decision or refund (at first,
	// of its insert), in microseconds: no decision on the key is made at
	// an earlier one, and a store with a cap evicts by it. droppedAt (a
	// sweep or an eviction dropped the entry) is written under the
	// table's mu and mu.
	at      int64
	key     string // never changes
	expires int64  // microseconds; at or after it, the key is fully replenished
	state   S
}

// droppedAt is the at of an entry a sweep or an eviction dropped.
const droppedAt = math.MinInt64

// probe returns key's entry in ix, locked, or nil if ix has none or only a
// dropped one.
func (ix *index[S]) probe(h uint64, key string) *entry[S] {
	mask := len(ix.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &ix.slots[i]
		e := s.entry.Load()
		if e == nil {
			return nil
		}
		if s.hash.Load() != h {
			continue
		}
		// Lock before reading the key: the entry's line is then fetched
		// once, for writing, rather than shared and then upgraded.
		e.mu.Lock()
		if e.key == key {
			if e.at == droppedAt {
				e.mu.Unlock()
				return nil
			}
			return e
		}
		e.mu.Unlock()
	}
}

// find returns key's entry in ix, unlocked, or nil if ix has none. The
// entry may be dropped: the caller checks once it holds the entry's lock.
func (ix *index[S]) find(h uint64, key string) *entry[S] {
	mask := len(ix.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &ix.slots[i]
		e := s.entry.Load()
		if e == nil {
			return nil
		}
		// The key never changes once the entry is published.
		if s.hash.Load() == h && e.key == key {
			return e
		}
	}
}

// put stores e, whose key hashes to h, in an empty slot of ix. The caller
// holds the table's mu, or ix is not published yet.
func (ix *index[S]) put(h uint64, e *entry[S]) {
	mask := len(ix.slots) - 1
	i := int(h) & mask
	for ix.slots[i].entry.Load() != nil {
		i = (i + 1) & mask
	}
	ix.slots[i].hash.Store(h)
	ix.slots[i].entry.Store(e)
}

// lock returns key's entry, locked, or nil if the table has none. It locks
// nothing else unless the key is missing from the index it reads.
func (t *table[S]) lock(h uint64, key string) *entry[S] {
	if ix := t.index.Load(); ix != nil {
		if e := ix.probe(h, key); e != nil {
			return e
		}
	}
	// The index may have been replaced meanwhile: look in the current one.
	t.mu.Lock()
	defer t.mu.Unlock()
	if ix := t.index.Load(); ix != nil {
		return ix.probe(h, key)
	}
	return nil
}

// lockOrInsert returns key's entry, locked, adding it if the table has
// none: a new entry has a zero state and has expired at the start of time,
// so it reads as a key never seen. An insert first sweeps if the table has
// doubled since the last sweep, and grows the index (doubling it) once it
// would be more than seven eighths full: a fuller index holds the keys in
// fewer cache lines and pages, which the decisions on many keys gain more
// from than inserts lose in longer probes (docs/PERFORMANCE.md).
func (t *table[S]) lockOrInsert(h uint64, key string, c clock, grace int64) *entry[S] {
	if ix := t.index.Load(); ix != nil {
		if e := ix.probe(h, key); e != nil {
			return e
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ix := t.index.Load()
	if ix != nil {
		if e := ix.probe(h, key); e != nil {
			return e
		}
	}
	// Read under mu, after any sweep or eviction that dropped key's former
	// entry: the new entry's first decision is never before that one's.
	now := c.now()
	if t.live >= max(minSweep, t.sweepAt) {
		ix = t.sweep(now, grace)
	}
	if ix == nil || 8*(t.live+1) > 7*len(ix.slots) {
		ix = t.rebuild(slotsFor(2 * (t.live + 1)))
	}
	e := &entry[S]{key: key, expires: math.MinInt64, at: now}
	e.mu.Lock()
	ix.put(h, e)
	t.live++
	t.keyBytes += len(key)
	if t.keys != nil {
		t.keys.Add(1)
	}
	return e
}

// entry returns key's entry, unlocked, adding it if the table has none (as
// lockOrInsert, reading c under mu). With slow set, or if the index it reads
// misses the key, it looks under mu, in the current index.
func (t *table[S]) entry(h uint64, key string, c clock, grace int64, slow bool) *entry[S] {
	if ix := t.index.Load(); ix != nil && !slow {
		if e := ix.find(h, key); e != nil {
			return e
		}
	}
	e := t.lockOrInsert(h, key, c, grace)
	e.mu.Unlock()
	return e
}

// age is how long before now (in usedAt's units) an entry was last used at
// at: 0 for a use after now, which a decision that read the clock after
// the eviction's caller makes.
func age(now uint32, at int64) uint32 {
	if a := now - usedAt(at); int32(a) > 0 {
		return a
	}
	return 0
}

// fixedClock is a clock that always reads the same time.
type fixedClock int64

func (f fixedClock) now() int64 { return int64(f) }

// slotsFor returns the size of an index for n keys: a power of two, at
// least minSlots and n.
func slotsFor(n int) int {
	size := minSlots
	for size < n {
		size *= 2
	}
	return size
}

// rebuild publishes a copy of the current index with n slots, and returns
// it. The caller holds mu, so the current index holds no dropped entry.
func (t *table[S]) rebuild(n int) *index[S] {
	ix := &index[S]{slots: make([]slot[S], n)}
	if old := t.index.Load(); old != nil {
		for i := range old.slots {
			if e := old.slots[i].entry.Load(); e != nil {
				ix.put(old.slots[i].hash.Load(), e)
			}
		}
	}
	t.index.Store(ix)
	return ix
}

// sweep drops the entries that have been fully replenished for longer than
// grace, and returns the new index, sized for the keys left. Inserts run it
// once the table has doubled since the last sweep, so its cost is amortised
// O(1) per insert and the table holds at most about twice the keys active
// within their windows plus the grace. The caller holds mu.
func (t *table[S]) sweep(now, grace int64) *index[S] {
	old := t.index.Load()
	ix := &index[S]{slots: make([]slot[S], slotsFor(2*t.live))}
	for i := range old.slots {
		e := old.slots[i].entry.Load()
		if e == nil {
			continue
		}
		e.mu.Lock()
		if e.expires+grace <= now {
			t.drop(e)
		} else {
			ix.put(old.slots[i].hash.Load(), e)
		}
		e.mu.Unlock()
	}
	t.index.Store(ix)
	if n := slotsFor(2 * t.live); n < len(ix.slots)/2 {
		ix = t.rebuild(n)
	}
	t.sweepAt = 2 * t.live
	return ix
}

// drop marks e dropped (droppedAt) and forgets it. The caller holds mu and e.mu, and
// publishes an index without e.
func (t *table[S]) drop(e *entry[S]) {
	e.at = droppedAt
	e.state = *new(S) // release the log's ring now
	t.live--
	t.keyBytes -= len(e.key)
	if t.keys != nil {
		t.keys.Add(-1)
	}
}

// ages appends to dst how long ago each entry of the table was last used
// (decided, refunded or inserted: its at), in usedAt's units, at now. The
// caller holds mu.
func (t *table[S]) ages(now uint32, dst []uint32) []uint32 {
	if ix := t.index.Load(); ix != nil {
		for i := range ix.slots {
			if e := ix.slots[i].entry.Load(); e != nil {
				e.mu.Lock()
				dst = append(dst, age(now, e.at))
				e.mu.Unlock()
			}
		}
	}
	return dst
}

// evict drops up to n entries last used at least minAge ago (at now, in
// usedAt's units), and returns how many it dropped. The caller holds mu.
func (t *table[S]) evict(now, minAge uint32, n int) int {
	old := t.index.Load()
	if old == nil || n <= 0 {
		return 0
	}
	ix := &index[S]{slots: make([]slot[S], len(old.slots))}
	dropped := 0
	for i := range old.slots {
		e := old.slots[i].entry.Load()
		if e == nil {
			continue
		}
		e.mu.Lock()
		if dropped < n && age(now, e.at) >= minAge {
			t.drop(e)
			dropped++
		} else {
			ix.put(old.slots[i].hash.Load(), e)
		}
		e.mu.Unlock()
	}
	t.index.Store(ix)
	if m := slotsFor(2 * t.live); m < len(ix.slots)/2 {
		t.rebuild(m)
	}
	return dropped
}

// sweepAll is sweep outside an insert: Store.Sweep's.
func (t *table[S]) sweepAll(now, grace int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.index.Load() != nil && t.live > 0 {
		t.sweep(now, grace)
	}
}

// clear makes e read as a key never seen: a zero state, fully replenished
// from the start of time. The caller holds e.mu. A sweep drops it later.
func (e *entry[S]) clear() {
	e.state, e.expires = *new(S), math.MinInt64
}

// len returns the number of keys in the table.
func (t *table[S]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// usage returns the bytes the table spends on key (see Store.MemoryUsage),
// with extra(state) the bytes its state holds outside the entry, or 0 if
// the table does not hold key.
func (t *table[S]) usage(h uint64, key string, extra func(*S) int) int {
	e := t.lock(h, key)
	if e == nil {
		return 0
	}
	defer e.mu.Unlock()
	// The entry, and its slots at the index's typical load of two thirds.
	n := len(key) + int(unsafe.Sizeof(*e)) + 3*int(unsafe.Sizeof(slot[S]{}))/2
	if extra != nil {
		n += extra(&e.state)
	}
	return n
}

package memory

import (
	"time"
	"unsafe"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithm"
)

// keyspace holds every key's state under one algorithm, in one table per
// shard. Its methods are the store's for that algorithm, given the key's
// hash h and shard i; the limits and costs are valid.
type keyspace interface {
	allow(h uint64, i int, key string, l floodgate.Limit, c clock, n, grace int64) outcome
	// peek decides a request of cost 0: what key holds at now, without
	// adding it or changing its state.
	peek(h uint64, i int, key string, l floodgate.Limit, now int64) outcome
	refund(h uint64, i int, key string, l floodgate.Limit, now, n int64)
	reset(h uint64, i int, key string)
	len() int
	usage(h uint64, i int, key string) int
	// entry returns key's entry for a batch, unlocked, adding it if it is
	// missing. With slow set it looks under the table's lock.
	entry(h uint64, i int, key string, c clock, grace int64, slow bool) held
	// shard returns the table of shard i, for the store's caps and sweeps.
	shard(i int) shardTable
	// setCounters points each shard's table at its counter of keys.
	setCounters(keys []shardKeys)
}

// shardTable is a table as the store's eviction and sweeps see it,
// whatever its state type.
type shardTable interface {
	lockTable()
	unlockTable()
	ages(now uint32, dst []uint32) []uint32
	evict(now, minAge uint32, n int) int
	sweepAll(now, grace int64)
	stats() (keys, keyBytes int)
}

// state constrains a keyspace's state type S: *S is an algorithm.State.
type state[S any] interface {
	*S
	algorithm.State
}

// tables is the keyspace of the algorithm whose state is S. Each table is a
// cache line long; the allocator may start the array a few bytes past a
// line (a small header), which keeps every table's header within one line.
type tables[S any, P state[S]] struct {
	shards [shardCount]table[S]
}

func newKeyspace[S any, P state[S]]() keyspace { return new(tables[S, P]) }

// decide makes the decision of cost n under l at now on e, which the caller
// holds locked. A state whose expiry has passed (a new entry's has) starts
// again as a key never seen's, as its Redis key would have expired. As in
// the scripts, an admitted request sets the expiry to the moment the key is
// fully replenished, and a denied one writes nothing.
func decide[S any, P state[S]](e *entry[S], l floodgate.Limit, now, n int64) floodgate.Decision {
	st := P(&e.state)
	now = max(now, e.at)
	e.at = now
	if e.expires <= now {
		st.Replenish(l, now)
	}
	d := st.Allow(l, now, n)
	if d.Allowed {
		e.expires = now + d.ResetAfter.Microseconds()
	}
	return d
}

// usedAt is the moment now (in µs since the Unix epoch) in the units of an
// entry's age: units
// of 2^10 µs (about a millisecond), which wrap every 50 days; ages are
// differences, so they are right across a wrap.
func usedAt(now int64) uint32 { return uint32(uint64(now) >> 10) }

// clock is the store's clock, in microseconds.
type clock interface{ now() int64 }

// outcome is a Decision without its Limit, which the caller fills in: the
// compiler passes a struct of up to four fields in registers, where it
// copies a Decision of five through memory at every call.
type outcome struct {
	allowed                bool
	remaining              int64
	retryAfter, resetAfter time.Duration
}

// decision returns o as a Decision of the limit of quota.
func (o outcome) decision(quota int64) floodgate.Decision {
	return floodgate.Decision{Allowed: o.allowed, Limit: quota, Remaining: o.remaining, RetryAfter: o.retryAfter, ResetAfter: o.resetAfter}
}

func (k *tables[S, P]) allow(h uint64, i int, key string, l floodgate.Limit, c clock, n, grace int64) outcome {
	// The time is read before the key's slot in the index, so that the
	// clock's read and the slot's fetch (often a cache miss) overlap. A
	// decision is never made at a moment before the key's last one, as
	// Redis runs scripts in order, each reading TIME: a caller that waited
	// for the lock while another decided decides at that one's moment (it
	// would otherwise set an expiry before the key's true one, a window or
	// bucket replenished early).
	now := c.now()
	e := k.shards[i].lockOrInsert(h, key, c, grace)
	// decide, written out: the compiler does not inline it.
	now = max(now, e.at)
	e.at = now
	st := P(&e.state)
	if e.expires <= now {
		st.Replenish(l, now)
	}
	d := st.Allow(l, now, n)
	if d.Allowed {
		e.expires = now + d.ResetAfter.Microseconds()
	}
	e.mu.Unlock()
	return outcome{d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter}
}

func (k *tables[S, P]) peek(h uint64, i int, key string, l floodgate.Limit, now int64) outcome {
	if e := k.shards[i].lock(h, key); e != nil {
		now = max(now, e.at) // as a decision, changing nothing
		if e.expires > now {
			d := P(&e.state).Peek(l, now)
			e.mu.Unlock()
			return outcome{d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter}
		}
		e.mu.Unlock()
	}
	var fresh S // a key never seen, or whose state has expired
	P(&fresh).Replenish(l, now)
	d := P(&fresh).Peek(l, now)
	return outcome{d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter}
}

// refund gives n back to key's state if it has one that has not expired: a
// missing or expired key is fully replenished, with nothing to give back.
// As the Redis scripts do, a refund that leaves the key fully replenished
// clears it (the scripts delete the key), and any other sets its expiry to
// the moment it will be (the scripts set the key's expiry).
func (k *tables[S, P]) refund(h uint64, i int, key string, l floodgate.Limit, now, n int64) {
	if e := k.shards[i].lock(h, key); e != nil {
		now = max(now, e.at) // as a decision: never before the key's last one,
		e.at = now           // and a refund is a use of the key for eviction
		if e.expires > now {
			if reset := P(&e.state).Refund(l, now, n); reset > 0 {
				e.expires = now + reset.Microseconds()
			} else {
				e.clear()
			}
		}
		e.mu.Unlock()
	}
}

// reset clears key's entry, if there is one; a sweep drops it later.
func (k *tables[S, P]) reset(h uint64, i int, key string) {
	if e := k.shards[i].lock(h, key); e != nil {
		e.clear()
		e.mu.Unlock()
	}
}

func (k *tables[S, P]) len() int {
	n := 0
	for i := range k.shards {
		n += k.shards[i].len()
	}
	return n
}

func (k *tables[S, P]) usage(h uint64, i int, key string) int {
	return k.shards[i].usage(h, key, func(s *S) int { return P(s).Usage() })
}

func (k *tables[S, P]) entry(h uint64, i int, key string, c clock, grace int64, slow bool) held {
	return (*batchEntry[S, P])(k.shards[i].entry(h, key, c, grace, slow))
}

func (k *tables[S, P]) shard(i int) shardTable { return &k.shards[i] }

func (k *tables[S, P]) setCounters(keys []shardKeys) {
	for i := range k.shards {
		k.shards[i].keys = &keys[i].n
	}
}

func (t *table[S]) lockTable()   { t.mu.Lock() }
func (t *table[S]) unlockTable() { t.mu.Unlock() }

func (t *table[S]) stats() (keys, keyBytes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live, t.keyBytes
}

// batchEntry is an entry as a batch holds it (see held).
type batchEntry[S any, P state[S]] entry[S]

func (e *batchEntry[S, P]) addr() uintptr { return uintptr(unsafe.Pointer(e)) }

func (e *batchEntry[S, P]) lockLive() bool {
	e.mu.Lock()
	if e.at == droppedAt {
		e.mu.Unlock()
		return false
	}
	return true
}

func (e *batchEntry[S, P]) unlock() { e.mu.Unlock() }

func (e *batchEntry[S, P]) save() (algorithm.Snapshot, int64) {
	return P(&e.state).Save(), e.expires
}

func (e *batchEntry[S, P]) restore(snap algorithm.Snapshot, expires int64) {
	P(&e.state).Restore(snap)
	e.expires = expires
}

func (e *batchEntry[S, P]) decide(l floodgate.Limit, now, n int64) floodgate.Decision {
	return decide[S, P]((*entry[S])(e), l, now, n)
}

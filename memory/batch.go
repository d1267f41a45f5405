package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithm"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

var _ floodgate.BatchStore = (*Store)(nil)

// batchInline is the number of items up to which AllowBatch keeps its
// bookkeeping on the stack.
const batchInline = 8

// held is a key's entry, of any algorithm's table, that a batch locks.
type held interface {
	// addr is the entry's address: batches lock entries in its order.
	addr() uintptr
	// lockLive locks the entry, or reports false (and leaves it unlocked)
	// if a sweep has dropped it.
	lockLive() bool
	unlock()
	// save returns the state and expiry for restore.
	save() (algorithm.Snapshot, int64)
	restore(algorithm.Snapshot, int64)
	// decide makes the decision of cost n under l at now, as AllowN does.
	decide(l floodgate.Limit, now, n int64) floodgate.Decision
}

// batchItem is one valid item of a batch: its key's hash and entry.
type batchItem struct {
	hash  uint64
	shard int
	e     held
}

// lockedEntry is one distinct entry of a batch, with its state and expiry
// from before the batch.
type lockedEntry struct {
	e       held
	at      uintptr
	snap    algorithm.Snapshot
	expires int64
}

// AllowBatch decides items as one request at the store's current time: all
// of them are recorded if all are admitted, none if one is denied. Items
// with an invalid limit or cost get their error and are otherwise skipped.
// See floodgate.BatchStore. It panics if results is shorter than items.
//
// It is atomic: the items' entries are locked together, each once, in
// address order, decided in order at one now, and restored to their state
// before the batch if one is denied, before any is unlocked. It cannot
// deadlock: batches lock in that one order and wait for no table's lock
// while holding an entry, and every other caller holds at most one entry.
func (s *Store) AllowBatch(_ context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	if len(results) < len(items) {
		panic("memory: AllowBatch with fewer results than items")
	}
	var itemBuf [batchInline]batchItem
	var lockBuf [batchInline]lockedEntry
	batch, locks := itemBuf[:0], lockBuf[:0]
	if len(items) > batchInline {
		batch, locks = make([]batchItem, 0, len(items)), make([]lockedEntry, 0, len(items))
	}
	for i, it := range items {
		d, err := limitcheck.Item(it.Limit, it.Cost)
		results[i] = floodgate.BatchResult{Decision: d, Err: err}
		var b batchItem
		if err == nil {
			b.hash, b.shard = s.hash(it.Key)
		}
		batch = append(batch, b)
	}
	// Find every entry, inserting the missing ones, then lock them all. A
	// sweep may drop an entry between the two: then unlock and look again,
	// this time under the tables' locks, which wait for the sweep.
	for slow := false; ; slow = true {
		locks = locks[:0]
		for i, it := range items {
			if results[i].Err != nil {
				continue
			}
			b := &batch[i]
			b.e = s.keyspaces[it.Limit.Algorithm].entry(b.hash, b.shard, it.Key, s, s.grace, slow)
			locks = append(locks, lockedEntry{e: b.e, at: b.e.addr()})
		}
		locks = sortEntries(locks)
		if lockAll(locks) {
			break
		}
	}
	// The time is read holding every entry: never older than a state
	// another caller wrote (a single decision takes the later of its
	// clock read and its entry's last decision instead).
	now := s.now()
	for j := range locks {
		locks[j].snap, locks[j].expires = locks[j].e.save()
	}
	denied := false
	for i, it := range items {
		if results[i].Err == nil {
			d := batch[i].e.decide(it.Limit, now, it.Cost)
			results[i].Decision = d
			denied = denied || !d.Allowed
		}
	}
	for _, l := range locks {
		if denied {
			l.e.restore(l.snap, l.expires)
		}
		l.e.unlock()
	}
	if s.shardKeys != nil {
		for i := range batch {
			if results[i].Err == nil {
				s.capShard(batch[i].shard)
			}
		}
	}
}

// sortEntries sorts locks by address and drops the duplicates.
func sortEntries(locks []lockedEntry) []lockedEntry {
	if len(locks) > batchInline {
		slices.SortFunc(locks, func(a, b lockedEntry) int { return cmp.Compare(a.at, b.at) })
		return slices.CompactFunc(locks, func(a, b lockedEntry) bool { return a.at == b.at })
	}
	// Few entries: insertion sort, with no calls.
	n := 0
	for _, l := range locks {
		j := n
		for j > 0 && locks[j-1].at > l.at {
			j--
		}
		if j > 0 && locks[j-1].at == l.at {
			continue
		}
		copy(locks[j+1:n+1], locks[j:n])
		locks[j] = l
		n++
	}
	return locks[:n]
}

// lockAll locks every entry of locks in order and reports true, or, if one
// has been dropped, unlocks those it locked and reports false.
func lockAll(locks []lockedEntry) bool {
	for j, l := range locks {
		if !l.e.lockLive() {
			for _, u := range locks[:j] {
				u.e.unlock()
			}
			return false
		}
	}
	return true
}

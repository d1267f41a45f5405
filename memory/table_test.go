package memory

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithm"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestTableLayout: every table is one cache line, and every keyspace's
// tables start close enough to a line's start that each table's header
// (its fields before the padding) lies within one line, shared with no
// other table's.
func TestTableLayout(t *testing.T) {
	sizes := map[string]uintptr{
		"bucket":  unsafe.Sizeof(table[algorithm.Bucket]{}),
		"fixed":   unsafe.Sizeof(table[algorithm.Fixed]{}),
		"counter": unsafe.Sizeof(table[algorithm.Counter]{}),
		"log":     unsafe.Sizeof(table[algorithm.Log]{}),
	}
	for name, size := range sizes {
		if size != cacheLine {
			t.Errorf("table[%s] is %d bytes, want %d", name, size, cacheLine)
		}
	}
	s := New()
	for a, k := range s.keyspaces {
		if k == nil {
			continue
		}
		if p := k.(testKeyspace).first(); uintptr(p)%cacheLine+tableHeader > cacheLine {
			t.Errorf("the tables of %s start at %p: a table's %d-byte header crosses a cache line", floodgate.Algorithm(a), p, tableHeader)
		}
	}
	// The entries of the bucket and the windows, lock and state together,
	// fit one cache line.
	for name, size := range map[string]uintptr{
		"Bucket":  unsafe.Sizeof(entry[algorithm.Bucket]{}),
		"Fixed":   unsafe.Sizeof(entry[algorithm.Fixed]{}),
		"Counter": unsafe.Sizeof(entry[algorithm.Counter]{}),
	} {
		if size > cacheLine {
			t.Errorf("entry[%s] is %d bytes, more than a cache line", name, size)
		}
	}
}

// testKeyspace is what tests reach into a keyspace for.
type testKeyspace interface {
	first() unsafe.Pointer // the first table
	sweepAll(now int64)    // sweeps every table at now with no grace
}

func (k *tables[S, P]) first() unsafe.Pointer { return unsafe.Pointer(&k.shards[0]) }

func (k *tables[S, P]) sweepAll(now int64) {
	for i := range k.shards {
		t := &k.shards[i]
		t.mu.Lock()
		if t.index.Load() != nil {
			t.sweep(now, 0)
		}
		t.mu.Unlock()
	}
}

// collide returns a hash for key i that shares its low bits with many
// others, so that probe sequences are long, overlap and wrap around the end
// of the index.
func collide(i int) uint64 { return uint64(i%5)*0x9e3779b97f4a7c15 | 7 }

// TestTableModel drives a table with random inserts, updates, clears and
// sweeps over keys with colliding hashes, and checks it against a map after
// every step: each key has at most one entry, found with its own state.
func TestTableModel(t *testing.T) {
	keys := append(storetest.HostileKeys(), "")
	for i := range 300 {
		keys = append(keys, "k"+strconv.Itoa(i))
	}
	hash := func(i int) uint64 { return collide(i) }
	type want struct{ state, expires int64 }
	var tb table[int64]
	model := map[int]want{}
	rng := rand.New(rand.NewPCG(1, 2))
	now := int64(1000)
	check := func(step int) {
		t.Helper()
		if tb.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, tb.len(), len(model))
		}
		// The index holds the live entries and no more, and is never more
		// than seven eighths full: a probe always meets an empty slot.
		if ix := tb.index.Load(); ix != nil {
			filled := 0
			for i := range ix.slots {
				if ix.slots[i].entry.Load() != nil {
					filled++
				}
			}
			if filled != tb.live || 8*filled > 7*len(ix.slots) {
				t.Fatalf("step %d: %d of %d slots filled for %d live entries", step, filled, len(ix.slots), tb.live)
			}
		}
		for i, k := range keys {
			e := tb.lock(hash(i), k)
			w, ok := model[i]
			if (e != nil) != ok {
				t.Fatalf("step %d: key %d found=%v, want %v", step, i, e != nil, ok)
			}
			if e != nil {
				if e.state != w.state || e.expires != w.expires || e.key != k {
					t.Fatalf("step %d: key %d has %d (expires %d, key %.10q), want %d (expires %d)", step, i, e.state, e.expires, e.key, w.state, w.expires)
				}
				e.mu.Unlock()
			}
		}
	}
	sweepModel := func() {
		for j, w := range model {
			if w.expires+10 <= now {
				delete(model, j)
			}
		}
	}
	for step := range 4000 {
		i := rng.IntN(len(keys))
		switch op := rng.IntN(20); {
		case op < 14: // a decision: insert or update
			_, present := model[i]
			if !present && tb.live >= max(minSweep, tb.sweepAt) {
				sweepModel() // the insert sweeps first
			}
			e := tb.lockOrInsert(hash(i), keys[i], fixedClock(now), 10)
			w, ok := model[i]
			if !ok {
				w = want{0, math.MinInt64} // new: never seen
			}
			if e.state != w.state || e.expires != w.expires {
				t.Fatalf("step %d: key %d (present=%v) has %d (expires %d), want %d (expires %d)", step, i, ok, e.state, e.expires, w.state, w.expires)
			}
			e.state++
			e.expires = now + int64(rng.IntN(50))
			model[i] = want{e.state, e.expires}
			e.mu.Unlock()
		case op < 16: // Reset
			if e := tb.lock(hash(i), keys[i]); e != nil {
				e.clear()
				model[i] = want{e.state, e.expires}
				e.mu.Unlock()
			}
		case op < 18: // time passes
			now += int64(rng.IntN(30))
		default: // a sweep, as an insert would run it
			tb.mu.Lock()
			if tb.index.Load() != nil {
				tb.sweep(now, 10)
			}
			tb.mu.Unlock()
			sweepModel()
		}
		if step%50 == 0 {
			check(step)
		}
	}
	check(-1)
}

// TestTableShrinks: a sweep that drops most keys shrinks the index, and the
// keys left are still found.
func TestTableShrinks(t *testing.T) {
	var tb table[int64]
	for i := range 5000 {
		e := tb.lockOrInsert(uint64(i)*0x9e3779b97f4a7c15, strconv.Itoa(i), fixedClock(0), 0)
		e.expires = 1
		if i%100 == 0 {
			e.expires = 1 << 40 // these stay
		}
		e.mu.Unlock()
	}
	big := len(tb.index.Load().slots)
	tb.mu.Lock()
	tb.sweep(2, 0)
	tb.mu.Unlock()
	if n := len(tb.index.Load().slots); tb.len() != 50 || n > big/16 {
		t.Fatalf("after the sweep: %d keys in %d slots (from %d), want 50 in at most %d", tb.len(), n, big, big/16)
	}
	for i := 0; i < 5000; i += 100 {
		if e := tb.lock(uint64(i)*0x9e3779b97f4a7c15, strconv.Itoa(i)); e == nil {
			t.Fatalf("key %d lost in the sweep", i)
		} else {
			e.mu.Unlock()
		}
	}
}

// TestTableStaleIndex: a reader holding an index that a sweep has replaced
// does not decide on an entry the sweep dropped, and finds the key's new
// entry through the table.
func TestTableStaleIndex(t *testing.T) {
	var tb table[int64]
	e := tb.lockOrInsert(42, "k", fixedClock(0), 0)
	e.state, e.expires = 7, 1
	e.mu.Unlock()
	stale := tb.index.Load()
	tb.mu.Lock()
	tb.sweep(5, 0) // drops "k", replenished since 1
	tb.mu.Unlock()
	if got := stale.probe(42, "k"); got != nil {
		t.Fatalf("the stale index returned the dropped entry (state %d)", got.state)
	}
	e = tb.lockOrInsert(42, "k", fixedClock(5), 0)
	if e.state != 0 || e.expires != math.MinInt64 {
		t.Fatalf("re-adding the key: state %d, expires %d, want a new entry", e.state, e.expires)
	}
	e.state = 1
	e.mu.Unlock()
	if got := stale.probe(42, "k"); got != nil {
		t.Fatal("the stale index found the key's new entry, which it never held")
	}
	if got := tb.lock(42, "k"); got == nil || got.state != 1 {
		t.Fatalf("lock found %v, want the new entry", got)
	} else {
		got.mu.Unlock()
	}
}

// TestTableConcurrentExact: goroutines run decisions on shared keys with
// colliding hashes while the table grows and sweeps (both run by inserts,
// and by a sweeper of its own). A decision admits while the key's count in
// the current phase is below a quota; time is frozen within a phase and
// moves past every expiry between phases. Each key must admit exactly the
// quota per phase: more would mean two entries for one key, or a decision
// on a dropped entry.
func TestTableConcurrentExact(t *testing.T) {
	t.Parallel() // a table of its own
	const keys, quota, workers, phases = 700, 3, 4, 4
	var tb table[int64]
	hash := func(i int) uint64 { return collide(i) ^ uint64(i)<<40 }
	admitted := make([][phases]int, keys)
	var mu sync.Mutex // guards admitted
	for phase := range phases {
		now := int64(100 * (phase + 1))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var sweeper sync.WaitGroup
		sweeper.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tb.mu.Lock()
				if tb.index.Load() != nil {
					tb.sweep(now, 0)
				}
				tb.mu.Unlock()
			}
		})
		for w := range workers {
			wg.Go(func() {
				for round := range 2 * quota {
					for j := range keys {
						i := (j*7 + w*131 + round) % keys
						e := tb.lockOrInsert(hash(i), strconv.Itoa(i), fixedClock(now), 0)
						if e.expires <= now {
							e.state = 0 // a new phase: replenished
						}
						if e.state < quota {
							e.state++
							mu.Lock()
							admitted[i][phase]++
							mu.Unlock()
						}
						e.expires = now + 1
						e.mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		sweeper.Wait()
	}
	for i := range admitted {
		for phase, n := range admitted[i] {
			if n != quota {
				t.Fatalf("key %d admitted %d in phase %d, want exactly %d", i, n, phase, quota)
			}
		}
	}
	if tb.len() != keys {
		t.Errorf("len %d, want %d", tb.len(), keys)
	}
}

// TestEveryAlgorithmHasAKeyspace: the store decides every algorithm.
func TestEveryAlgorithmHasAKeyspace(t *testing.T) {
	s := New()
	for _, a := range algorithmlist.All() {
		if int(a) >= len(s.keyspaces) || s.keyspaces[a] == nil {
			t.Errorf("no keyspace for %s", a)
		}
	}
}

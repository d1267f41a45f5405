package redisstore

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestDifferential: the memory store and the Redis store reach the same
// decisions (every field) for the same random sequence of keys, costs,
// refunds, resets, batches and time steps, for every algorithm, with keys
// now and then used under another quota (which then applies to their
// history): another quota, and outside batches another window, also after a
// refund that filled a bucket (which Redis deletes) and once the key has
// expired (under a longer window, a log's old entries must stay gone). The
// seed is logged; set FLOODGATE_DIFF_SEED to replay one.
//
// Redis expires keys on its own clock while the test moves a manual clock,
// so after each call the test removes the key's expiry (PERSIST). A key that
// expired between the script and PERSIST had a TTL shorter than the real time
// that passed, and ResetAfter <= TTL, so the test then moves the manual clock
// on by that real time: the state is expired for both stores. The test then
// expires keys itself, on the manual clock, where the scripts' expiries
// would: a script that writes a key sets its expiry to the moment the key is
// fully replenished (an admitted request's ResetAfter; after a refund, as
// the state it leaves gives it), a denied request or a denied batch leaves
// it, and a refund that leaves nothing to remember deletes the key. The
// test deletes a Redis key once the manual clock reaches that moment (where
// Redis, expiring at ceil(ResetAfter / 1ms) on its own clock, would have
// deleted it too, give or take that rounding: see floodgate.Store).
func TestDifferential(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FLOODGATE_DIFF_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("FLOODGATE_DIFF_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay with FLOODGATE_DIFF_SEED=%d)", seed, seed)
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		runDifferential(t, client, rand.New(rand.NewPCG(seed, 0x5eed)), 1500)
	})
}

// randomLimits returns a few limits of every algorithm with parameters from
// the edges and the middle of their ranges.
func randomLimits(r *rand.Rand) []floodgate.Limit {
	windows := []time.Duration{time.Millisecond, 10 * time.Millisecond, 999 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour}
	quotas := []int64{1, 2, 3, 10, 100, 1000}
	var out []floodgate.Limit
	for _, a := range algorithmlist.All() {
		for range 3 {
			l := floodgate.NewLimit(a, quotas[r.IntN(len(quotas))], windows[r.IntN(len(windows))])
			if a == floodgate.TokenBucket {
				l.Refill = []int64{0, 1, 3, 7, 1 + r.Int64N(1000)}[r.IntN(5)]
			}
			out = append(out, l)
		}
	}
	// A log large enough that costs outrun the time steps: entries start
	// just after the newest one rather than at now.
	return append(out, floodgate.NewLimit(floodgate.SlidingWindowLog, 5000, time.Second))
}

type diffStep struct {
	at    time.Duration // from the start
	op    string
	limit floodgate.Limit
	key   string
	n     int64
	got   string
}

// otherLimit returns l with another quota, or with window set another
// window, or both: the same key's history under another limit of its
// algorithm.
func otherLimit(r *rand.Rand, l floodgate.Limit, window bool) floodgate.Limit {
	quotas := []int64{1, 2, 3, 10, 100, 1000, 5000}
	windows := []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour}
	was := l
	for l == was {
		if !window || r.IntN(2) == 0 {
			l.Quota = quotas[r.IntN(len(quotas))]
		}
		if window && r.IntN(2) == 0 {
			l.Window = windows[r.IntN(len(windows))]
		}
	}
	return l
}

// resetAfter returns the time from now until the state Redis holds for key
// under l (after a refund) is fully replenished, as the refund scripts
// compute it for the key's expiry, and false if Redis holds no state.
func resetAfter(t *testing.T, client rueidis.Client, key string, l floodgate.Limit, now int64) (time.Duration, bool) {
	t.Helper()
	w := l.Window.Microseconds()
	if l.Algorithm == floodgate.SlidingWindowLog {
		newest, err := doKey(t, client, "ZRANGE", key, "-1", "-1").AsStrSlice()
		if err != nil || len(newest) == 0 {
			return 0, false
		}
		at, err := strconv.ParseInt(newest[0], 10, 64)
		if err != nil {
			t.Fatalf("log %s: newest entry %q", key, newest[0])
		}
		return time.Duration(at+w-now) * time.Microsecond, true
	}
	raw, err := doKey(t, client, "GET", key).ToString()
	if rueidis.IsRedisNil(err) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	f := func(i int) int64 {
		return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[8*i:]))))
	}
	var us int64
	switch l.Algorithm {
	case floodgate.TokenBucket:
		unit, per := fixedpoint.Scale(w, fixedpoint.Refill(l.Quota, l.Refill))
		us = (l.Quota*unit - f(0) + per - 1) / per
	case floodgate.FixedWindow:
		us = f(0) + w - now
	case floodgate.SlidingWindowCounter:
		if f(1) > 0 {
			us = f(0) + 2*w - now
		} else {
			us = f(0) + w - now
		}
	}
	return time.Duration(us) * time.Microsecond, true
}

func runDifferential(t *testing.T, client rueidis.Client, r *rand.Rand, steps int) {
	start := storetest.Epoch.Add(time.Duration(r.Int64N(int64(time.Hour))))
	clock := clocktest.NewManual(start)
	mem := memory.New(memory.WithClock(clock))
	red := testStore(t, client, clock)
	ls := randomLimits(r)
	ctx := t.Context()
	var history []diffStep
	allowed, denied := map[floodgate.Algorithm]int{}, map[floodgate.Algorithm]int{}
	fail := func(format string, args ...any) {
		t.Helper()
		var b strings.Builder
		for _, h := range history[max(0, len(history)-12):] {
			fmt.Fprintf(&b, "\n  %12s %-6s %-40s key %s cost %d: %s", h.at, h.op, h.limit, h.key, h.n, h.got)
		}
		t.Fatalf(format+"\nlast steps:%s", append(args, b.String())...)
	}
	var changed, resets, batches, batchDenials int
	// expires is when Redis would expire each key (see above): the moment
	// its last write leaves it fully replenished.
	expires := map[string]time.Time{}
	// last is the last operation on each key, for the counts below.
	last := map[string]string{}
	// written is the limit of the last write of each key Redis holds, and
	// of each key earlier in the batch being built.
	written := map[string]floodgate.Limit{}
	expire := func(key string, alg floodgate.Algorithm) {
		k := red.Key(key, alg)
		if at, ok := expires[k]; ok && !at.After(clock.Now()) {
			doKey(t, client, "DEL", k)
			delete(expires, k)
			delete(written, k)
			last[k] = "expired"
		}
	}
	admitted := func(key string, l floodgate.Limit, d floodgate.Decision) {
		expires[red.Key(key, l.Algorithm)] = clock.Now().Add(d.ResetAfter)
	}
	// afterRefund and afterExpiry count the steps under another limit than
	// the last one on their key just after a refund, and just after the key
	// expired.
	var afterRefund, afterExpiry int
	// limitFor returns the limit a step on key uses: l, or l under another
	// limit when change is set.
	limitFor := func(key string, l floodgate.Limit, change bool) floodgate.Limit {
		if !change {
			return l
		}
		changed++
		switch last[red.Key(key, l.Algorithm)] {
		case "refund":
			afterRefund++
		case "expired":
			afterExpiry++
		}
		return otherLimit(r, l, true)
	}
	cluster := client.Mode() == rueidis.ClientModeCluster
	// batchLimit returns the limit an item of a batch on key uses, l or
	// the one the key was last written under. On a cluster a denied batch
	// gives back what it took in other slots with refunds, which restore
	// neither a bucket's level cut by a lower capacity nor a window's count
	// or a log's expiry from under another window, where the memory store
	// restores the state: so there a batch keeps the window of the key's
	// state, and a bucket's capacity.
	batchLimit := func(key string, l floodgate.Limit) floodgate.Limit {
		k := red.Key(key, l.Algorithm)
		if w, ok := written[k]; ok && cluster {
			if l.Algorithm == floodgate.TokenBucket {
				return w
			}
			l.Window = w.Window
		}
		written[k] = l
		return l
	}
	// persist removes the expiry of keys, and reports whether one of them is
	// gone.
	persist := func(keys ...string) bool {
		gone := false
		for _, k := range keys {
			if n, _ := doKey(t, client, "PERSIST", k).AsInt64(); n == 0 {
				if n, _ := doKey(t, client, "EXISTS", k).AsInt64(); n == 0 {
					gone = true
				}
			}
		}
		return gone
	}
	// catchUp moves the manual clock on after a key was found gone: by the
	// real time since began, and at least to until, the expiry the key had
	// (Redis may expire a key a little before its TTL has passed by the
	// test's clock: it reads time once per command, or per event loop).
	catchUp := func(began, until time.Time) {
		clock.Advance(time.Since(began).Truncate(time.Microsecond) + time.Microsecond)
		if d := until.Sub(clock.Now()); d > 0 {
			clock.Advance(d)
		}
	}
	li, key := 0, ""
	for i := range steps {
		// Mostly keep hammering the same key, so limits are reached.
		if i == 0 || r.IntN(10) < 3 {
			li = r.IntN(len(ls))
			key = "k" + strconv.Itoa(li) + "-" + strconv.Itoa(r.IntN(3))
		}
		// Now and then the key's history under another quota.
		expire(key, ls[li].Algorithm)
		l := limitFor(key, ls[li], r.IntN(100) < 8)
		w := l.Window
		perRequest := w / time.Duration(l.Quota) // the pace the limit allows
		switch p := r.IntN(100); {
		case p < 25: // same microsecond
		case p < 35:
			clock.Advance(time.Microsecond)
		case p < 70:
			clock.Advance(time.Duration(r.Int64N(int64(2*perRequest) + 1)).Truncate(time.Microsecond))
		case p < 90:
			clock.Advance(time.Duration(r.Int64N(int64(w))).Truncate(time.Microsecond))
		default:
			clock.Advance(time.Duration(r.Int64N(int64(3 * w))).Truncate(time.Microsecond))
		}
		n := int64(1)
		if r.IntN(2) == 0 {
			n = 1 + r.Int64N(l.Quota)
		}
		step := diffStep{at: clock.Now().Sub(start), limit: l, key: key, n: n}
		began := time.Now()
		expire(key, l.Algorithm)
		k := red.Key(key, l.Algorithm)
		switch p := r.IntN(100); {
		case p < 10:
			step.op = "refund"
			errM := mem.RefundN(ctx, key, l, n)
			errR := red.RefundN(ctx, key, l, n)
			if errM != nil || errR != nil {
				fail("step %d: RefundN(%s, %v, %d): memory %v, redis %v", i, key, l, n, errM, errR)
			}
			// The refund wrote the key's expiry, or deleted it.
			if persist(k) {
				// Deleted, or expired since: then at most by its expiry
				// before the refund, or by a longer one the refund set
				// under another limit, which real time has passed.
				catchUp(began, expires[k])
				delete(expires, k)
				delete(written, k)
				step.got = "ok, no state"
			} else if reset, ok := resetAfter(t, client, k, l, clock.Now().UnixMicro()); ok {
				expires[k] = clock.Now().Add(reset)
				written[k] = l
				step.got = "ok, replenished in " + reset.String()
			} else {
				fail("step %d: RefundN(%s, %v, %d): Redis holds %s but no state", i, key, l, n, k)
			}
			last[k] = step.op
			history = append(history, step)
			continue
		case p < 13:
			step.op = "reset"
			errM := mem.Reset(ctx, key, l)
			errR := red.Reset(ctx, key, l)
			if errM != nil || errR != nil {
				fail("step %d: Reset(%s, %v): memory %v, redis %v", i, key, l, errM, errR)
			}
			delete(expires, k)
			delete(written, k)
			last[k] = "reset"
			resets++
			history = append(history, step)
			continue
		case p < 25:
			// A batch: this key and up to three others, some under
			// another limit, some the same key again (see batchLimit).
			step.op = "batch"
			before := maps.Clone(written)
			first := batchLimit(key, l)
			items := []floodgate.BatchItem{{Key: key, Limit: first, Cost: min(n, first.Quota)}}
			for range r.IntN(4) {
				lj := r.IntN(len(ls))
				it := floodgate.BatchItem{Key: "k" + strconv.Itoa(lj) + "-" + strconv.Itoa(r.IntN(3)), Limit: ls[lj], Cost: 1}
				if r.IntN(4) == 0 {
					it = items[r.IntN(len(items))]
				} else {
					expire(it.Key, it.Limit.Algorithm)
					it.Limit = batchLimit(it.Key, limitFor(it.Key, it.Limit, r.IntN(8) == 0))
				}
				if r.IntN(3) == 0 {
					it.Cost = 1 + r.Int64N(it.Limit.Quota)
				}
				items = append(items, it)
			}
			for _, it := range items {
				expire(it.Key, it.Limit.Algorithm)
			}
			rm := make([]floodgate.BatchResult, len(items))
			rr := make([]floodgate.BatchResult, len(items))
			mem.AllowBatch(ctx, items, rm)
			red.AllowBatch(ctx, items, rr)
			step.got = fmt.Sprintf("%+v", rr)
			history = append(history, step)
			denied := false
			for j := range items {
				if rm[j].Err != nil || rr[j].Err != nil {
					fail("step %d: AllowBatch(%v) item %d: memory %v, redis %v", i, items, j, rm[j].Err, rr[j].Err)
				}
				if rm[j].Decision != rr[j].Decision {
					fail("step %d at %s: AllowBatch(%v) item %d:\n  memory %+v\n  redis  %+v", i, step.at, items, j, rm[j].Decision, rr[j].Decision)
				}
				denied = denied || !rr[j].Decision.Allowed
			}
			batches++
			keys := make([]string, len(items))
			for j, it := range items {
				keys[j] = red.Key(it.Key, it.Limit.Algorithm)
				last[keys[j]] = "batch"
				if !denied {
					admitted(it.Key, it.Limit, rr[j].Decision)
				}
			}
			if denied {
				written = before
			}
			if denied {
				batchDenials++
			}
			// Refunds across a cluster's slots write expiries too, none
			// later than the ones the keys had.
			if persist(keys...) {
				var until time.Time
				for _, k := range keys {
					if at := expires[k]; at.After(until) {
						until = at
					}
				}
				catchUp(began, until)
			}
			continue
		default:
			step.op = "allow"
			dm, errM := mem.AllowN(ctx, key, l, n)
			dr, errR := red.AllowN(ctx, key, l, n)
			step.got = fmt.Sprintf("%+v", dr)
			if errM != nil || errR != nil {
				fail("step %d: AllowN(%s, %v, %d): memory %v, redis %v", i, key, l, n, errM, errR)
			}
			if dm != dr {
				history = append(history, step)
				fail("step %d at %s: AllowN(%s, %v, %d):\n  memory %+v\n  redis  %+v", i, step.at, key, l, n, dm, dr)
			}
			if dr.Allowed {
				admitted(key, l, dr)
				written[k] = l
			}
			if !dr.Allowed {
				denied[l.Algorithm]++
				history = append(history, step)
				continue // nothing was written
			}
			allowed[l.Algorithm]++
		}
		last[k] = step.op
		if persist(k) {
			// Gone: expired in Redis since the write. Let the manual
			// clock catch up with real time and the key's expiry.
			catchUp(began, expires[k])
		}
		history = append(history, step)
	}
	// The sequence must have explored both outcomes of every algorithm.
	for _, a := range algorithmlist.All() {
		if allowed[a] == 0 || denied[a] == 0 {
			t.Errorf("%s: %d allowed, %d denied; the random sequence explored too little", a, allowed[a], denied[a])
		}
	}
	t.Logf("allowed %v, denied %v; %d steps under another limit (%d just after a refund, %d just after expiring), %d resets, %d batches (%d denied)", allowed, denied, changed, afterRefund, afterExpiry, resets, batches, batchDenials)
	if afterRefund == 0 || afterExpiry == 0 {
		t.Errorf("%d steps under another limit just after a refund, %d just after expiring; the random sequence explored too little", afterRefund, afterExpiry)
	}
	for li, l := range ls {
		for k := range 3 {
			_ = red.Reset(ctx, "k"+strconv.Itoa(li)+"-"+strconv.Itoa(k), l)
		}
	}
}

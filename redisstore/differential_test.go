package redisstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/storetest"
)

// TestDifferential: the memory store and the Redis store reach the same
// decisions (every field) for the same random sequence of keys, costs,
// refunds, resets, batches and time steps, for every algorithm, with keys
// now and then used under another quota (which then applies to their
// history). The seed is logged; set FLOODGATE_DIFF_SEED to
// replay one.
//
// Redis expires keys on its own clock while the test moves a manual clock,
// so after each call the test removes the key's expiry (PERSIST). A key that
// expired between the script and PERSIST had a TTL shorter than the real time
// that passed, and ResetAfter <= TTL, so the test then moves the manual clock
// on by that real time: the state is expired for both stores. A state that
// is expired but still present in Redis gives the same decisions as a
// missing one under the limit that wrote it, but not always under another:
// so the test expires keys itself, as the memory store does, deleting a
// Redis key once the manual clock reaches the ResetAfter of the key's last
// decision (where Redis, expiring at ceil(ResetAfter / 1ms), would have
// deleted it too, give or take that rounding).
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
	for _, a := range floodgate.Algorithms() {
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

// otherQuota returns l with another quota: the same key's history under
// another limit of its algorithm and window. (Under a longer window a log's
// entries that have left the old one count again, and the stores forget
// such state at different times: the memory store when it evicts the key,
// Redis when the key expires.)
func otherQuota(r *rand.Rand, l floodgate.Limit) floodgate.Limit {
	quotas := []int64{1, 2, 3, 10, 100, 1000, 5000}
	for {
		if q := quotas[r.IntN(len(quotas))]; q != l.Quota {
			l.Quota = q
			return l
		}
	}
}

func runDifferential(t *testing.T, client rueidis.Client, r *rand.Rand, steps int) {
	start := storetest.Epoch.Add(time.Duration(r.Int64N(int64(time.Hour))))
	clock := floodgate.NewManualClock(start)
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
	// expires is when the memory store treats each key as new: the time of
	// its last decision plus that decision's ResetAfter.
	expires := map[string]time.Time{}
	expire := func(key string, alg floodgate.Algorithm) {
		k := red.Key(key, alg)
		if at, ok := expires[k]; ok && !at.After(clock.Now()) {
			doKey(t, client, "DEL", k)
			delete(expires, k)
		}
	}
	// refunded holds the limit of the buckets refunded since their last
	// decision. A refund that fills a bucket deletes it in Redis (a missing
	// bucket is full), while the memory store keeps it full until its
	// expiry: the same under that limit, not under another capacity. So
	// such a bucket is used under the refund's limit only.
	refunded := map[string]floodgate.Limit{}
	decided := func(key string, alg floodgate.Algorithm, d floodgate.Decision) {
		expires[red.Key(key, alg)] = clock.Now().Add(d.ResetAfter)
		delete(refunded, red.Key(key, alg))
	}
	// limitFor returns the limit a step on key uses: l, or l under another
	// quota when change is set and that is safe for key (tokenBuckets
	// false: not for a bucket).
	limitFor := func(key string, l floodgate.Limit, change, tokenBuckets bool) floodgate.Limit {
		if rl, ok := refunded[red.Key(key, l.Algorithm)]; ok {
			return rl
		}
		if !change || !tokenBuckets && l.Algorithm == floodgate.TokenBucket {
			return l
		}
		changed++
		return otherQuota(r, l)
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
	li, key := 0, ""
	for i := range steps {
		// Mostly keep hammering the same key, so limits are reached.
		if i == 0 || r.IntN(10) < 3 {
			li = r.IntN(len(ls))
			key = "k" + strconv.Itoa(li) + "-" + strconv.Itoa(r.IntN(3))
		}
		// Now and then the key's history under another quota.
		l := limitFor(key, ls[li], r.IntN(100) < 8, true)
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
		switch p := r.IntN(100); {
		case p < 10:
			step.op = "refund"
			errM := mem.RefundN(ctx, key, l, n)
			errR := red.RefundN(ctx, key, l, n)
			if errM != nil || errR != nil {
				fail("step %d: RefundN(%s, %v, %d): memory %v, redis %v", i, key, l, n, errM, errR)
			}
			if l.Algorithm == floodgate.TokenBucket {
				refunded[red.Key(key, l.Algorithm)] = l
			}
			step.got = "ok"
		case p < 13:
			step.op = "reset"
			errM := mem.Reset(ctx, key, l)
			errR := red.Reset(ctx, key, l)
			if errM != nil || errR != nil {
				fail("step %d: Reset(%s, %v): memory %v, redis %v", i, key, l, errM, errR)
			}
			delete(expires, red.Key(key, l.Algorithm))
			resets++
			history = append(history, step)
			continue
		case p < 25:
			// A batch: this key and up to three others, some under
			// another quota, some the same key again. Not a bucket under
			// another capacity: taking from it under a lower one cuts its
			// level, which a refund across a cluster's slots cannot give
			// back, while the memory store restores the state it had.
			step.op = "batch"
			first := l
			if _, ok := refunded[red.Key(key, l.Algorithm)]; !ok && l.Algorithm == floodgate.TokenBucket {
				first = ls[li]
			}
			items := []floodgate.BatchItem{{Key: key, Limit: first, Cost: min(n, first.Quota)}}
			for range r.IntN(4) {
				lj := r.IntN(len(ls))
				it := floodgate.BatchItem{Key: "k" + strconv.Itoa(lj) + "-" + strconv.Itoa(r.IntN(3)), Limit: ls[lj], Cost: 1}
				if r.IntN(4) == 0 {
					it = items[r.IntN(len(items))]
				} else {
					it.Limit = limitFor(it.Key, it.Limit, r.IntN(8) == 0, false)
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
				if !denied {
					decided(it.Key, it.Limit.Algorithm, rr[j].Decision)
				}
			}
			if denied {
				batchDenials++
			}
			// Refunds across a cluster's slots write expiries too.
			if persist(keys...) {
				clock.Advance(time.Since(began).Truncate(time.Microsecond) + time.Microsecond)
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
			decided(key, l.Algorithm, dr)
			if !dr.Allowed {
				denied[l.Algorithm]++
				history = append(history, step)
				continue // nothing was written
			}
			allowed[l.Algorithm]++
		}
		if persist(red.Key(key, l.Algorithm)) {
			// Gone: expired in Redis since the write (or deleted by a
			// refund). Let the manual clock catch up with real time.
			clock.Advance(time.Since(began).Truncate(time.Microsecond) + time.Microsecond)
		}
		history = append(history, step)
	}
	// The sequence must have explored both outcomes of every algorithm.
	for _, a := range floodgate.Algorithms() {
		if allowed[a] == 0 || denied[a] == 0 {
			t.Errorf("%s: %d allowed, %d denied; the random sequence explored too little", a, allowed[a], denied[a])
		}
	}
	t.Logf("allowed %v, denied %v; %d steps under another limit, %d resets, %d batches (%d denied)", allowed, denied, changed, resets, batches, batchDenials)
	for li, l := range ls {
		for k := range 3 {
			_ = red.Reset(ctx, "k"+strconv.Itoa(li)+"-"+strconv.Itoa(k), l)
		}
	}
}

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
// refunds and time steps, for every algorithm. The seed is logged; set
// FLOODGATE_DIFF_SEED to replay one.
//
// Redis expires keys on its own clock while the test moves a manual clock,
// so after each call the test removes the key's expiry (PERSIST). A key that
// expired between the script and PERSIST had a TTL shorter than the real time
// that passed, and ResetAfter <= TTL, so the test then moves the manual clock
// on by that real time: the state is expired for both stores. A state that
// is expired but still present in Redis gives the same decisions as a
// missing one, which is what the memory store sees.
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
	li, key := 0, ""
	for i := range steps {
		// Mostly keep hammering the same key, so limits are reached.
		if i == 0 || r.IntN(10) < 3 {
			li = r.IntN(len(ls))
			key = "k" + strconv.Itoa(li) + "-" + strconv.Itoa(r.IntN(3))
		}
		l := ls[li]
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
		if r.IntN(10) == 0 {
			step.op = "refund"
			errM := mem.RefundN(ctx, key, l, n)
			errR := red.RefundN(ctx, key, l, n)
			if errM != nil || errR != nil {
				fail("step %d: RefundN(%s, %v, %d): memory %v, redis %v", i, key, l, n, errM, errR)
			}
			step.got = "ok"
		} else {
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
			if !dr.Allowed {
				denied[l.Algorithm]++
				history = append(history, step)
				continue // nothing was written
			}
			allowed[l.Algorithm]++
		}
		persisted, _ := doKey(t, client, "PERSIST", red.Key(key, l.Algorithm)).AsInt64()
		if persisted == 0 {
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
	t.Logf("allowed %v, denied %v", allowed, denied)
	for li, l := range ls {
		for k := range 3 {
			_ = red.Reset(ctx, "k"+strconv.Itoa(li)+"-"+strconv.Itoa(k), l)
		}
	}
}

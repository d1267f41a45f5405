package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel() // keys of its own on the harness
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		storetest.Run(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
			return testStore(t, client, clock)
		})
	})
}

// TestSentinel runs a few decisions through the harness's sentinel, which
// monitors the primary "floodgate".
func TestSentinel(t *testing.T) {
	addrs, master := redistest.SentinelAddrs(t)
	s, err := New(Config{Addrs: addrs, SentinelMaster: master, KeyPrefix: uniquePrefix(t), Timeout: testTimeout})
	if err != nil {
		t.Fatalf("New through sentinels %v: %v", addrs, err)
	}
	defer s.Close()
	if got := s.client.Mode(); got != rueidis.ClientModeSentinel {
		t.Fatalf("client mode %s, want sentinel", got)
	}
	ctx := t.Context()
	for _, l := range limits(3, time.Minute) {
		for i := range 4 {
			d, err := s.Allow(ctx, "user", l)
			if err != nil {
				t.Fatalf("%s: Allow: %v", l.Algorithm, err)
			}
			if want := i < 3; d.Allowed != want {
				t.Fatalf("%s: request %d allowed=%v, want %v", l.Algorithm, i+1, d.Allowed, want)
			}
		}
		if err := s.RefundN(ctx, "user", l, 1); err != nil {
			t.Fatalf("%s: RefundN: %v", l.Algorithm, err)
		}
		if d, err := s.Allow(ctx, "user", l); err != nil || !d.Allowed {
			t.Fatalf("%s: Allow after a refund = %+v, %v", l.Algorithm, d, err)
		}
		if err := s.Reset(ctx, "user", l); err != nil {
			t.Fatalf("%s: Reset: %v", l.Algorithm, err)
		}
	}
	// A batch is one script call: the second denies on the log and takes
	// nothing, so the third fits as the first did.
	var items []floodgate.BatchItem
	for _, l := range limits(2, time.Minute) {
		items = append(items, floodgate.BatchItem{Key: "batch", Limit: l, Cost: 1})
	}
	items[0].Cost = 2
	got := make([]floodgate.BatchResult, len(items))
	for i, want := range []bool{true, false, false} {
		s.AllowBatch(ctx, items, got)
		for j, r := range got {
			if r.Err != nil || r.Decision.Allowed != (want || j > 0) {
				t.Fatalf("batch %d, item %d: %+v", i+1, j+1, r)
			}
		}
		if i == 0 {
			items[0].Cost = 1
		}
	}
}

// TestSentinelBatchContract runs the batch contract (all or nothing, exact
// counts under 64 callers with three rules each) through the harness's
// sentinel, as the standalone server and the cluster run it in
// TestConformance.
func TestSentinelBatchContract(t *testing.T) {
	t.Parallel() // keys of its own on the harness
	addrs, master := redistest.SentinelAddrs(t)
	storetest.RunBatch(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
		s, err := New(Config{Addrs: addrs, SentinelMaster: master, KeyPrefix: uniquePrefix(t), Timeout: testTimeout, Clock: clock})
		if err != nil {
			t.Fatalf("New through sentinels %v: %v", addrs, err)
		}
		t.Cleanup(s.Close)
		return s
	})
}

// limits returns one limit of quota per window for every algorithm.
func limits(quota int64, window time.Duration) []floodgate.Limit {
	var out []floodgate.Limit
	for _, a := range algorithmlist.All() {
		out = append(out, floodgate.NewLimit(a, quota, window))
	}
	return out
}

// TestServerTime: without a Clock the scripts read Redis's TIME, which is
// this machine's clock.
func TestServerTime(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		s := testStore(t, client, nil)
		l := floodgate.NewLimit(floodgate.SlidingWindowLog, 5, time.Hour)
		before := time.Now().UnixMicro()
		if d, err := s.AllowN(t.Context(), "k", l, 2); err != nil || !d.Allowed || d.ResetAfter != time.Hour+time.Microsecond {
			t.Fatalf("AllowN = %+v, %v; want allowed, ResetAfter 1h1µs", d, err)
		}
		after := time.Now().UnixMicro()
		entries, err := doKey(t, client, "ZRANGE", s.Key("k", l.Algorithm), "0", "-1").AsStrSlice()
		if err != nil || len(entries) != 2 {
			t.Fatalf("ZRANGE = %q, %v; want 2 entries", entries, err)
		}
		first, _ := strconv.ParseInt(entries[0], 10, 64)
		// Redis and the test share a clock; allow for a little skew.
		if first < before-time.Second.Microseconds() || first > after+time.Second.Microseconds() {
			t.Errorf("entry time %d not within [%d, %d]", first, before, after)
		}
		if entries[1] != strconv.FormatInt(first+1, 10) {
			t.Errorf("entries %q: a cost of 2 must occupy two consecutive microseconds", entries)
		}
		// Many clients in the same millisecond: every admission is its own
		// entry (no member collisions), so none is lost.
		many := floodgate.NewLimit(floodgate.SlidingWindowLog, 10000, time.Hour)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for range 25 {
					if d, err := s.AllowN(t.Context(), "many", many, 3); err != nil || !d.Allowed {
						t.Errorf("AllowN = %+v, %v", d, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n, _ := doKey(t, client, "ZCARD", s.Key("many", many.Algorithm)).AsInt64(); n != 20*25*3 {
			t.Errorf("ZCARD = %d after %d admitted requests of cost 3, want %d", n, 20*25, 20*25*3)
		}
		if d, err := s.Allow(t.Context(), "many", many); err != nil || d.Remaining != 10000-20*25*3-1 {
			t.Errorf("Allow after the burst = %+v, %v; want Remaining %d", d, err, 10000-20*25*3-1)
		}
	})
}

// TestExpiry: every write sets PEXPIRE to ceil(reset_after / 1ms), and a
// denied request neither changes the state nor refreshes the expiry.
func TestExpiry(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		clock := clocktest.NewManual(storetest.Epoch.Add(20*time.Second + 300*time.Microsecond))
		s := testStore(t, client, clock)
		ctx := t.Context()
		cases := []struct {
			limit floodgate.Limit
			// refundTTL is the expiry after refunding 1 of the 3 requests
			// 1µs later: the reset time of the state the refund leaves.
			refundTTL time.Duration
		}{
			// The newest entry goes; the one before is 1µs older.
			{floodgate.NewLimit(floodgate.SlidingWindowLog, 3, time.Minute), time.Minute},
			// 1 token back plus 1µs of refill: 2 tokens short, less 1µs.
			{floodgate.NewTokenBucket(3, 1, 7*time.Second), 14*time.Second - time.Microsecond},
			// 2 left in the current window, 20.000301s into it.
			{floodgate.NewLimit(floodgate.SlidingWindowCounter, 3, time.Minute), 2*time.Minute - 20000301*time.Microsecond},
			{floodgate.NewLimit(floodgate.FixedWindow, 3, time.Minute), time.Minute - 20000301*time.Microsecond},
		}
		for _, c := range cases {
			l := c.limit
			key := s.Key("k", l.Algorithm)
			var last floodgate.Decision
			for range 3 {
				d, err := s.Allow(ctx, "k", l)
				if err != nil || !d.Allowed {
					t.Fatalf("%s: Allow = %+v, %v", l.Algorithm, d, err)
				}
				last = d
			}
			want := (last.ResetAfter + time.Millisecond - 1).Milliseconds()
			pttl, err := doKey(t, client, "PTTL", key).AsInt64()
			// Real time passes between the write and PTTL; a second is plenty.
			if err != nil || pttl > want || pttl < want-1000 {
				t.Errorf("%s: PTTL %d ms after ResetAfter %s, want about %d ms", l.Algorithm, pttl, last.ResetAfter, want)
			}
			dump, _ := doKey(t, client, "DUMP", key).ToString()
			time.Sleep(5 * time.Millisecond)
			clock.Advance(time.Microsecond)
			if d, err := s.Allow(ctx, "k", l); err != nil || d.Allowed {
				t.Fatalf("%s: 4th Allow = %+v, %v; want denied", l.Algorithm, d, err)
			}
			if after, _ := doKey(t, client, "DUMP", key).ToString(); after != dump {
				t.Errorf("%s: a denied request changed the state", l.Algorithm)
			}
			if after, _ := doKey(t, client, "PTTL", key).AsInt64(); after >= pttl {
				t.Errorf("%s: a denied request refreshed the expiry (PTTL %d -> %d)", l.Algorithm, pttl, after)
			}
			if err := s.RefundN(ctx, "k", l, 1); err != nil {
				t.Fatalf("%s: RefundN: %v", l.Algorithm, err)
			}
			want = (c.refundTTL + time.Millisecond - 1).Milliseconds()
			if pttl, _ := doKey(t, client, "PTTL", key).AsInt64(); pttl > want || pttl < want-1000 {
				t.Errorf("%s: PTTL %d ms after a refund, want about %d ms", l.Algorithm, pttl, want)
			}
		}
	})
}

// TestLargeCost: a log request of a large cost adds its entries in chunks.
func TestLargeCost(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		clock := clocktest.NewManual(storetest.Epoch)
		s := testStore(t, client, clock)
		l := floodgate.NewLimit(floodgate.SlidingWindowLog, 20000, time.Minute)
		ctx := t.Context()
		if d, err := s.AllowN(ctx, "big", l, 15000); err != nil || !d.Allowed || d.Remaining != 5000 {
			t.Fatalf("AllowN(15000) = %+v, %v", d, err)
		}
		if n, _ := doKey(t, client, "ZCARD", s.Key("big", l.Algorithm)).AsInt64(); n != 15000 {
			t.Fatalf("ZCARD = %d, want 15000", n)
		}
		clock.Advance(time.Second)
		d, err := s.AllowN(ctx, "big", l, 5001)
		// The oldest entry leaves the window one minute after it was added;
		// the newest sits 14999µs after it.
		if err != nil || d.Allowed || d.RetryAfter != 59*time.Second || d.ResetAfter != 59*time.Second+14999*time.Microsecond {
			t.Fatalf("AllowN(5001) = %+v, %v; want denied with RetryAfter 59s, ResetAfter 59.014999s", d, err)
		}
		if err := s.Reset(ctx, "big", l); err != nil {
			t.Fatal(err)
		}
	})
}

// TestScriptFlush: SCRIPT FLUSH on every node in the middle of a run of many
// calls causes no error: EVALSHA falls back to EVAL on NOSCRIPT.
func TestScriptFlush(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		s := testStore(t, client, nil)
		ctx := t.Context()
		evalsBefore := evalCalls(t, client)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 8 {
			wg.Go(func() {
				for i := range 150 {
					l := limits(1000, time.Minute)[i%4]
					if _, err := s.Allow(ctx, "id"+strconv.Itoa(g*1000+i%37), l); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for range 5 {
			time.Sleep(5 * time.Millisecond)
			for addr, node := range client.Nodes() {
				if err := node.Do(ctx, node.B().ScriptFlush().Build()).Error(); err != nil {
					t.Errorf("SCRIPT FLUSH on %s: %v", addr, err)
				}
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("call during SCRIPT FLUSH: %v", err)
		}
		// After a final flush the next call must reload the script.
		for _, node := range client.Nodes() {
			do(t, node, "SCRIPT", "FLUSH")
		}
		for _, l := range limits(10, time.Minute) {
			if _, err := s.Allow(ctx, "after", l); err != nil {
				t.Fatalf("%s after SCRIPT FLUSH: %v", l.Algorithm, err)
			}
		}
		if after := evalCalls(t, client); after <= evalsBefore {
			t.Errorf("EVAL calls %d -> %d: the fallback never ran", evalsBefore, after)
		}
	})
}

// evalCalls sums the EVAL calls of every node from INFO commandstats.
func evalCalls(t *testing.T, client rueidis.Client) int64 {
	var total int64
	for _, node := range client.Nodes() {
		info, _ := do(t, node, "INFO", "commandstats").ToString()
		total += infoField(info, "cmdstat_eval:", "calls=")
	}
	return total
}

// TestErrors: a failing script is ErrScript, an outage reply is
// ErrStoreUnavailable, and bad arguments are rejected before Redis.
func TestErrors(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	s := testStore(t, client, nil)
	ctx := t.Context()
	l := floodgate.PerMinute(5)
	// Foreign data of another type under the store's key.
	doKey(t, client, "SET", s.Key("taken", l.Algorithm), "not a zset")
	_, err := s.Allow(ctx, "taken", l)
	if !errors.Is(err, ErrScript) || errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Fatalf("Allow on a key of the wrong type = %v; want ErrScript, not ErrStoreUnavailable", err)
	}
	if err := s.RefundN(ctx, "taken", l, 1); !errors.Is(err, ErrScript) {
		t.Fatalf("RefundN on a key of the wrong type = %v; want ErrScript", err)
	}
	if err := s.Reset(ctx, "taken", l); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	// The other algorithms keep a binary string: one of the wrong length is
	// not mistaken for state (nor for a fresh key), and the error says
	// what is wrong.
	for _, l := range []floodgate.Limit{
		floodgate.NewTokenBucket(5, 1, time.Second),
		floodgate.NewLimit(floodgate.SlidingWindowCounter, 5, time.Second),
		floodgate.NewLimit(floodgate.FixedWindow, 5, time.Second),
	} {
		// Negative and NaN doubles, 16 or 24 bytes as each algorithm reads.
		negative := strings.Repeat("\x00\x00\x00\x00\x00\x00\xf0\xbf", 3) // -1.0
		nan := strings.Repeat("\x00\x00\x00\x00\x00\x00\xf8\x7f", 3)
		size := 16
		if l.Algorithm == floodgate.SlidingWindowCounter {
			size = 24
		}
		for _, v := range []string{"", "not a bucket", strings.Repeat("x", 17), strings.Repeat("x", 25), negative[:size], nan[:size]} {
			doKey(t, client, "SET", s.Key("taken", l.Algorithm), v)
			_, err := s.Allow(ctx, "taken", l)
			if !errors.Is(err, ErrScript) || !strings.Contains(err.Error(), ", not a") {
				t.Errorf("%s: Allow on a key holding %q = %v; want ErrScript saying what it holds", l.Algorithm, v, err)
			}
			if err := s.RefundN(ctx, "taken", l, 1); !errors.Is(err, ErrScript) {
				t.Errorf("%s: RefundN on a key holding %q = %v; want ErrScript", l.Algorithm, v, err)
			}
		}
	}
	// A canceled context is an outage too, and says so.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Allow(canceled, "k", l); !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Allow with a canceled context = %v; want ErrStoreUnavailable and context.Canceled", err)
	}
	// Bad arguments never reach Redis.
	if _, err := s.AllowN(ctx, "k", l, 6); !errors.Is(err, floodgate.ErrCostExceedsLimit) {
		t.Fatalf("AllowN(6) = %v", err)
	}
	if err := s.Reset(ctx, "k", floodgate.Limit{}); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Fatalf("Reset(zero limit) = %v", err)
	}
}

// TestClassify feeds real Redis replies of every kind to the classifier.
func TestClassify(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	cases := []struct {
		reply       string // a Lua expression
		unavailable bool
		script      bool
	}{
		{"redis.error_reply('LOADING Redis is loading the dataset in memory')", true, false},
		{"redis.error_reply('CLUSTERDOWN The cluster is down')", true, false},
		{"redis.error_reply('READONLY You cannot write against a read only replica.')", true, false},
		{"redis.error_reply('OOM command not allowed when used memory > maxmemory')", true, false},
		{"redis.error_reply('BUSY Redis is busy running a script')", true, false},
		{"redis.error_reply('MASTERDOWN Link with MASTER is down')", true, false},
		{"redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')", false, true},
		{"redis.error_reply('NOPERM this user has no permissions')", false, true},
		{"redis.error_reply('ERR floodgate: bad')", false, true},
	}
	for _, c := range cases {
		err := client.Do(t.Context(), client.B().Eval().Script("return "+c.reply).Numkeys(0).Build()).Error()
		got := classify(t.Context(), "test", err)
		if errors.Is(got, floodgate.ErrStoreUnavailable) != c.unavailable || errors.Is(got, ErrScript) != c.script {
			t.Errorf("classify(%v) = %v; want unavailable=%v script=%v", err, got, c.unavailable, c.script)
		}
	}
}

// TestReplyShape: replies that break the script's contract are ErrReply,
// never a wrong decision and never a panic.
func TestReplyShape(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	l := floodgate.PerMinute(10)
	cases := map[string]bool{ // Lua reply -> valid
		"{1, 9, 0, 60000000}": true,
		"{0, 0, 5, 60000000}": true,
		"{1, 9, 0}":           false,
		"{1, 9, 0, 1, 1}":     false,
		"'1'":                 false,
		"7":                   false,
		"{1, '9', 0, 1}":      false,
		"{2, 9, 0, 1}":        false,
		"{1, -1, 0, 1}":       false,
		"{1, 11, 0, 1}":       false,
		"{1, 9, 5, 1}":        false,
		"{0, 9, 0, 1}":        false,
		"{0, 9, 1, -1}":       false,
		"{1, {1}, 0, 1}":      false,
		"{1, 9, 0, 1.5}":      true, // Redis truncates Lua numbers to integers
	}
	for lua, valid := range cases {
		reply, err := client.Do(t.Context(), client.B().Eval().Script("return "+lua).Numkeys(0).Build()).ToMessage()
		if err != nil {
			t.Fatalf("EVAL return %s: %v", lua, err)
		}
		d, err := decode(l, reply)
		if valid && err != nil {
			t.Errorf("decode(%s) = %v, want a decision", lua, err)
		}
		if !valid && (!errors.Is(err, ErrReply) || errors.Is(err, floodgate.ErrStoreUnavailable) || d.Allowed) {
			t.Errorf("decode(%s) = %+v, %v; want ErrReply and not allowed", lua, d, err)
		}
	}
}

// TestLogClockBack: after the clock runs back (a failover to a server whose
// clock is behind), the log still admits at most its quota, keeps every
// entry distinct, and its expiry is not shortened.
func TestLogClockBack(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		clock := clocktest.NewManual(storetest.Epoch.Add(time.Hour))
		s := testStore(t, client, clock)
		ctx := t.Context()
		l := floodgate.NewLimit(floodgate.SlidingWindowLog, 5, time.Minute)
		key := s.Key("k", l.Algorithm)
		for range 3 {
			if d, err := s.Allow(ctx, "k", l); err != nil || !d.Allowed {
				t.Fatalf("Allow = %+v, %v", d, err)
			}
		}
		before, _ := doKey(t, client, "PTTL", key).AsInt64()
		clock.Set(clock.Now().Add(-30 * time.Second))
		admitted := 0
		for range 4 {
			d, err := s.Allow(ctx, "k", l)
			if err != nil {
				t.Fatalf("Allow after the clock ran back: %v", err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 2 {
			t.Errorf("admitted %d after the clock ran back with 3 of 5 used, want 2", admitted)
		}
		if n, _ := doKey(t, client, "ZCARD", key).AsInt64(); n != 5 {
			t.Errorf("the log holds %d entries, want 5", n)
		}
		if after, _ := doKey(t, client, "PTTL", key).AsInt64(); after < before-1000 {
			t.Errorf("PTTL %d ms after the clock ran back 30 s, was %d: shortened", after, before)
		}
	})
}

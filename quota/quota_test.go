package quota_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/quota"
)

// recorder keeps the shares a client was sent, per rule.
type recorder struct {
	mu   sync.Mutex
	last map[string]quota.Share
	all  []quota.Share
}

func (r *recorder) send(b quota.Bucket, sh quota.Share) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]quota.Share{}
	}
	r.last[b.Rule] = sh
	r.all = append(r.all, sh)
}

func (r *recorder) get(rule string) (quota.Share, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sh, ok := r.last[rule]
	return sh, ok
}

func newSharer(t *testing.T, s floodgate.Store, o quota.Options) *quota.Sharer {
	t.Helper()
	e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler), OverLimitCache: decide.CacheOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := quota.New(e, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	return sh
}

// TestOutage: while the store cannot be asked a bucket's clients get what
// its failure mode says (open: allow all; closed: deny all; local: the
// share in force, sent again before its TTL ends), and token buckets again
// once it is back.
func TestOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCounting(memory.New(), nil)
		s := newSharer(t, store, quota.Options{Interval: time.Second})
		limit := floodgate.NewLimit(floodgate.FixedWindow, 6000, time.Minute)
		var r recorder
		c := s.Join(r.send)
		buckets := []quota.Bucket{
			{Rule: "open", Key: "q|open", Limit: limit, Failure: decide.FailOpen},
			{Rule: "closed", Key: "q|closed", Limit: limit, Failure: decide.FailClosed},
			{Rule: "local", Key: "q|local", Limit: limit, Failure: decide.FailLocal},
		}
		report := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); {
				for _, b := range buckets {
					c.Report(b, 50)
				}
				time.Sleep(time.Second)
			}
			synctest.Wait()
		}
		report(3 * time.Second)
		for _, b := range buckets {
			if sh, ok := r.get(b.Rule); !ok || sh.Blanket != quota.None || sh.Tokens != 5880 {
				t.Fatalf("%s before the outage: %+v, want the whole limit at 98%% (5880)", b.Rule, sh)
			}
		}
		store.down.Store(true)
		report(5 * time.Second)
		want := map[string]quota.Blanket{"open": quota.AllowAll, "closed": quota.DenyAll, "local": quota.None}
		for rule, blanket := range want {
			if sh, _ := r.get(rule); sh.Blanket != blanket || blanket == quota.None && sh.Tokens != 5880 {
				t.Errorf("%s during the outage: %+v, want blanket %d", rule, sh, blanket)
			}
		}
		store.down.Store(false)
		report(3 * time.Second)
		for _, b := range buckets {
			if sh, _ := r.get(b.Rule); sh.Blanket != quota.None || sh.Tokens != 5880 {
				t.Errorf("%s after the outage: %+v, want the token bucket again", b.Rule, sh)
			}
		}
	})
}

// TestDrainAndIdle: Drain sends every share in force again with a TTL of
// 0; a bucket reported unused for Idle is abandoned.
func TestDrainAndIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharer(t, memory.New(), quota.Options{Interval: time.Second, Idle: 5 * time.Second})
		limit := floodgate.NewLimit(floodgate.TokenBucket, 100, time.Second)
		var r recorder
		c := s.Join(r.send)
		busy := quota.Bucket{Rule: "busy", Key: "q|busy", Limit: limit}
		idle := quota.Bucket{Rule: "idle", Key: "q|idle", Limit: limit}
		c.Report(idle, 1)
		for range 10 {
			c.Report(busy, 80)
			c.Report(idle, 0)
			time.Sleep(time.Second)
			synctest.Wait()
		}
		if sh, _ := r.get("idle"); sh.Blanket != quota.Abandon {
			t.Errorf("idle bucket: %+v, want Abandon", sh)
		}
		sh, _ := r.get("busy")
		if sh.Blanket != quota.None || sh.Tokens != 98 || sh.TTL != 3*time.Second {
			t.Fatalf("busy bucket: %+v, want 98 tokens per second for 3s", sh)
		}
		s.Drain()
		if got, _ := r.get("busy"); got.TTL != 0 || got.Tokens != sh.Tokens {
			t.Errorf("after Drain: %+v, want the share in force with TTL 0", got)
		}
	})
}

func TestOptions(t *testing.T) {
	e, err := decide.New(memory.New(), decide.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    quota.Options
		want string
	}{
		{quota.Options{Interval: time.Millisecond}, "below 10ms"},
		{quota.Options{Interval: 10*time.Millisecond + time.Microsecond}, "whole number of 4µs"},
		{quota.Options{Interval: time.Second, TTL: 1500 * time.Millisecond}, "whole number of seconds"},
		{quota.Options{Interval: time.Second, TTL: 2 * time.Second}, "longer than two intervals"},
		{quota.Options{Interval: time.Second, Idle: time.Second}, "at least two intervals"},
	} {
		if _, err := quota.New(e, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.o, err, tc.want)
		}
	}
	s, err := quota.New(e, quota.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if o := s.Options(); o.TTL != time.Second || o.Idle != quota.DefaultIdle {
		t.Errorf("defaults: %+v, want TTL 1s (three intervals, rounded up to a second) and Idle %v", o, quota.DefaultIdle)
	}
	s.Close()
}

// TestOneCallPerSlot: a round whose slots are not whole microseconds (the
// store's answers round the round's end up, so it is learned a little late)
// still gets one write and one read per bucket.
func TestOneCallPerSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := new(atomic.Int64)
		interval := 10*time.Millisecond + 4*time.Microsecond // rounds of 2,501 µs: a write at 1,563.125 µs in
		s := newSharer(t, newCounting(memory.New(), calls), quota.Options{Interval: interval, TTL: time.Second, Idle: time.Minute})
		var r recorder
		c := s.Join(r.send)
		b := quota.Bucket{Rule: "r", Key: "k", Limit: floodgate.NewLimit(floodgate.FixedWindow, 1000, time.Second), Failure: decide.FailClosed}
		c.Report(b, 10)
		const intervals = 100
		for range intervals {
			time.Sleep(interval)
			c.Report(b, 10)
		}
		if got, want := calls.Load(), int64(8*intervals); got > want+8 || got < want-8 {
			t.Errorf("%d store calls in %d intervals, want %d: a write and a read per round", got, intervals, want)
		}
		if _, ok := r.get("r"); !ok {
			t.Error("no share sent")
		}
	})
}

// slowStore answers every call after a delay, as a store far away does.
type slowStore struct {
	floodgate.Store
	delay time.Duration
}

func (s slowStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	time.Sleep(s.delay)
	return s.Store.AllowN(ctx, key, l, n)
}

func (slowStore) InProcess() bool { return false }

// TestSlowStoreWritesLandInTime: one replica's store calls take 45 ms, more
// than the sixteenth of an interval between the writes and the reads; its
// writes start that much early, so the other replica's reads count its
// demand and the shares of both add up to no more than the limit.
func TestSlowStoreWritesLandInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		o := quota.Options{Interval: 500 * time.Millisecond}
		slow := newSharer(t, slowStore{store, 45 * time.Millisecond}, o)
		fast := newSharer(t, store, o)
		b := quota.Bucket{Rule: "r", Key: "k", Limit: floodgate.NewLimit(floodgate.FixedWindow, 1000, time.Second), Failure: decide.FailClosed}
		var rs, rf recorder
		cs, cf := slow.Join(rs.send), fast.Join(rf.send)
		for range 20 {
			cs.Report(b, 600)
			cf.Report(b, 600)
			time.Sleep(o.Interval)
		}
		a, _ := rs.get("r")
		c, _ := rf.get("r")
		if a.Tokens+c.Tokens > 1000 || a.Tokens < 450 || c.Tokens < 450 {
			t.Errorf("shares %d (slow replica) + %d (fast) per second of a limit of 1000: want about 490 each", a.Tokens, c.Tokens)
		}
	})
}

// TestShareFollowsReport: when a client's report moves its target beyond
// its noise, its share moves at once, not at the next round: a client
// whose demand falls gets the smaller share at its report, and one whose
// demand rises gets what the others' shares in force leave, up to its
// target; the shares never add up to more than the limit.
func TestShareFollowsReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharer(t, memory.New(), quota.Options{Interval: time.Second})
		b := quota.Bucket{Rule: "r", Key: "q|r", Limit: floodgate.NewLimit(floodgate.FixedWindow, 1000, time.Second), Failure: decide.FailClosed}
		var heavy, light recorder
		ch, cl := s.Join(heavy.send), s.Join(light.send)
		report := func(nh, nl int64) {
			ch.Report(b, nh)
			cl.Report(b, nl)
		}
		// Steady: 600 and 200 a second, reported every second.
		for range 10 {
			report(600, 200)
			time.Sleep(time.Second)
		}
		synctest.Wait()
		h, _ := heavy.get("r")
		l, _ := light.get("r")
		if h.Tokens < 700 || l.Tokens < 230 || h.Tokens+l.Tokens > 980 {
			t.Fatalf("steady shares %d and %d, want about 735 and 245 (3:1 of 980)", h.Tokens, l.Tokens)
		}
		// Just after a round's read (every 250 ms, 7/8 into it): the next
		// round is 200 ms away.
		time.Sleep(time.Until(time.Now().Truncate(250 * time.Millisecond).Add(250*time.Millisecond*7/8 + 5*time.Millisecond)))
		ch.Report(b, 100) // the heavy client goes light
		synctest.Wait()
		h2, _ := heavy.get("r")
		if h2.Tokens >= h.Tokens/2 {
			t.Errorf("at the report that fell to a sixth the heavy share is %d (was %d), want it cut at once", h2.Tokens, h.Tokens)
		}
		cl.Report(b, 700) // the light one goes heavy: it takes the room left
		synctest.Wait()
		l2, _ := light.get("r")
		if l2.Tokens <= l.Tokens*2 {
			t.Errorf("at the report that rose 3.5x the light share is %d (was %d), want it raised at once", l2.Tokens, l.Tokens)
		}
		if sum := h2.Tokens + l2.Tokens; sum > 980 {
			t.Errorf("the shares add up to %d, over the 980 handed out", sum)
		}
	})
}

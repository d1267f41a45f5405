package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

const sec = int64(time.Second / time.Microsecond)

func TestBucketTake(t *testing.T) {
	l := floodgate.NewTokenBucket(10, 2, time.Second) // 0.5s per token
	b := NewBucket(l, 0)
	steps := []struct {
		at, n              int64
		allowed            bool
		remaining          int64
		retry, resetMicros int64
	}{
		{0, 10, true, 0, 0, 5 * sec},
		{0, 1, false, 0, sec / 2, 5 * sec},
		{sec / 4, 1, false, 0, sec / 4, 5*sec - sec/4},
		{sec / 2, 1, true, 0, 0, 5 * sec},
		{3 * sec, 5, true, 0, 0, 5 * sec},
		{100 * sec, 10, true, 0, 0, 5 * sec}, // refilled to capacity, not beyond
		{sec, 1, false, 0, sec / 2, 5 * sec}, // time ran backwards: nothing refills
	}
	for i, s := range steps {
		d := b.Allow(l, s.at, s.n)
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != micros(s.retry) || d.ResetAfter != micros(s.resetMicros) {
			t.Fatalf("step %d (t=%dµs, n=%d): got %+v, want allowed=%v remaining=%d retry=%dµs reset=%dµs",
				i, s.at, s.n, d, s.allowed, s.remaining, s.retry, s.resetMicros)
		}
	}
}

// TestBucketRefillBounds: a refill reaches full exactly when elapsed ×
// units per microsecond reaches what is missing, and a product beyond 64
// bits (the fastest bucket after a long idle) fills it rather than
// wrapping.
func TestBucketRefillBounds(t *testing.T) {
	fast := floodgate.NewTokenBucket(1<<13, 1<<40, time.Millisecond) // 2^37 units a µs
	slow := floodgate.NewTokenBucket(10, 2, time.Second)             // 0.5 s a token
	cases := []struct {
		name      string
		l         floodgate.Limit
		elapsed   int64 // after draining the bucket at 1
		remaining int64 // after taking one at 1+elapsed
	}{
		{"one µs short of a token", slow, sec/2 - 1, -1},
		{"exactly one token", slow, sec / 2, 0},
		{"exactly full", slow, 5 * sec, 9},
		{"a µs past full", slow, 5*sec + 1, 9},
		{"a product of 64 bits", fast, 1 << 27, 1<<13 - 1},
		{"a product of 100 bits", fast, 1 << 62, 1<<13 - 1},
	}
	for _, c := range cases {
		b := NewBucket(c.l, 1)
		if d := b.Allow(c.l, 1, c.l.Quota); !d.Allowed {
			t.Fatalf("%s: draining was denied", c.name)
		}
		d := b.Allow(c.l, 1+c.elapsed, 1)
		if c.remaining < 0 {
			if d.Allowed {
				t.Errorf("%s: admitted, want denied", c.name)
			}
			continue
		}
		if !d.Allowed || d.Remaining != c.remaining {
			t.Errorf("%s: got %+v, want admitted with %d remaining", c.name, d, c.remaining)
		}
	}
}

func TestCounterRetryIsTheFirstFit(t *testing.T) {
	// For many states, RetryAfter is the first microsecond at which the
	// request fits: it fits there and not one microsecond earlier.
	l := floodgate.NewLimit(floodgate.SlidingWindowCounter, 7, 10*time.Millisecond)
	w := l.Window.Microseconds()
	for prev := int64(0); prev <= 7; prev++ {
		for cur := int64(0); cur <= 7; cur++ {
			for _, e := range []int64{0, 1, w / 3, w / 2, w - 1} {
				for n := int64(1); n <= 7; n++ {
					s := Counter{Window{Start: 10 * w, Previous: prev, Current: cur}}
					now := s.Start + e
					d := s.Allow(l, now, n)
					if d.Allowed {
						continue
					}
					at := now + d.RetryAfter.Microseconds()
					probe := Counter{Window{Start: 10 * w, Previous: prev, Current: cur}}
					if !probe.Allow(l, at, n).Allowed {
						t.Fatalf("prev=%d cur=%d e=%d n=%d: denied at RetryAfter %s", prev, cur, e, n, d.RetryAfter)
					}
					probe = Counter{Window{Start: 10 * w, Previous: prev, Current: cur}}
					if d.RetryAfter > time.Microsecond && probe.Allow(l, at-1, n).Allowed {
						t.Fatalf("prev=%d cur=%d e=%d n=%d: allowed 1µs before RetryAfter %s", prev, cur, e, n, d.RetryAfter)
					}
				}
			}
		}
	}
}

// TestLogRingMatchesModel: a log's ring, grown, wrapped, shrunk and
// refunded at random, holds what a plain slice of the same entries does,
// and its length stays a power of two, which its index masks rely on.
func TestLogRingMatchesModel(t *testing.T) {
	const w, quota = 100, 64
	l := floodgate.NewLimit(floodgate.SlidingWindowLog, quota, w*time.Microsecond)
	r := rand.New(rand.NewPCG(1, 2))
	var g Log
	var want []int64
	now := int64(1)
	sizes := map[int]bool{}
	for step := range 200_000 {
		if r.IntN(50) == 0 {
			now += r.Int64N(3 * w) // a quiet spell: most entries leave, the ring shrinks
		} else {
			now += r.Int64N(3)
		}
		n := 1 + r.Int64N(8)
		if r.IntN(6) == 0 {
			g.Refund(l, now, n)
			want = want[:max(0, len(want)-int(n))]
		} else {
			d := g.Allow(l, now, n)
			want = slices.DeleteFunc(want, func(at int64) bool { return at <= now-w })
			if fits := int64(len(want))+n <= quota; d.Allowed != fits {
				t.Fatalf("step %d: admitted %v with %d entries and a cost of %d", step, d.Allowed, len(want), n)
			}
			if d.Allowed {
				first := now
				if len(want) > 0 {
					first = max(now, want[len(want)-1]+1)
				}
				for i := range n {
					want = append(want, first+i)
				}
			}
		}
		if size := len(g.ring); size&(size-1) != 0 || size > 0 && size < 4 {
			t.Fatalf("step %d: a ring of %d slots", step, size)
		}
		sizes[len(g.ring)] = true
		if g.Len() != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, g.Len(), len(want))
		}
		for i, at := range want {
			if got := g.at(i); got != at {
				t.Fatalf("step %d: entry %d at %d, want %d", step, i, got, at)
			}
		}
	}
	if !sizes[4] || !sizes[16] || !sizes[64] {
		t.Errorf("ring sizes seen %v: want 4 through 64 (growth and shrinks)", sizes)
	}
}

func TestLogRingGrowsShrinksAndRefunds(t *testing.T) {
	l := floodgate.NewLimit(floodgate.SlidingWindowLog, 1000, time.Second)
	var g Log
	for i := range int64(600) {
		if d := g.Allow(l, i, 1); !d.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	if g.Len() != 600 || cap(g.ring) < 600 {
		t.Fatalf("len %d cap %d", g.Len(), cap(g.ring))
	}
	if reset := g.Refund(l, 0, 100); g.Len() != 500 || g.Newest() != 499 || reset != micros(499+sec) {
		t.Fatalf("after refund: len %d newest %d reset %s", g.Len(), g.Newest(), reset)
	}
	// A second later all but the last few have left the window.
	g.Expire(sec, sec+495)
	if g.Len() != 4 {
		t.Fatalf("after expiry: len %d, want 4", g.Len())
	}
	g.shrink()
	if cap(g.ring) > 16 {
		t.Fatalf("after shrink: cap %d", cap(g.ring))
	}
	if g.Newest() != 499 {
		t.Fatalf("shrink lost entries: newest %d", g.Newest())
	}
	// Entries sit at distinct microseconds even for a burst at one instant.
	d := g.Allow(l, sec+495, 3)
	if !d.Allowed || g.Newest() != sec+497 {
		t.Fatalf("burst: %+v newest %d", d, g.Newest())
	}
}

func TestWindowRefund(t *testing.T) {
	l := floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, time.Second)
	s := Counter{}
	s.Allow(l, 0, 4)
	if reset := s.Refund(l, sec/2, 3); s.Current != 1 || reset != micros(2*sec-sec/2) {
		t.Fatalf("refund in the same window: current %d, reset %s; want 1, 1.5s", s.Current, reset)
	}
	s.Allow(l, sec/2, 2)
	// The window rolled: the count is now the previous one.
	if reset := s.Refund(l, sec+1, 2); s.Previous != 1 || s.Current != 0 || reset != micros(sec-1) {
		t.Fatalf("refund after the roll: %+v, reset %s", s, reset)
	}
	var empty Counter
	empty.Allow(l, 0, 2)
	if reset := empty.Refund(l, 1, 2); empty.Current != 0 || reset != 0 {
		t.Fatalf("refunding the only request: %+v, reset %s; want nothing left", empty, reset)
	}
	s.Refund(l, 5*sec, 9) // long gone: nothing to refund, never negative
	if s.Previous < 0 || s.Current < 0 {
		t.Fatalf("negative counts: %+v", s)
	}
}

func TestRefundToFull(t *testing.T) {
	b := floodgate.NewTokenBucket(10, 10, time.Second)
	bucket := NewBucket(b, 0)
	bucket.Allow(b, 0, 4)
	if reset := bucket.Refund(b, 0, 1); reset != 300*time.Millisecond {
		t.Fatalf("bucket 3 tokens short: reset %s, want 300ms", reset)
	}
	if reset := bucket.Refund(b, 0, 5); reset != 0 {
		t.Fatalf("bucket refunded to full: reset %s, want 0", reset)
	}
	f := floodgate.NewLimit(floodgate.FixedWindow, 10, time.Second)
	var fixed Fixed
	fixed.Allow(f, sec/4, 3)
	if reset := fixed.Refund(f, sec/2, 2); fixed.Current != 1 || reset != time.Second/2 {
		t.Fatalf("fixed window: %+v, reset %s; want 1 left, 500ms", fixed, reset)
	}
	if reset := fixed.Refund(f, sec/2, 2); fixed.Current != 0 || reset != 0 {
		t.Fatalf("fixed window emptied: %+v, reset %s; want 0", fixed, reset)
	}
	g := floodgate.NewLimit(floodgate.SlidingWindowLog, 10, time.Second)
	var log Log
	log.Allow(g, 0, 2)
	if reset := log.Refund(g, sec+1, 1); reset != 0 {
		t.Fatalf("log whose newest entry has left the window: reset %s, want 0", reset)
	}
	if reset := log.Refund(g, 0, 5); log.Len() != 0 || reset != 0 {
		t.Fatalf("log emptied: len %d, reset %s", log.Len(), reset)
	}
	log.Allow(g, 0, 2)
	log.Replenish(g, 2*sec)
	if log.Len() != 0 {
		t.Fatalf("a replenished log keeps %d entries", log.Len())
	}
}

func TestBucketCapacityLowered(t *testing.T) {
	big := floodgate.NewTokenBucket(100, 1, time.Second)
	small := floodgate.NewTokenBucket(10, 1, time.Second)
	b := NewBucket(big, 0)
	d := b.Allow(small, 0, 1)
	if !d.Allowed || d.Remaining != 9 || d.ResetAfter != time.Second {
		t.Fatalf("after lowering the capacity to 10: %+v, want allowed, Remaining 9, ResetAfter 1s", d)
	}
}

// TestSaveRestore: Restore undoes every decision since Save, whatever they
// were: several takes, under other limits too, across window edges and with
// the log's ring wrapping over entries that left the window.
func TestSaveRestore(t *testing.T) {
	type step struct{ at, n int64 }
	steps := [][]step{
		{{0, 1}},
		{{0, 3}, {0, 4}, {0, 9}},
		{{5, 2}, {sec, 1}, {3 * sec, 5}},
		{{-sec, 1}, {0, 2}}, // time running backwards
	}
	bucket := floodgate.NewTokenBucket(10, 2, time.Second)
	other := floodgate.NewTokenBucket(4, 1, 3*time.Second)
	window := floodgate.NewLimit(floodgate.FixedWindow, 10, time.Second)
	long := floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, time.Minute)
	for i, ss := range steps {
		b := NewBucket(bucket, 10*sec)
		b.Allow(bucket, 10*sec, 7)
		before := b
		snap := b.Save()
		for _, s := range ss {
			b.Allow(bucket, 10*sec+s.at, s.n)
			b.Allow(other, 10*sec+s.at, 1)
		}
		b.Restore(snap)
		if b != before {
			t.Errorf("steps %d: bucket restored to %+v, want %+v", i, b, before)
		}
		for _, st := range []State{&Fixed{}, &Counter{}} {
			st.Allow(window, 10*sec+sec/2, 4)
			before := st.Save()
			for _, s := range ss {
				st.Allow(window, 10*sec+s.at, s.n)
				st.Allow(long, 10*sec+s.at, 1)
			}
			st.Restore(before)
			if got := st.Save(); got != before {
				t.Errorf("steps %d: %T restored to %+v, want %+v", i, st, got, before)
			}
		}
	}
	// The log: a ring of four, two entries of which leave the window before
	// the adds that wrap onto their slots.
	l := floodgate.NewLimit(floodgate.SlidingWindowLog, 4, 10*time.Microsecond)
	var g Log
	for at := range int64(4) {
		g.Allow(l, at, 1)
	}
	for _, empty := range []bool{false, true} {
		start := int64(11)
		if empty {
			g = Log{}
			start = 100
		}
		snap := g.Save()
		g.Allow(l, start, 1)
		g.Allow(l, start, 1)
		if d := g.Allow(l, start+1, 3); d.Allowed {
			t.Fatalf("empty=%v: a fifth entry admitted", empty)
		}
		g.Restore(snap)
		// The last Allow dropped the entry at 2 from the window.
		want := []int64{3}
		if empty {
			want = nil
		}
		var got []int64
		for i := range g.Len() {
			got = append(got, g.at(i))
		}
		if !slices.Equal(got, want) {
			t.Errorf("empty=%v: log restored to %v, want %v (the entries that left the window stay dropped)", empty, got, want)
		}
	}
}

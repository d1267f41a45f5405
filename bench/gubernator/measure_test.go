package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPlace(t *testing.T) {
	ws := []window{{lo: 0, hi: 10}, {lo: 10, hi: 20}, {lo: 25, hi: 30}}
	for _, c := range []struct {
		t0, t1 int64
		want   int
	}{
		{0, 9, 0}, {3, 3, 0}, {9, 10, -1}, {10, 19, 1}, {19, 20, -1}, {20, 24, -1},
		{22, 26, -1}, {25, 29, 2}, {-1, 3, -1}, {29, 30, -1}, {30, 31, -1},
	} {
		if got := place(ws, span{t0: c.t0, t1: c.t1}); got != c.want {
			t.Errorf("place(%d..%d) = %d, want %d", c.t0, c.t1, got, c.want)
		}
	}
	if got := place(nil, span{t0: 1, t1: 2}); got != -1 {
		t.Errorf("place in no windows = %d, want -1", got)
	}
}

func TestFixedWindows(t *testing.T) {
	ws := fixedWindows(1000, 3500, time.Nanosecond*1000)
	want := []window{{lo: 1000, hi: 2000, whole: true}, {lo: 2000, hi: 3000, whole: true}, {lo: 3000, hi: 4000}}
	if len(ws) != len(want) {
		t.Fatalf("fixedWindows = %+v, want %+v", ws, want)
	}
	for i := range ws {
		if ws[i] != want[i] {
			t.Errorf("window %d = %+v, want %+v", i, ws[i], want[i])
		}
	}
}

func TestObservedWindows(t *testing.T) {
	ss := []seen{
		{window: 1000, firstT1: 10, lastT0: 900},
		{window: 2001, firstT1: 1005, lastT0: 1005}, // one call: no stretch of its own
		{window: 3002, firstT1: 2100, lastT0: 2900},
	}
	ws := observedWindows(ss, nil)
	want := []window{
		{lo: 10, hi: 901, id: 1000, whole: true},
		{lo: 1005, hi: 1006, id: 2001, whole: true},
		{lo: 2100, hi: 2901, id: 3002},
	}
	for i := range want {
		if ws[i] != want[i] {
			t.Errorf("window %d = %+v, want %+v", i, ws[i], want[i])
		}
	}
	// A window that cannot end before its reset time holds until then.
	ws = observedWindows(ss[:1], func(id int64) int64 { return id + 1 })
	if ws[0].hi != 1001 {
		t.Errorf("with until: hi = %d, want 1001", ws[0].hi)
	}
}

func TestCount(t *testing.T) {
	ws := []window{{lo: 0, hi: 10, id: 7, whole: true}, {lo: 12, hi: 20, id: 8, whole: true}, {lo: 20, hi: 30, id: 9}}
	spans := []span{
		{t0: 1, t1: 2, window: 7},   // by name
		{t0: 25, t1: 26, window: 7}, // by name, whatever its time
		{t0: 1, t1: 2},              // by time: 7
		{t0: 13, t1: 14, window: 5}, // a window of its own: by time, 8
		{t0: 9, t1: 13},             // across an edge: unplaced
		{t0: 10, t1: 11, window: 6}, // between stretches: unplaced
		{t0: 21, t1: 22, window: 9}, // by name
	}
	c := count(ws, spans)
	if want := []int64{3, 1, 1}; !equal(c.counts, want) {
		t.Errorf("counts = %v, want %v", c.counts, want)
	}
	if c.byName != 3 || c.byTime != 2 || c.unplaced != 2 {
		t.Errorf("by name %d, by time %d, unplaced %d; want 3, 2, 2", c.byName, c.byTime, c.unplaced)
	}
	maxF, meanF, over, whole := c.perLimit(2)
	if maxF != 1.5 || meanF != 1 || over != 1 || whole != 2 {
		t.Errorf("perLimit(2) = %v, %v, %d, %d; want 1.5, 1, 1, 2", maxF, meanF, over, whole)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// exact is a contender that admits exactly limit units in each window of
// length d from start, deciding under one lock on the wall clock, and
// keeps what it admitted per instance and window: the truth the
// measurement is checked against. Instances below unnamed name their
// window (its index plus one); the others name none. Every fail-th call
// fails.
type exact struct {
	start    time.Time
	d        time.Duration
	limit    int64
	unnamed  int
	fail     int64
	mu       sync.Mutex
	calls    int64
	counts   map[int64]int64
	admitted map[[2]int64]int64 // instance, window -> admitted
}

func (e *exact) caller(i int) decider {
	return func(context.Context) (bool, int64, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.calls++
		if e.calls%e.fail == 0 {
			return false, 0, errors.New("failed")
		}
		w := int64(time.Since(e.start) / e.d)
		id := w + 1
		if i >= e.unnamed {
			id = 0
		}
		if e.counts[w] >= e.limit {
			return false, id, nil
		}
		e.counts[w]++
		e.admitted[[2]int64{int64(i), w}]++
		return true, id, nil
	}
}

// TestPhaseCountsExactly drives an exact contender for a second and
// checks every count against what it admitted.
func TestPhaseCountsExactly(t *testing.T) {
	start := time.Now().Add(50 * time.Millisecond)
	const d = 100 * time.Millisecond
	e := &exact{start: start, d: d, limit: 40, unnamed: 2, fail: 97, counts: map[int64]int64{}, admitted: map[[2]int64]int64{}}
	p := phase{instances: 3, callersPer: 4, duration: time.Second, owner: 0, record: true}
	o := p.run(context.Background(), e, start)

	if o.decisions != e.calls {
		t.Errorf("decisions %d, the contender answered %d calls", o.decisions, e.calls)
	}
	if want := e.calls / e.fail; o.errors != want {
		t.Errorf("errors %d, want %d", o.errors, want)
	}
	var truth int64
	for _, n := range e.admitted {
		truth += n
	}
	if o.admitted != truth || int64(len(o.spans)) != truth {
		t.Fatalf("admitted %d (%d spans), the contender admitted %d", o.admitted, len(o.spans), truth)
	}
	if o.admitted > o.decisions-o.errors {
		t.Errorf("admitted %d of %d decisions", o.admitted, o.decisions-o.errors)
	}

	// Every window the owner (instance 0) saw, in order, and within the
	// time the contender's window ran: a call that ended at firstT1 was
	// decided in it, as was one that began at lastT0.
	for k, s := range o.seen {
		if k > 0 && s.window <= o.seen[k-1].window {
			t.Errorf("seen out of order: %+v", o.seen)
		}
		lo := start.UnixNano() + (s.window-1)*int64(d)
		if s.firstT1 < lo || s.lastT0 >= lo+int64(d) {
			t.Errorf("window %d ran from %d to %d, seen from %d to %d", s.window, lo, lo+int64(d), s.firstT1, s.lastT0)
		}
	}

	// Named instances: every admission in the window it was admitted in.
	ws := observedWindows(o.seen, nil)
	var named, unnamed []span
	for _, s := range o.spans {
		if s.inst < e.unnamed {
			named = append(named, s)
		} else {
			unnamed = append(unnamed, s)
		}
	}
	c := count(ws, named)
	if c.byName != int64(len(named)) || c.unplaced != 0 {
		t.Errorf("named spans: %d by name, %d unplaced, of %d", c.byName, c.unplaced, len(named))
	}
	for k, w := range ws {
		var want int64
		for i := range int64(e.unnamed) {
			want += e.admitted[[2]int64{i, w.id - 1}]
		}
		if c.counts[k] != want {
			t.Errorf("window %d (id %d): counted %d, admitted %d", k, w.id, c.counts[k], want)
		}
	}

	// The unnamed instance, placed by time in the contender's own
	// windows: each counted in the one it was admitted in, or unplaced.
	fixed := fixedWindows(start.UnixNano(), o.end, d)
	c = count(fixed, unnamed)
	if c.byTime+c.unplaced != int64(len(unnamed)) || c.byName != 0 {
		t.Errorf("unnamed spans: %d by time, %d unplaced, %d by name, of %d", c.byTime, c.unplaced, c.byName, len(unnamed))
	}
	var missing int64
	for k := range fixed {
		want := e.admitted[[2]int64{int64(e.unnamed), int64(k)}]
		if c.counts[k] > want {
			t.Errorf("window %d: counted %d, admitted only %d", k, c.counts[k], want)
		}
		missing += want - c.counts[k]
	}
	if missing != c.unplaced {
		t.Errorf("%d admissions not counted in their window, %d unplaced", missing, c.unplaced)
	}

	// All of them in fixed windows: the exact contender never exceeds
	// its limit, and the whole windows are the run's.
	c = count(fixed, o.spans)
	_, _, over, whole := c.perLimit(e.limit)
	if over != 0 {
		t.Errorf("%d windows over the limit of an exact contender: %v", over, c.counts)
	}
	if whole != int(time.Second/d) {
		t.Errorf("%d whole windows, want %d", whole, time.Second/d)
	}
}

// TestGubernatorTiny runs three gubernator daemons for a second and checks
// what the measurement can know exactly: the owner's own answers never
// exceed the limit in the window they name, and every admission is
// counted once.
func TestGubernatorTiny(t *testing.T) {
	ctx := context.Background()
	gc, err := startGubernator(ctx, 3, behaviors())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if !gc.close() {
			t.Log("a daemon did not close within 5s (gubernator v2.13.0's shutdown hang): left running")
		}
	}()
	cfg := config{instances: 3, callersPer: 4, duration: time.Second}
	const limit = 200
	r, err := gubernatorRound(ctx, cfg, gc, limit, "tiny-"+time.Now().Format("150405.000"))
	if err != nil {
		t.Fatal(err)
	}
	o := r.o
	if o.errors != 0 {
		t.Fatalf("%d errors, the first: %v", o.errors, o.firstErr)
	}
	if o.decisions == 0 || o.admitted == 0 || o.admitted > o.decisions {
		t.Fatalf("admitted %d of %d", o.admitted, o.decisions)
	}
	if len(r.t.windows) == 0 {
		t.Fatal("the owner named no window")
	}
	if got := r.t.byName + r.t.byTime + r.t.unplaced; got != o.admitted {
		t.Errorf("counted %d (by name %d, by time %d, unplaced %d) of %d admitted", got, r.t.byName, r.t.byTime, r.t.unplaced, o.admitted)
	}
	var sum int64
	for _, n := range r.t.counts {
		sum += n
	}
	if sum != r.t.byName+r.t.byTime {
		t.Errorf("windows hold %d, placed %d", sum, r.t.byName+r.t.byTime)
	}
	var own []span
	for _, s := range o.spans {
		if s.inst == r.owner {
			own = append(own, s)
		}
	}
	c := count(r.t.windows, own)
	if c.byName != int64(len(own)) {
		t.Errorf("%d of the owner's %d admissions named a window it was not seen answering", int64(len(own))-c.byName, len(own))
	}
	if _, _, over, _ := c.perLimit(limit); over != 0 {
		t.Errorf("the owner alone admitted more than %d in a window: %v", limit, c.counts)
	}
}

// TestFloodgateTiny runs the lease cell for a second on the harness's
// cluster (skipped without it) and checks its bound as the command does.
func TestFloodgateTiny(t *testing.T) {
	addrs := os.Getenv("FLOODGATE_REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		t.Skip("no FLOODGATE_REDIS_CLUSTER_ADDRS (scripts/redis-harness.sh env)")
	}
	cfg := config{addrs: strings.Split(addrs, ","), instances: 3, callersPer: 4, duration: time.Second}
	const limit = 500
	r, err := floodgateRound(context.Background(), cfg, limit, "guberbench-test-"+time.Now().Format("150405.000000")+":")
	if err != nil {
		t.Fatal(err)
	}
	if r.o.admitted == 0 || r.o.admitted > r.o.decisions-r.o.errors {
		t.Fatalf("admitted %d of %d decisions", r.o.admitted, r.o.decisions-r.o.errors)
	}
	if got := r.t.byTime + r.t.unplaced; got != r.o.admitted || r.t.byName != 0 {
		t.Errorf("placed %d, unplaced %d, by name %d, of %d admitted", r.t.byTime, r.t.unplaced, r.t.byName, r.o.admitted)
	}
	if _, _, over, whole := r.t.perLimit(limit); over != 0 || whole != 1 {
		t.Errorf("%d windows over %d, %d whole: %v", over, limit, whole, r.t.counts)
	}
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{451: "451ns", 7281: "7.28µs", 57274661: "57.3ms", 999: "999ns", 1000: "1µs"} {
		if got := short(d).String(); got != want {
			t.Errorf("short(%d) = %s, want %s", d, got, want)
		}
	}
}

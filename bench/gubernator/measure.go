package main

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// contender decides units of the hot key at its instances.
type contender interface {
	// caller returns the decide function of one caller of instance i
	// (each caller its own, so it may keep buffers).
	caller(i int) decider
}

// decider asks for one unit. window names the window that answered when
// the contender reports one (gubernator: the bucket's reset time in Unix
// milliseconds), 0 when it does not. err is a failed call: neither
// admitted nor denied.
type decider func(ctx context.Context) (allowed bool, window int64, err error)

// span is one admitted call: when it began and ended on the wall clock
// (Unix nanoseconds), the instance that answered and the window it named.
type span struct {
	t0, t1 int64
	inst   int
	window int64
}

// seen is what the callers of the instance that owns the key saw of one
// window: the earliest end and the latest start of a call it answered.
type seen struct {
	window          int64
	firstT1, lastT0 int64
}

// phase is one contender's run: callersPer callers on each of instances
// instances, each in a closed loop for duration from start.
type phase struct {
	instances, callersPer int
	duration              time.Duration
	// owner is the instance whose answers name the windows (-1: none).
	owner int
	// record keeps every admitted call's span.
	record bool
}

// outcome is what a phase measured.
type outcome struct {
	// decisions counts the calls, errors those that failed.
	decisions, admitted, errors int64
	start, end                  int64 // wall clock, Unix nanoseconds
	elapsed                     time.Duration
	p50, p99                    time.Duration
	spans                       []span
	seen                        []seen // merged, in the order of their windows
	firstErr                    error
}

// rate returns the decisions (admitted or denied) per second.
func (o outcome) rate() float64 { return float64(o.decisions-o.errors) / o.elapsed.Seconds() }

// demand returns the calls per second, failed ones too.
func (o outcome) demand() float64 { return float64(o.decisions) / o.elapsed.Seconds() }

// run drives c from start (which it waits for) for p.duration.
func (p phase) run(ctx context.Context, c contender, start time.Time) outcome {
	type caller struct {
		n, admitted, errors int64
		lat                 []time.Duration
		spans               []span
		seen                []seen
		err                 error
	}
	cs := make([]caller, p.instances*p.callersPer)
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	for i := range cs {
		inst := i % p.instances
		cl := &cs[i]
		decide := c.caller(inst)
		wg.Go(func() {
			for {
				t0 := time.Now()
				if t0.Sub(start) >= p.duration {
					return
				}
				allowed, window, err := decide(ctx)
				t1 := time.Now()
				if cl.n%8 == 0 {
					cl.lat = append(cl.lat, t1.Sub(t0))
				}
				cl.n++
				if err != nil {
					cl.errors++
					if cl.err == nil {
						cl.err = err
					}
					continue
				}
				if inst == p.owner && window != 0 {
					// One caller's calls follow each other, and the
					// owner's windows too: a new window is a new entry.
					if k := len(cl.seen) - 1; k >= 0 && cl.seen[k].window == window {
						cl.seen[k].lastT0 = t0.UnixNano()
					} else {
						cl.seen = append(cl.seen, seen{window: window, firstT1: t1.UnixNano(), lastT0: t0.UnixNano()})
					}
				}
				if allowed {
					cl.admitted++
					if p.record {
						cl.spans = append(cl.spans, span{t0: t0.UnixNano(), t1: t1.UnixNano(), inst: inst, window: window})
					}
				}
			}
		})
	}
	wg.Wait()
	o := outcome{start: start.UnixNano(), elapsed: time.Since(start)}
	o.end = o.start + o.elapsed.Nanoseconds()
	var lat []time.Duration
	byWindow := map[int64]seen{}
	for _, cl := range cs {
		o.decisions += cl.n
		o.admitted += cl.admitted
		o.errors += cl.errors
		if o.firstErr == nil {
			o.firstErr = cl.err
		}
		lat = append(lat, cl.lat...)
		o.spans = append(o.spans, cl.spans...)
		for _, s := range cl.seen {
			m, ok := byWindow[s.window]
			if !ok {
				byWindow[s.window] = s
				continue
			}
			m.firstT1 = min(m.firstT1, s.firstT1)
			m.lastT0 = max(m.lastT0, s.lastT0)
			byWindow[s.window] = m
		}
	}
	for _, s := range byWindow {
		o.seen = append(o.seen, s)
	}
	slices.SortFunc(o.seen, func(a, b seen) int { return cmp.Compare(a.window, b.window) })
	slices.Sort(lat)
	if len(lat) > 0 {
		o.p50, o.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return o
}

// window is a stretch of time in which the limit counts afresh, as far as
// it is certainly that window: an admission is placed in it only when its
// call began and ended within [lo, hi).
type window struct {
	lo, hi int64
	// id is the name the contender gives it (0: none).
	id int64
	// whole reports that the run covered the whole window (the last of
	// an observed run is cut by its end).
	whole bool
}

// fixedWindows returns the windows of length d from start to end (Unix
// nanoseconds), start on a window's edge: floodgate's fixed window, whose
// windows are the store clock's multiples of d.
func fixedWindows(start, end int64, d time.Duration) []window {
	var ws []window
	for lo := start; lo < end; lo += d.Nanoseconds() {
		hi := lo + d.Nanoseconds()
		ws = append(ws, window{lo: lo, hi: hi, whole: hi <= end})
	}
	return ws
}

// observedWindows returns the windows the owner's answers named, in their
// order. Window k certainly ran from the earliest end of a call it answered
// (it was made before) to the latest start of one (it ended after), or to
// until(id) when that is later: the contender's word for the moment before
// which a window cannot have ended (0: none). Between the end of one
// stretch and the start of the next either window could have been the
// owner's, so a span placed by its time is not placed there. A window
// seen by too few calls (or whose stretch overlapped a neighbour's) keeps
// its name and holds no time. The last window is cut by the run's end;
// the others are whole.
func observedWindows(ss []seen, until func(id int64) int64) []window {
	ws := make([]window, len(ss))
	for k, s := range ss {
		hi := s.lastT0 + 1
		if until != nil {
			hi = max(hi, until(s.window))
		}
		ws[k] = window{lo: s.firstT1, hi: max(s.firstT1, hi), id: s.window, whole: k < len(ss)-1}
	}
	return ws
}

// place returns the index of the window of ws (sorted, not overlapping)
// that holds the whole call s, or -1.
func place(ws []window, s span) int {
	// The last window starting at or before the call's start.
	i, found := slices.BinarySearchFunc(ws, s.t0, func(w window, t int64) int { return cmp.Compare(w.lo, t) })
	if !found {
		i--
	}
	if i < 0 || s.t1 >= ws[i].hi {
		return -1
	}
	return i
}

// tally is the admissions counted in each window.
type tally struct {
	windows []window
	counts  []int64
	// byName counts the admissions counted in the window their answer
	// named, byTime those placed by the time of their call, unplaced
	// those that named no window of ws and that no window certainly held.
	byName, byTime, unplaced int64
}

// count counts every span in a window of ws. A span whose answer named a
// window of ws is counted in it: an owner's answer, or another instance's
// from a copy of the owner's state, is decided in the window it names.
// Any other span (one that named nothing, or a window of its own: a
// gubernator non-owner's bucket made before the owner's state reached it)
// is placed by its time, in the window that held the whole call.
func count(ws []window, spans []span) tally {
	t := tally{windows: ws, counts: make([]int64, len(ws))}
	ids := map[int64]int{}
	// The windows that hold time, in order and apart, for placing a span
	// by its time; should clocks make two overlap, the later is left out.
	var timed []window
	var index []int
	for i, w := range ws {
		if w.id != 0 {
			ids[w.id] = i
		}
		if w.hi > w.lo && (len(timed) == 0 || w.lo >= timed[len(timed)-1].hi) {
			timed = append(timed, w)
			index = append(index, i)
		}
	}
	for _, s := range spans {
		if i, ok := ids[s.window]; ok && s.window != 0 {
			t.counts[i]++
			t.byName++
			continue
		}
		i := place(timed, s)
		if i < 0 {
			t.unplaced++
			continue
		}
		t.counts[index[i]]++
		t.byTime++
	}
	return t
}

// perLimit summarises a tally against limit: the most and the mean
// admitted in a whole window as a fraction of limit, and the windows
// (whole or not) that admitted more than limit.
func (t tally) perLimit(limit int64) (maxFrac, meanFrac float64, over, whole int) {
	var sum float64
	for i, n := range t.counts {
		f := float64(n) / float64(limit)
		if n > limit {
			over++
		}
		maxFrac = max(maxFrac, f)
		if t.windows[i].whole {
			whole++
			sum += f
		}
	}
	if whole > 0 {
		meanFrac = sum / float64(whole)
	}
	return maxFrac, meanFrac, over, whole
}

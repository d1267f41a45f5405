// Package algorithm holds floodgate's rate-limit algorithms as pure state
// transitions: each algorithm's state is a type implementing [State], whose
// methods take the limit, the time in microseconds and a cost. It knows
// nothing of locks, Redis or HTTP.
//
// The memory store runs these methods directly. The Redis store runs Lua
// scripts that perform the same arithmetic step for step (integers below
// 2^53, and the same IEEE double operations where doubles are used), so both
// stores reach the same decisions for the same sequence of requests and
// times; a differential test holds them to it.
//
// Callers validate the limit and the cost first (internal/limitcheck): these
// methods assume 1 <= n <= limit.Quota and a valid limit; a cost of 0 is
// Peek.
package algorithm

import (
	"math"
	"math/bits"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// State is the state of one key under one algorithm. The zero value is a
// key never seen, except for the bucket, which Replenish fills.
type State interface {
	// Allow decides a request of cost n at now and records it if it is
	// admitted. A denied request changes nothing a later decision reads.
	Allow(l floodgate.Limit, now, n int64) floodgate.Decision
	// Peek decides a request of cost 0 at now and changes nothing: it is
	// always admitted, and reports what a decision at now would find
	// (Remaining, ResetAfter; RetryAfter is 0). Envoy's hits_addend 0, a
	// check that counts nothing, is one.
	Peek(l floodgate.Limit, now int64) floodgate.Decision
	// Refund gives back n units of quota that an admitted request took, as
	// floodgate.Store.RefundN describes, never above the full quota. It
	// returns the time from now until the state is fully replenished, as
	// a decision's ResetAfter: 0 when it is already (a state a store then
	// clears, as the Redis scripts delete the key), and otherwise the time
	// a store keeps it for (the expiry the scripts set).
	Refund(l floodgate.Limit, now, n int64) time.Duration
	// Replenish makes the state that of a key never seen at now, fully
	// replenished. Stores call it when the ResetAfter of the state's last
	// write has passed, under whichever limit: the Redis key has expired
	// then, and a later limit (another quota or window) finds nothing.
	Replenish(l floodgate.Limit, now int64)
	// Save returns what Restore needs to undo every Allow since.
	Save() Snapshot
	// Restore undoes every Allow since the Save that returned s.
	Restore(s Snapshot)
	// Usage returns the bytes the state holds outside its own value.
	Usage() int
}

// Snapshot is what a state's Restore needs to undo the decisions made on it
// since its Save. A batch that one of its checks denies is undone this way.
type Snapshot struct{ a, b, c int64 }

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// bucketScale returns the fixed-point units in one token of bucket l, the
// units it adds per microsecond, and the units it holds when full.
func bucketScale(l floodgate.Limit) (unit, perMicro, full int64) {
	unit, perMicro = fixedpoint.Scale(l.Window.Microseconds(), fixedpoint.Refill(l.Quota, l.Refill))
	return unit, perMicro, l.Quota * unit
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// perMicros returns the microseconds a bucket adding perMicro units a
// microsecond takes to add units: most rates add one a microsecond, and
// need no division.
func perMicros(units, perMicro int64) int64 {
	if perMicro == 1 {
		return units
	}
	return ceilDiv(units, perMicro)
}

// Bucket is the state of one token bucket: its level in fixed-point units
// (see package fixedpoint) and the time it was last refilled. A key with no
// state is a full bucket.
type Bucket struct {
	Level int64 // tokens times the limit's unit (bucketScale)
	Last  int64 // microseconds since the Unix epoch
}

// NewBucket returns the state of a key seen for the first time at now: full.
func NewBucket(l floodgate.Limit, now int64) Bucket {
	_, _, full := bucketScale(l)
	return Bucket{Level: full, Last: now}
}

// refilled returns the bucket's level refilled up to now, capped at full
// (a capacity lowered since the state was written caps it), and the time of
// that level. Time never runs backwards for a bucket: a now before Last
// refills nothing.
func (b *Bucket) refilled(full, perMicro, now int64) (level, last int64) {
	level, last = min(b.Level, full), b.Last
	if now > last {
		// The refill, elapsed × perMicro, overflows no int64: a product
		// of 64 bits or more fills any bucket (full is under 2^53).
		if hi, lo := bits.Mul64(uint64(now-last), uint64(perMicro)); hi != 0 || lo >= uint64(full-level) {
			level = full
		} else {
			level += int64(lo)
		}
		last = now
	}
	return level, last
}

// Allow refills the bucket up to now and takes n tokens if it holds them. A
// denied request leaves the state unchanged.
func (b *Bucket) Allow(l floodgate.Limit, now, n int64) floodgate.Decision {
	unit, perMicro, full := bucketScale(l)
	level, last := b.refilled(full, perMicro, now)
	need := n * unit
	d := floodgate.Decision{Limit: l.Quota}
	if level >= need {
		level -= need
		d.Allowed = true
		b.Level, b.Last = level, last
	} else {
		d.RetryAfter = micros(perMicros(need-level, perMicro))
	}
	d.Remaining = level / unit
	d.ResetAfter = micros(perMicros(full-level, perMicro))
	return d
}

// Peek reports the bucket's level at now without taking anything.
func (b *Bucket) Peek(l floodgate.Limit, now int64) floodgate.Decision {
	unit, perMicro, full := bucketScale(l)
	level, _ := b.refilled(full, perMicro, now)
	return floodgate.Decision{Allowed: true, Limit: l.Quota, Remaining: level / unit, ResetAfter: micros(perMicros(full-level, perMicro))}
}

// Refund puts n tokens back, as if a request of cost n admitted just now had
// not been made: the bucket is refilled up to now, then raised by n tokens,
// never above its capacity. A bucket it fills is fully replenished: it
// returns 0.
func (b *Bucket) Refund(l floodgate.Limit, now, n int64) time.Duration {
	unit, perMicro, full := bucketScale(l)
	level, last := b.refilled(full, perMicro, now)
	b.Level, b.Last = min(full, level+n*unit), last
	return micros(perMicros(full-b.Level, perMicro))
}

// Replenish fills the bucket as of now.
func (b *Bucket) Replenish(l floodgate.Limit, now int64) { *b = NewBucket(l, now) }

// Save returns the bucket as it is, for Restore.
func (b *Bucket) Save() Snapshot { return Snapshot{b.Level, b.Last, 0} }

// Restore puts the bucket back as it was at Save.
func (b *Bucket) Restore(s Snapshot) { b.Level, b.Last = s.a, s.b }

// Usage is 0: the bucket holds nothing outside its value.
func (b *Bucket) Usage() int { return 0 }

// Window is the part the fixed window and the sliding-window counter share:
// the start of the current clock-aligned window and the counts of the
// current and previous windows (Previous is unused by the fixed window).
type Window struct {
	Start    int64 // microseconds since the Unix epoch, a multiple of the window
	Current  int64
	Previous int64
}

// roll moves the window state to the window containing now and returns the
// time elapsed in it. A now before Start (time ran backwards) is treated as
// Start.
func (s *Window) roll(w, now int64) (elapsed int64) {
	if now < s.Start {
		return 0
	}
	start := now - now%w
	switch s.Start {
	case start:
	case start - w:
		s.Start, s.Previous, s.Current = start, s.Current, 0
	default:
		s.Start, s.Previous, s.Current = start, 0, 0
	}
	return now - start
}

// Replenish empties the window: a key never seen.
func (s *Window) Replenish(floodgate.Limit, int64) { *s = Window{} }

// Save returns the window as it is, for Restore.
func (s *Window) Save() Snapshot { return Snapshot{s.Start, s.Current, s.Previous} }

// Restore puts the window back as it was at Save.
func (s *Window) Restore(v Snapshot) { s.Start, s.Current, s.Previous = v.a, v.b, v.c }

// Usage is 0: the window holds nothing outside its value.
func (s *Window) Usage() int { return 0 }

// refund takes n back from the count of the window containing now (never
// below zero). For the sliding-window counter, a request counted in the
// window that has just become the previous one is taken from that count.
// It returns the time elapsed in the window containing now.
func (s *Window) refund(w, now, n int64) (elapsed int64) {
	before := s.Start
	e := s.roll(w, now)
	switch {
	case s.Start == before:
		s.Current = max(0, s.Current-n)
	case s.Start == before+w:
		s.Previous = max(0, s.Previous-n)
	}
	return e
}

// Fixed is the state of a fixed window.
type Fixed struct{ Window }

// Refund takes n back from the count of the window containing now (a
// refund after the window has moved on changes nothing), and returns the
// time until that window ends, or 0 if nothing is counted in it.
func (s *Fixed) Refund(l floodgate.Limit, now, n int64) time.Duration {
	w := l.Window.Microseconds()
	if e := s.refund(w, now, n); s.Current > 0 {
		return micros(w - e)
	}
	return 0
}

// Allow counts n against the clock-aligned window containing now.
func (s *Fixed) Allow(l floodgate.Limit, now, n int64) floodgate.Decision {
	w := l.Window.Microseconds()
	next := s.Window
	e := next.roll(w, now)
	d := floodgate.Decision{Limit: l.Quota}
	if next.Current+n <= l.Quota {
		next.Current += n
		d.Allowed = true
		s.Window = next
	} else {
		d.RetryAfter = micros(w - e)
	}
	d.Remaining = max(0, l.Quota-next.Current)
	if next.Current > 0 {
		d.ResetAfter = micros(w - e)
	}
	return d
}

// Peek reports the window containing now without counting anything.
func (s *Fixed) Peek(l floodgate.Limit, now int64) floodgate.Decision {
	w := l.Window.Microseconds()
	next := s.Window
	e := next.roll(w, now)
	d := floodgate.Decision{Allowed: true, Limit: l.Quota, Remaining: max(0, l.Quota-next.Current)}
	if next.Current > 0 {
		d.ResetAfter = micros(w - e)
	}
	return d
}

// counterFits reports whether a request of cost n fits a sliding-window
// counter at elapsed time e into the current window: the previous window's
// count weighted by the share (w-e)/w of it still inside the sliding window,
// plus the current count, plus n, is at most quota. It is computed as
// prev*(w-e) <= (quota-cur-n)*w in doubles, as the Lua script does.
func counterFits(quota, w, prev, cur, n, e int64) bool {
	free := quota - cur - n
	if free < 0 {
		return false
	}
	return float64(prev)*float64(w-e) <= float64(free)*float64(w)
}

// firstFit returns the smallest e in [lo, hi] for which counterFits holds,
// given that it holds at hi. counterFits is monotone in e.
func firstFit(quota, w, prev, cur, n, lo, hi int64) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		if counterFits(quota, w, prev, cur, n, mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Counter is the state of a sliding-window counter.
type Counter struct{ Window }

// Refund takes n back from the count it was counted in, if that is the
// current or the previous window, and returns the time until neither
// window's count weighs (0 if neither has one), as Allow's ResetAfter.
func (s *Counter) Refund(l floodgate.Limit, now, n int64) time.Duration {
	w := l.Window.Microseconds()
	e := s.refund(w, now, n)
	switch {
	case s.Current > 0:
		return micros(2*w - e)
	case s.Previous > 0:
		return micros(w - e)
	}
	return 0
}

// Allow counts n against the clock-aligned window containing now, weighting
// the previous window's count by its overlap with the sliding window that
// ends at now.
func (s *Counter) Allow(l floodgate.Limit, now, n int64) floodgate.Decision {
	w := l.Window.Microseconds()
	next := s.Window
	e := next.roll(w, now)
	d := floodgate.Decision{Limit: l.Quota}
	if counterFits(l.Quota, w, next.Previous, next.Current, n, e) {
		next.Current += n
		d.Allowed = true
		s.Window = next
	} else if l.Quota-next.Current-n >= 0 {
		// Fits later in this window, once the previous window weighs less.
		d.RetryAfter = micros(firstFit(l.Quota, w, next.Previous, next.Current, n, e+1, w) - e)
	} else {
		// Fits in the next window, where this window's count is the previous.
		d.RetryAfter = micros(w - e + firstFit(l.Quota, w, next.Current, 0, n, 0, w))
	}
	weighted := int64(math.Ceil(float64(next.Previous) * float64(w-e) / float64(w)))
	d.Remaining = max(0, l.Quota-next.Current-weighted)
	switch {
	case next.Current > 0:
		d.ResetAfter = micros(2*w - e)
	case next.Previous > 0:
		d.ResetAfter = micros(w - e)
	}
	return d
}

// Peek reports the sliding window ending at now without counting anything.
func (s *Counter) Peek(l floodgate.Limit, now int64) floodgate.Decision {
	w := l.Window.Microseconds()
	next := s.Window
	e := next.roll(w, now)
	weighted := int64(math.Ceil(float64(next.Previous) * float64(w-e) / float64(w)))
	d := floodgate.Decision{Allowed: true, Limit: l.Quota, Remaining: max(0, l.Quota-next.Current-weighted)}
	switch {
	case next.Current > 0:
		d.ResetAfter = micros(2*w - e)
	case next.Previous > 0:
		d.ResetAfter = micros(w - e)
	}
	return d
}

// Log is the state of a sliding-window log: the times of the admitted
// requests still inside the window, oldest first, in a ring buffer. Entries
// of one key sit at distinct microseconds: a request of cost n occupies n
// consecutive microseconds starting at now (or just after the newest entry,
// if that is not earlier), so an entry never leaves the window before the
// request it records would have.
//
// The zero value is an empty log.
type Log struct {
	ring  []int64 // its length a power of two, so that an index wraps by a mask
	head  int     // index of the oldest entry
	count int
}

// Len returns the number of entries in the log.
func (g *Log) Len() int { return g.count }

// Usage returns the bytes of the ring buffer.
func (g *Log) Usage() int { return 8 * cap(g.ring) }

func (g *Log) at(i int) int64 { return g.ring[(g.head+i)&(len(g.ring)-1)] }

// Newest returns the time of the newest entry, or 0 if the log is empty.
func (g *Log) Newest() int64 {
	if g.count == 0 {
		return 0
	}
	return g.at(g.count - 1)
}

// Expire drops the entries that have left the window ending at now: those
// at or before now-w.
func (g *Log) Expire(w, now int64) {
	for g.count > 0 && g.ring[g.head] <= now-w {
		g.head = (g.head + 1) & (len(g.ring) - 1)
		g.count--
	}
	if g.count == 0 {
		g.head = 0
	}
}

func (g *Log) push(t int64) {
	if g.count == len(g.ring) {
		g.resize(max(4, 2*len(g.ring)))
	}
	g.ring[(g.head+g.count)&(len(g.ring)-1)] = t
	g.count++
}

// Allow admits or denies a request of cost n at now against the log, then
// releases ring memory the log no longer needs.
func (g *Log) Allow(l floodgate.Limit, now, n int64) floodgate.Decision {
	w := l.Window.Microseconds()
	g.Expire(w, now)
	count := int64(g.count)
	d := floodgate.Decision{Limit: l.Quota}
	if count+n <= l.Quota {
		first := now
		if count > 0 {
			first = max(now, g.Newest()+1)
		}
		for i := range n {
			g.push(first + i)
		}
		d.Allowed = true
		d.Remaining = l.Quota - count - n
		d.ResetAfter = micros(first + n - 1 + w - now)
	} else {
		// The (count+n-quota)-th oldest entry must leave the window first.
		d.RetryAfter = micros(g.at(int(count+n-l.Quota-1)) + w - now)
		d.Remaining = max(0, l.Quota-count)
		d.ResetAfter = micros(g.Newest() + w - now)
	}
	g.shrink()
	return d
}

// Peek counts the entries inside the window ending at now, changing
// nothing (not even dropping the expired ones).
func (g *Log) Peek(l floodgate.Limit, now int64) floodgate.Decision {
	w := l.Window.Microseconds()
	live := 0
	for i := g.count - 1; i >= 0 && g.at(i) > now-w; i-- {
		live++
	}
	d := floodgate.Decision{Allowed: true, Limit: l.Quota, Remaining: max(0, l.Quota-int64(live))}
	if live > 0 {
		d.ResetAfter = micros(g.Newest() + w - now)
	}
	return d
}

// Refund drops the n newest entries (or all, if fewer), as if the request
// that added them had not been made, and returns the time until the newest
// entry left leaves the window: 0 if there is none, or it has left.
func (g *Log) Refund(l floodgate.Limit, now, n int64) time.Duration {
	g.count -= int(min(n, int64(g.count)))
	if g.count == 0 {
		g.head = 0
		return 0
	}
	return micros(max(0, g.Newest()+l.Window.Microseconds()-now))
}

// Replenish drops every entry, keeping the ring for reuse. Under the limit
// that wrote them they have all left the window by then; under a longer
// window they would count again, but the key has expired in Redis.
func (g *Log) Replenish(floodgate.Limit, int64) { g.count, g.head = 0, 0 }

// Save returns what Restore needs to drop the entries added after it: the
// time of the newest entry and whether there is one. The ring itself is not
// copied.
func (g *Log) Save() Snapshot {
	if g.count == 0 {
		return Snapshot{}
	}
	return Snapshot{g.Newest(), 1, 0}
}

// Restore drops the entries added since Save: they are the ones newer than
// the newest entry then, as Allow places a request after the newest entry.
// The entries that Allow dropped since, for having left the window, stay
// dropped, as after a denied Allow: they were out of the window at that
// Allow's time, so every decision at or after it reads the log the same
// without them.
func (g *Log) Restore(s Snapshot) {
	for g.count > 0 && (s.b == 0 || g.at(g.count-1) > s.a) {
		g.count--
	}
	if g.count == 0 {
		g.head = 0
	}
}

// shrink releases ring memory when the log holds far fewer entries than its
// buffer (after a burst ended), keeping memory proportional to use.
func (g *Log) shrink() {
	if len(g.ring) > 8 && g.count <= len(g.ring)/4 {
		g.resize(ringSize(2 * g.count))
	}
}

// ringSize is the least power of two at or above n, and at least 4.
func ringSize(n int) int {
	if n <= 4 {
		return 4
	}
	return 1 << bits.Len(uint(n-1))
}

// resize moves the entries to a ring of n slots, a power of two.
func (g *Log) resize(n int) {
	ring := make([]int64, n)
	for i := range g.count {
		ring[i] = g.at(i)
	}
	g.ring, g.head = ring, 0
}

var (
	_ State = (*Bucket)(nil)
	_ State = (*Fixed)(nil)
	_ State = (*Counter)(nil)
	_ State = (*Log)(nil)
)

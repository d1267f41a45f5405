package loadgen

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Hist is a log-linear histogram of durations: exact below 32ns,
// then 16 buckets per power of two (within about 3%). Its counters are
// atomic, so one goroutine can record while others read.
type Hist struct {
	counts [buckets]atomic.Uint64
	max    atomic.Int64
}

const buckets = 32 + 59*16

func bucketIndex(ns uint64) int {
	if ns < 32 {
		return int(ns)
	}
	shift := bits.Len64(ns) - 5 // top = ns >> shift is in [16, 32)
	return 32 + (shift-1)*16 + int(ns>>shift) - 16
}

// bucketValue returns the middle of bucket i, in nanoseconds.
func bucketValue(i int) float64 {
	if i < 32 {
		return float64(i)
	}
	shift := (i-32)/16 + 1
	top := uint64((i-32)%16 + 16)
	lo, hi := top<<shift, (top+1)<<shift
	return float64(lo+hi) / 2
}

// Record adds one duration. Only one goroutine may record into a Hist.
func (h *Hist) Record(d time.Duration) {
	ns := max(int64(d), 0)
	h.counts[bucketIndex(uint64(ns))].Add(1)
	if ns > h.max.Load() {
		h.max.Store(ns) // only the recording goroutine writes max
	}
}

// Add adds o's counts into h (h must not be recorded into concurrently).
func (h *Hist) Add(o *Hist) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
}

// Minus returns h - o, counts only: what was recorded between two
// snapshots.
func (h *Hist) Minus(o *Hist) *Hist {
	d := &Hist{}
	for i := range h.counts {
		d.counts[i].Store(h.counts[i].Load() - o.counts[i].Load())
	}
	return d
}

// Count returns the number of durations recorded.
func (h *Hist) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// Quantile returns the q-quantile (nearest rank), 0 when empty.
func (h *Hist) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			v := time.Duration(bucketValue(i))
			if m := time.Duration(h.max.Load()); m > 0 && v > m {
				v = m // never report more than the largest seen
			}
			return v
		}
	}
	return time.Duration(h.max.Load())
}

// Max returns the largest duration recorded.
func (h *Hist) Max() time.Duration { return time.Duration(h.max.Load()) }

package loadgen

import (
	"math"
	"testing"
	"time"
)

func TestHist(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.Quantile(tt.q)
		if rel := math.Abs(float64(got-tt.want)) / float64(tt.want); rel > 1.0/32 {
			t.Errorf("quantile(%v) = %v, want %v within 3%%", tt.q, got, tt.want)
		}
	}
	if got := h.Count(); got != 1000 {
		t.Errorf("count = %d, want 1000", got)
	}
	for _, ns := range []uint64{0, 1, 31, 32, 33, 1000, 1 << 20, 1<<40 + 12345, math.MaxInt64} {
		i := bucketIndex(ns)
		if i < 0 || i >= buckets {
			t.Fatalf("bucketIndex(%d) = %d, out of range", ns, i)
		}
		if v := bucketValue(i); ns > 0 && math.Abs(v-float64(ns))/float64(ns) > 1.0/32 {
			t.Errorf("bucketValue(bucketIndex(%d)) = %v, more than 3%% off", ns, v)
		}
	}
	var empty Hist
	if got := empty.Quantile(0.99); got != 0 {
		t.Errorf("empty quantile = %v, want 0", got)
	}
}

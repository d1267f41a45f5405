package fixedpoint

import "testing"

func TestUnits(t *testing.T) {
	cases := []struct{ w, refill, unit, perMicro int64 }{
		{1_000_000, 10, 100_000, 1},   // 10 per second
		{2_000_000, 1, 2_000_000, 1},  // 1 per 2 seconds
		{1_000_000, 3, 1_000_000, 3},  // 3 per second
		{60_000_000, 100, 600_000, 1}, // 100 per minute
		{7_000_000, 1, 7_000_000, 1},  // 1 per 7 seconds
	}
	for _, c := range cases {
		u, p := Scale(c.w, c.refill)
		if u != c.unit || p != c.perMicro || Unit(c.w, c.refill) != u {
			t.Errorf("w=%d refill=%d: unit %d (Unit %d) per µs %d, want %d and %d", c.w, c.refill, u, Unit(c.w, c.refill), p, c.unit, c.perMicro)
		}
		// One window adds exactly refill tokens.
		if got := c.w * p; got != c.refill*u {
			t.Errorf("w=%d refill=%d: a window adds %d units, want %d", c.w, c.refill, got, c.refill*u)
		}
	}
	if GCD(0, 0) != 1 || GCD(12, 18) != 6 {
		t.Error("GCD")
	}
}

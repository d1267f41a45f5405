// Package fixedpoint is the token bucket's exact arithmetic: a bucket that
// adds refill tokens per window of w microseconds counts its level in units
// of 1/Unit(w, refill) tokens, so that every microsecond adds exactly
// perMicro units (both from Scale), however fractional the rate.
package fixedpoint

// Unit returns the number of fixed-point units in one token of a bucket
// adding refill tokens every w microseconds: w / gcd(w, refill).
func Unit(w, refill int64) int64 { return w / GCD(w, refill) }

// Scale returns Unit(w, refill) and the units such a bucket adds per
// microsecond, refill / gcd(w, refill), finding the divisor once.
func Scale(w, refill int64) (unit, perMicro int64) {
	if refill > 0 && w%refill == 0 { // the common case: one division (the quotient comes with the remainder)
		return w / refill, 1
	}
	g := GCD(w, refill)
	return w / g, refill / g
}

// GCD returns the greatest common divisor of a and b, or 1 when both are 0.
func GCD(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	if a == 0 {
		return 1
	}
	return a
}

// Refill returns the tokens a token bucket of the given quota (capacity)
// and Limit.Refill adds per window: refill, or the quota when refill is 0.
func Refill(quota, refill int64) int64 {
	if refill == 0 {
		return quota
	}
	return refill
}

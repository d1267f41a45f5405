package floodgate

import (
	"errors"
	"testing"
	"time"
)

func TestAlgorithmText(t *testing.T) {
	for i := range algorithmNames[1:] {
		a := Algorithm(i + 1)
		b, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Algorithm
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Fatalf("round trip of %s gave %v, %v", a, back, err)
		}
	}
	var a Algorithm
	if err := a.UnmarshalText([]byte("leaky_bucket")); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("UnmarshalText(leaky_bucket) = %v, want ErrInvalidLimit", err)
	}
	if _, err := Algorithm(0).MarshalText(); err == nil {
		t.Fatal("MarshalText of the zero Algorithm succeeded")
	}
}

// TestValidateExactArithmetic: a token bucket is valid while its capacity
// in fixed-point units is at most 2^53. Validate first checks the window
// times the capacity, which bounds it, and finds the unit only when that
// is over: both sides of 2^53 are covered on each path.
func TestValidateExactArithmetic(t *testing.T) {
	const days300 = 300 * 24 * time.Hour
	cases := []struct {
		name  string
		limit Limit
		valid bool
	}{
		{"window times capacity fits", NewTokenBucket(1000, 1000, time.Hour), true},
		{"window times capacity exactly 2^53", NewTokenBucket(1<<20, 1, 1<<33*time.Microsecond), true},
		{"window times capacity just over, units too", NewTokenBucket(1<<20, 1, (1<<33+1)*time.Microsecond), false},
		// The window times the capacity is over 2^53 below, so the unit
		// (the window over gcd(window, refill)) decides.
		{"units far within", NewTokenBucket(1<<20, 1<<20, days300), true},
		{"units exactly 2^53", NewTokenBucket(1<<20, 2, 1<<34*time.Microsecond), true},
		{"units one unit of the capacity over 2^53", NewTokenBucket(1<<20, 2, (1<<34+2)*time.Microsecond), false},
		{"units far over", NewTokenBucket(1<<40, 1, days300), false},
	}
	for _, c := range cases {
		err := c.limit.Validate()
		if c.valid != (err == nil) {
			t.Errorf("%s: Validate() = %v, want valid %v", c.name, err, c.valid)
		}
		var le *LimitError
		if err != nil && (!errors.As(err, &le) || le.Field != "Quota") {
			t.Errorf("%s: Validate() = %v, want a LimitError on Quota", c.name, err)
		}
	}
}

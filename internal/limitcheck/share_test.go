package limitcheck_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

func TestShare(t *testing.T) {
	bucket := floodgate.NewTokenBucket(100, 10, time.Second)
	for _, tc := range []struct {
		name  string
		limit floodgate.Limit
		share float64
		want  floodgate.Limit
		err   string
	}{
		{"window quarter", floodgate.PerMinute(100), 0.25, floodgate.PerMinute(25), ""},
		{"window third", floodgate.PerMinute(300), 1.0 / 3, floodgate.PerMinute(100), ""},
		{"window rounds down", floodgate.PerMinute(10), 1.0 / 3, floodgate.PerMinute(3), ""},
		{"window never 0", floodgate.PerMinute(2), 0.25, floodgate.PerMinute(1), ""},
		{"whole", floodgate.PerMinute(7), 1, floodgate.PerMinute(7), ""},
		{"counter", floodgate.NewLimit(floodgate.SlidingWindowCounter, 40, time.Second), 0.5, floodgate.NewLimit(floodgate.SlidingWindowCounter, 20, time.Second), ""},
		{"fixed", floodgate.NewLimit(floodgate.FixedWindow, 9, time.Hour), 1.0 / 3, floodgate.NewLimit(floodgate.FixedWindow, 3, time.Hour), ""},
		{"bucket whole refill", bucket, 0.5, floodgate.NewTokenBucket(50, 5, time.Second), ""},
		{"bucket fractional refill", bucket, 0.25, floodgate.NewTokenBucket(25, 10, 4*time.Second), ""},
		{"bucket third", bucket, 1.0 / 3, floodgate.NewTokenBucket(33, 10, 3*time.Second), ""},
		{"bucket refill 0 means quota", floodgate.NewLimit(floodgate.TokenBucket, 8, time.Second), 0.25, floodgate.NewTokenBucket(2, 2, time.Second), ""},
		{"bucket stretched too far", floodgate.NewTokenBucket(10, 1, 200*24*time.Hour), 0.25, floodgate.Limit{}, "must be at most 366 days"},
		{"share 0", floodgate.PerMinute(10), 0, floodgate.Limit{}, "above 0"},
		{"share above 1", floodgate.PerMinute(10), 1.5, floodgate.Limit{}, "at most 1"},
		{"share NaN", floodgate.PerMinute(10), nan(), floodgate.Limit{}, "above 0"},
		{"invalid limit", floodgate.Limit{}, 0.5, floodgate.Limit{}, "invalid limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := limitcheck.Share(tc.limit, tc.share)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Share(%s, %v) = %s, %v; want an error containing %q", tc.limit, tc.share, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Share(%s, %v) = %s (%+v), %v; want %s", tc.limit, tc.share, got, got, err, tc.want)
			}
		})
	}
}

func nan() float64 { return math.NaN() }

// Share is what one of four instances enforces alone while the store
// is unavailable, as the engine's FailLocal does at a share of 1/4.
func ExampleShare() {
	for _, l := range []floodgate.Limit{
		floodgate.PerMinute(100),
		floodgate.PerMinute(2),
		floodgate.NewTokenBucket(100, 10, time.Second),
	} {
		local, err := limitcheck.Share(l, 1.0/4)
		if err != nil {
			panic(err)
		}
		fmt.Println(local)
	}
	// Output:
	// 25 per 1m0s (sliding_window_log)
	// 1 per 1m0s (sliding_window_log)
	// capacity 25, 10 per 4s (token_bucket)
}

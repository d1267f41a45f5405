package floodgate_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestKeyHoldsOneLimit is the key rule of the package documentation, on
// every store: limits of one algorithm on the same key count the same
// requests, limits of different algorithms do not, and keys namespaced by
// limit keep them apart.
func TestKeyHoldsOneLimit(t *testing.T) {
	minute, hour, second := floodgate.PerMinute(10), floodgate.PerHour(1000), floodgate.PerSecond(2)
	bucket := floodgate.NewTokenBucket(10, 10, time.Minute)
	for _, tc := range []struct {
		name                string
		minuteKey, otherKey string
		other               floodgate.Limit
		wantAllowed         bool
		wantRemaining       int64
	}{
		{"same key, same algorithm: shared", "user-42", "user-42", hour, true, 996},
		{"same key, same algorithm, shorter window: denied", "user-42", "user-42", second, false, 0},
		{"same key, another algorithm: apart", "user-42", "user-42", bucket, true, 9},
		{"namespaced keys: apart", "per-minute|user-42", "per-hour|user-42", hour, true, 999},
		{"namespaced keys, shorter window: apart", "per-minute|user-42", "per-second|user-42", second, true, 1},
	} {
		for _, st := range stores() {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				s := st.make(t)
				for range 3 {
					if d, err := s.Allow(t.Context(), tc.minuteKey, minute); err != nil || !d.Allowed {
						t.Fatalf("PerMinute(10): %+v, %v", d, err)
					}
				}
				d, err := s.Allow(t.Context(), tc.otherKey, tc.other)
				if err != nil || d.Allowed != tc.wantAllowed || d.Remaining != tc.wantRemaining {
					t.Fatalf("%s on %q after 3 under PerMinute(10) on %q: %+v, %v; want allowed=%v remaining=%d",
						tc.other, tc.otherKey, tc.minuteKey, d, err, tc.wantAllowed, tc.wantRemaining)
				}
			})
		}
	}
}

package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestWindowsUnderContention: many callers on one hot key, on the system
// clock, never get more than the quota admitted in any window of a fixed
// window or more than a bucket allows: a caller that read the time and
// then waited for the key decides at a time no older than the state's. Each
// admission is put in its window by its own ResetAfter (the window's end),
// so the test's timing does not matter.
func TestWindowsUnderContention(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a second")
	}
	const quota, w = 2000, 100 * time.Millisecond
	s := memory.New()
	limit := floodgate.NewLimit(floodgate.FixedWindow, quota, w)
	var mu sync.Mutex
	perWindow := map[int64]int{}
	deadline := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range 192 {
		wg.Go(func() {
			local := map[int64]int{}
			for time.Now().Before(deadline) {
				t0 := time.Now()
				d, err := s.AllowN(context.Background(), "hot", limit, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					// The window's end, to the nearest window: the call's
					// own time is within a few ms of t0.
					end := t0.Add(d.ResetAfter).UnixMicro()
					local[(end+w.Microseconds()/2)/w.Microseconds()]++
				}
			}
			mu.Lock()
			for k, n := range local {
				perWindow[k] += n
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for k, n := range perWindow {
		if n > quota {
			t.Errorf("window %d admitted %d, over the quota of %d", k, n, quota)
		}
	}
	if len(perWindow) < 5 {
		t.Errorf("admissions in %d windows, want about 10", len(perWindow))
	}
}

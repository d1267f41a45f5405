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
// window: a caller that read the time and then waited for the key decides
// at a time no older than the state's. Each admission is put in its window
// exactly: the store decided at some time between the call's start and
// end, so the window's end (decision time + ResetAfter, a multiple of the
// window) is the one multiple in [start+ResetAfter, end+ResetAfter]. A
// call that took a whole window or more (a goroutine descheduled on a
// loaded machine) cannot be placed and is counted apart.
func TestWindowsUnderContention(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a second")
	}
	const quota, w = 2000, 100 * time.Millisecond
	wus := w.Microseconds()
	// The store's time is the wall time at New plus the monotonic time
	// since; base and time.Since(base) give the same to a microsecond.
	base := time.Now()
	baseMicro := base.UnixMicro()
	s := memory.New()
	storeNow := func() int64 { return baseMicro + time.Since(base).Microseconds() }
	limit := floodgate.NewLimit(floodgate.FixedWindow, quota, w)
	var mu sync.Mutex
	perWindow := map[int64]int{}
	unplaced, admitted := 0, 0
	deadline := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range 192 {
		wg.Go(func() {
			local := map[int64]int{}
			lost, got := 0, 0
			for time.Now().Before(deadline) {
				t0 := storeNow()
				d, err := s.AllowN(context.Background(), "hot", limit, 1)
				t1 := storeNow()
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					continue
				}
				got++
				// 2 µs of slack for the two microsecond truncations.
				ra := d.ResetAfter.Microseconds()
				lo, hi := t0+ra-2, t1+ra+2
				first := (lo + wus - 1) / wus * wus
				if first+wus <= hi {
					lost++
					continue
				}
				local[first/wus]++
			}
			mu.Lock()
			for k, n := range local {
				perWindow[k] += n
			}
			unplaced += lost
			admitted += got
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
	if unplaced*10 > admitted {
		t.Errorf("%d of %d admissions took a window or longer to answer and could not be placed", unplaced, admitted)
	}
}

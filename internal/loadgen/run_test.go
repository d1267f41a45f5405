package loadgen

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestRunCounts(t *testing.T) {
	var n atomic.Int64
	run := Start(context.Background(), Load{Concurrency: 4, Keys: 3, Duration: time.Minute, Requests: 300, Timeout: time.Second},
		func(_ context.Context, key string) (bool, error) {
			switch i := n.Add(1); {
			case i%3 == 0:
				return false, errors.New("boom")
			case key == "0":
				return false, nil
			}
			return true, nil
		})
	r := run.Wait()
	if r.Requests() != 300 || r.Latency.Count() != 300 || r.Errors != 100 || r.FirstError != "boom" || r.Interrupted {
		t.Fatalf("result %+v, want 300 requests, 100 errors", r)
	}
	if r.Allowed == 0 || r.Denied == 0 {
		t.Errorf("allowed %d, denied %d: want both", r.Allowed, r.Denied)
	}
}

// TestRunInterrupted runs in a synctest bubble: its clock moves only when
// every goroutine waits, so the 1ms requests and the 20ms before the cancel
// take no real time, however loaded the machine.
func TestRunInterrupted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		run := Start(ctx, Load{Concurrency: 2, Keys: 1, Duration: time.Minute, Timeout: time.Second},
			func(context.Context, string) (bool, error) { time.Sleep(time.Millisecond); return true, nil })
		time.Sleep(20 * time.Millisecond)
		cancel()
		if r := run.Wait(); !r.Interrupted || r.Requests() == 0 {
			t.Fatalf("result %+v, want interrupted after some requests", r)
		}
	})
}

// TestRunDuration: the run stops by itself once its duration has passed.
func TestRunDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := Start(context.Background(), Load{Concurrency: 2, Keys: 1, Duration: time.Second, Timeout: time.Second},
			func(context.Context, string) (bool, error) { time.Sleep(10 * time.Millisecond); return true, nil })
		r := run.Wait()
		if r.Interrupted || r.Requests() < 2*99 || r.Requests() > 2*101 {
			t.Fatalf("result %+v, want about 200 requests (2 workers x 1s / 10ms), not interrupted", r)
		}
		if r.Elapsed < time.Second || r.Elapsed > time.Second+20*time.Millisecond {
			t.Errorf("elapsed %s, want the 1s duration and one request more at most", r.Elapsed)
		}
	})
}

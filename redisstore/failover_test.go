package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestClusterFailover: on a 3+3 cluster under 64 callers, one primary is
// killed (SIGKILL) and its replica promoted (CLUSTER FAILOVER TAKEOVER, as
// an operator or an orchestrator does when the primary is gone for good).
// While the primary is dead its keys' calls fail as outages
// (ErrStoreUnavailable, which rules answer by their failure mode) within
// their timeout, never with another error and never by hanging; the other
// primaries' keys are decided throughout; once the replica is promoted the
// store finds it and decides its keys again, and limits on it are exact
// again: a fresh key flooded by 64 callers admits exactly its quota.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover")
	}
	t.Parallel() // a cluster of its own; see helpers_test.go
	const timeout = 2 * time.Second
	cluster, s := spawnClusterStore(t, timeout)
	victim := cluster.Nodes[0]
	always := floodgate.NewLimit(floodgate.SlidingWindowLog, 1<<20, time.Hour)

	const callers = 64
	var (
		stop                  atomic.Bool
		wg                    sync.WaitGroup
		otherOK, otherBad     atomic.Int64
		victimOK, victimOut   atomic.Int64
		victimBad             atomic.Int64
		maxTook               atomic.Int64
		promoted              atomic.Bool
		decidedAfterPromotion atomic.Int64
		mu                    sync.Mutex
		badErrs               []error
	)
	for i := range callers {
		node := cluster.Nodes[i%3]
		id := idOn(s, cluster, node, "failover-"+strconv.Itoa(i)+"-", always.Algorithm)
		wg.Go(func() {
			for !stop.Load() {
				start := time.Now()
				d, err := s.Allow(context.Background(), id, always)
				took := time.Since(start)
				for {
					m := maxTook.Load()
					if int64(took) <= m || maxTook.CompareAndSwap(m, int64(took)) {
						break
					}
				}
				switch {
				case node != victim && err == nil && d.Allowed:
					otherOK.Add(1)
				case node != victim:
					otherBad.Add(1)
					mu.Lock()
					badErrs = append(badErrs, err)
					mu.Unlock()
				case err == nil && d.Allowed:
					victimOK.Add(1)
					if promoted.Load() {
						decidedAfterPromotion.Add(1)
					}
				case errors.Is(err, floodgate.ErrStoreUnavailable):
					victimOut.Add(1)
					time.Sleep(time.Millisecond) // an open breaker answers at once
				default:
					victimBad.Add(1)
					mu.Lock()
					badErrs = append(badErrs, err)
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Second)
	victim.Kill()
	time.Sleep(time.Second) // calls for its keys fail meanwhile
	if err := cluster.Replicas[0].Do(t, "CLUSTER", "FAILOVER", "TAKEOVER").Error(); err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("CLUSTER FAILOVER TAKEOVER on the replica %s: %v", cluster.Replicas[0].Addr, err)
	}
	promoted.Store(true)
	promotedAt := time.Now()
	deadline := promotedAt.Add(20 * time.Second)
	for decidedAfterPromotion.Load() < callers && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	recovery := time.Since(promotedAt)
	stop.Store(true)
	wg.Wait()
	t.Logf("other primaries: %d decided, %d failed; the victim's keys: %d decided (%d after the promotion, reached %s after it), %d outages, %d other errors; the longest call %s",
		otherOK.Load(), otherBad.Load(), victimOK.Load(), decidedAfterPromotion.Load(), recovery.Round(time.Millisecond), victimOut.Load(), victimBad.Load(), time.Duration(maxTook.Load()))

	if otherBad.Load() != 0 || otherOK.Load() == 0 {
		t.Errorf("the other primaries' keys: %d decided, %d failed (%v); want every call decided", otherOK.Load(), otherBad.Load(), badErrs)
	}
	if victimBad.Load() != 0 {
		t.Errorf("the victim's keys: %d errors that are not outages (%v); want only ErrStoreUnavailable", victimBad.Load(), badErrs)
	}
	if victimOut.Load() == 0 {
		t.Error("no call for the victim's keys failed while it was dead")
	}
	if got := decidedAfterPromotion.Load(); got < callers {
		t.Errorf("%d calls for the victim's keys decided in the 20s after the promotion, want at least %d", got, callers)
	}
	if took := time.Duration(maxTook.Load()); took > timeout+hangMargin {
		t.Errorf("the longest call took %s, want at most the timeout %s + %s", took, timeout, hangMargin)
	}

	// Exact again on the promoted primary.
	quota := floodgate.PerMinute(100)
	id := idOn(s, cluster, victim, "after-failover-", quota.Algorithm) // the victim's slots: the promoted replica's now
	var admitted, denied atomic.Int64
	for range callers {
		wg.Go(func() {
			for range 5 {
				d, err := s.Allow(context.Background(), id, quota)
				switch {
				case err != nil:
					t.Errorf("after the failover: %v", err)
				case d.Allowed:
					admitted.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 100 || denied.Load() != callers*5-100 {
		t.Errorf("a fresh key on the promoted primary: %d admitted, %d denied; want exactly 100 and %d", admitted.Load(), denied.Load(), callers*5-100)
	}
}

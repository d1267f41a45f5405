package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/callbound"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// blockingBound is how long past its timeout a store call may take when
// Redis hangs: scheduling slack on a loaded 2-core machine, not a speed
// target. The calls are expected to return right at their timeout.
const blockingBound = 250 * time.Millisecond

// callTimeout is the per-call timeout of the stores in these tests.
const callTimeout = 100 * time.Millisecond

// checkUnavailable calls Allow and checks that it fails with
// ErrStoreUnavailable within callTimeout + blockingBound.
func checkUnavailable(t *testing.T, s *Store, id string, l floodgate.Limit) {
	t.Helper()
	start := time.Now()
	d, err := s.Allow(t.Context(), id, l)
	elapsed := time.Since(start)
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || d.Allowed {
		t.Errorf("Allow(%q) on a dead or hung Redis = %+v, %v; want ErrStoreUnavailable", id, d, err)
	}
	if elapsed > callTimeout+blockingBound {
		t.Errorf("Allow(%q) blocked %s with a %s timeout, want at most %s", id, elapsed, callTimeout, callTimeout+blockingBound)
	}
	t.Logf("Allow(%q) returned in %s: %v", id, elapsed, err)
}

// eventually retries Allow until it succeeds, for up to 10s.
func eventually(t *testing.T, s *Store, id string, l floodgate.Limit) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Allow(t.Context(), id, l)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Allow(%q) still failing 10s after Redis came back: %v", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHungPrimary: a store call against a cluster primary stopped with
// SIGSTOP returns within its timeout with ErrStoreUnavailable, the other
// primaries keep answering, and the store recovers after SIGCONT. The
// cluster is spawned for this test: the shared harness is never stopped.
func TestHungPrimary(t *testing.T) {
	cluster := redistest.SpawnCluster(t, 3)
	s, err := New(Config{Addrs: cluster.Addrs(), Mode: ModeCluster, Timeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := floodgate.PerMinute(1000)
	// One identity per node, warmed up so every connection exists.
	ids := make([]string, len(cluster.Nodes))
	for i := 0; slices.Contains(ids, ""); i++ {
		id := "id" + strconv.Itoa(i)
		node := cluster.NodeForSlot(keySlot(s.Key(id, l.Algorithm)))
		if j := slices.Index(cluster.Nodes, node); ids[j] == "" {
			ids[j] = id
		}
	}
	for _, id := range ids {
		if _, err := s.Allow(t.Context(), id, l); err != nil {
			t.Fatalf("warm-up Allow(%q): %v", id, err)
		}
	}

	hung := cluster.Nodes[1]
	hung.Stop(t)
	stopped := true
	defer func() {
		if stopped {
			hung.Cont(t)
		}
	}()
	// Once alone (a single call on an idle connection) and then with
	// concurrent callers (pipelined on one connection).
	checkUnavailable(t, s, ids[1], l)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { checkUnavailable(t, s, ids[1], l) })
	}
	wg.Wait()
	for _, i := range []int{0, 2} {
		if _, err := s.Allow(t.Context(), ids[i], l); err != nil {
			t.Errorf("Allow on a healthy primary while another hangs: %v", err)
		}
	}
	hung.Cont(t)
	stopped = false
	eventually(t, s, ids[1], l)
}

// TestHungStandalone: the same for a single server, including a call whose
// caller's own context has a later deadline, and calls whose caller's
// deadline comes before the store's timeout.
func TestHungStandalone(t *testing.T) {
	server := redistest.Spawn(t)
	s, err := New(Config{Addrs: []string{server.Addr}, Timeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	slow, err := New(Config{Addrs: []string{server.Addr}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	l := floodgate.NewTokenBucket(10, 1, time.Second)
	for _, st := range []*Store{s, slow} {
		if _, err := st.Allow(t.Context(), "k", l); err != nil {
			t.Fatal(err)
		}
	}
	server.Stop(t)
	checkUnavailable(t, s, "k", l)
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	start := time.Now()
	if err := s.RefundN(ctx, "k", l, 1); !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RefundN on a hung server = %v, want ErrStoreUnavailable wrapping context.DeadlineExceeded", err)
	}
	if err := s.Reset(ctx, "k", l); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Reset on a hung server = %v, want ErrStoreUnavailable", err)
	}
	if elapsed := time.Since(start); elapsed > 2*callTimeout+blockingBound {
		t.Errorf("RefundN and Reset blocked %s in all, want at most %s", elapsed, 2*callTimeout+blockingBound)
	}
	// A caller's deadline before the store's timeout bounds the call alone
	// (the store sets no second one): the calls end at the caller's.
	short, cancelShort := context.WithTimeout(t.Context(), callTimeout)
	defer cancelShort()
	start = time.Now()
	if _, err := slow.Allow(short, "k", l); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Allow under the caller's deadline on a hung server = %v, want ErrStoreUnavailable", err)
	}
	if err := slow.RefundN(short, "k", l, 1); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("RefundN under the caller's deadline on a hung server = %v, want ErrStoreUnavailable", err)
	}
	if elapsed := time.Since(start); elapsed > callTimeout+blockingBound {
		t.Errorf("calls under a %s caller deadline blocked %s, want at most %s", callTimeout, elapsed, callTimeout+blockingBound)
	}
	server.Cont(t)
	eventually(t, s, "k", l)
}

// TestDeadServer: a killed server is ErrStoreUnavailable at once, and New
// fails the same way when nothing listens.
func TestDeadServer(t *testing.T) {
	server := redistest.Spawn(t)
	s, err := New(Config{Addrs: []string{server.Addr}, Timeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := floodgate.PerSecond(5)
	if _, err := s.Allow(t.Context(), "k", l); err != nil {
		t.Fatal(err)
	}
	server.Kill()
	time.Sleep(50 * time.Millisecond) // let the process die
	for range 3 {
		checkUnavailable(t, s, "k", l)
	}
	if _, err := New(Config{Addrs: []string{server.Addr}}); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("New with nothing listening = %v, want ErrStoreUnavailable", err)
	}
}

// TestCallBound: a call the engine makes in the background carries a
// bound of its own for the store (internal/callbound), in place of the
// store's timeout: through a proxy that adds 80 ms to a round trip, a call
// under a 20 ms timeout fails and the same call with a bound of 2 s is
// decided.
func TestCallBound(t *testing.T) {
	addr := redistest.DelayProxy(t, redistest.StandaloneAddr(t), 40*time.Millisecond)
	s, err := New(Config{Addrs: []string{addr}, KeyPrefix: uniquePrefix(t), Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	l := floodgate.NewLimit(floodgate.FixedWindow, 10, time.Minute)
	bounded := callbound.With(t.Context(), 2*time.Second)
	for i, ctx := range []context.Context{bounded, t.Context(), bounded} {
		d, err := s.Allow(ctx, "k", l)
		switch {
		case ctx == bounded && (err != nil || !d.Allowed):
			t.Errorf("call %d, with a bound of 2s: %+v, %v; want admitted", i+1, d, err)
		case ctx != bounded && !errors.Is(err, floodgate.ErrStoreUnavailable):
			t.Errorf("call %d, under the 20ms timeout through 80ms round trips: %+v, %v; want ErrStoreUnavailable", i+1, d, err)
		}
	}
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// hangMargin is how long past its timeout a call may take while Redis
// hangs in these tests: scheduling slack for 256 goroutines under -race
// on a 2-core machine shared with other work (calls that fail at once,
// on an open breaker, were seen to take over a second at a load average
// of 20). Before the in-flight bound, calls blocked for about 10s.
const hangMargin = 2 * time.Second

// logBuffer collects a store's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// load is a closed-loop load of callers deciding through the engine, each
// on an identity of its own under a sliding-window log generous enough
// that every decided call is admitted, so the log's length counts exactly
// what the store charged.
type load struct {
	s       *Store
	eng     *decide.Engine
	ids     []string // one per caller
	limit   floodgate.Limit
	maxTook atomic.Int64 // the longest call, ns
	maxAt   atomic.Int64 // when it started, ns after base
	maxErr  atomic.Pointer[string]
	base    time.Time
	// per caller: calls admitted by the store, and calls answered by the
	// failure mode (open or closed) while the hang was under way
	charged []atomic.Int64
	stop    atomic.Bool
	wg      sync.WaitGroup

	// counts during the hang (set to 1 in hanging): per node group
	hanging             atomic.Bool
	hungOK, hungBad     atomic.Int64 // callers whose key is on a hung node: failure-mode answers, other answers
	otherOK, otherBad   atomic.Int64 // callers on healthy nodes: decided, failed
	recovered           []atomic.Bool
	resumedAfterHang    atomic.Int64
	calls               atomic.Int64
	wrongFailureAnswers atomic.Int64
}

// run starts one caller per identity; hung(i) says whether caller i's key
// is on the node that will hang. Even callers fail open, odd ones closed.
func (l *load) run(hung func(i int) bool) {
	l.base = time.Now()
	l.charged = make([]atomic.Int64, len(l.ids))
	l.recovered = make([]atomic.Bool, len(l.ids))
	for i, id := range l.ids {
		mode := decide.FailOpen
		if i%2 == 1 {
			mode = decide.FailClosed
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			checks := []decide.Check{{Rule: "r", Key: id, Limit: l.limit, Failure: mode}}
			for !l.stop.Load() {
				start := time.Now()
				hanging := l.hanging.Load()
				r := l.eng.Decide(context.Background(), checks)
				took := time.Since(start)
				l.calls.Add(1)
				for {
					m := l.maxTook.Load()
					if int64(took) <= m {
						break
					}
					if l.maxTook.CompareAndSwap(m, int64(took)) {
						l.maxAt.Store(int64(start.Sub(l.base)))
						msg := fmt.Sprint(r.Outcomes[0].Err)
						l.maxErr.Store(&msg)
						break
					}
				}
				o := r.Outcomes[0]
				decided := o.Decided && o.Verdict == decide.Admitted
				if decided {
					l.charged[i].Add(1)
				}
				if !decided && o.Verdict != decide.Unavailable {
					l.wrongFailureAnswers.Add(1) // an error that is not an outage, or a denial
				}
				if o.Verdict == decide.Unavailable && (mode == decide.FailOpen) != r.Allowed() {
					l.wrongFailureAnswers.Add(1)
				}
				if hanging && l.hanging.Load() {
					switch {
					case hung(i) && !decided:
						l.hungOK.Add(1)
					case hung(i):
						l.hungBad.Add(1)
					case decided:
						l.otherOK.Add(1)
					default:
						l.otherBad.Add(1)
					}
				}
				if !hanging && !l.hanging.Load() && decided {
					l.recovered[i].Store(true)
				}
				if !decided {
					time.Sleep(100 * time.Millisecond) // a client backing off, not a spin on fast failures
				}
			}
		}()
	}
}

// slowest describes the longest call: when it started, relative to the
// moment Redis stopped, and its error.
func (l *load) slowest(stopped time.Duration) string {
	e := ""
	if p := l.maxErr.Load(); p != nil {
		e = *p
	}
	return fmt.Sprintf("it started %s after SIGSTOP, with the error %q", time.Duration(l.maxAt.Load())-stopped, e)
}

// phantoms stops the callers, waits for Redis to run whatever it still
// holds, and returns the callers whose log holds more entries than the
// store admitted, with the excess of each.
func (l *load) phantoms(t *testing.T) map[int]int64 {
	t.Helper()
	l.stop.Store(true)
	l.wg.Wait()
	time.Sleep(500 * time.Millisecond)
	out := map[int]int64{}
	for i, id := range l.ids {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		n, err := l.s.client.Do(ctx, l.s.client.B().Zcard().Key(l.s.Key(id, l.limit.Algorithm)).Build()).AsInt64()
		cancel()
		if err != nil {
			t.Fatalf("ZCARD of caller %d: %v", i, err)
		}
		if extra := n - l.charged[i].Load(); extra != 0 {
			out[i] = extra
		}
	}
	return out
}

// waitRecovered waits until every caller has been decided by the store
// since the hang ended, for up to 10s.
func (l *load) waitRecovered(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		missing := 0
		for i := range l.recovered {
			if !l.recovered[i].Load() {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers not decided by the store 10s after Redis came back", missing, len(l.recovered))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHangUnderLoad: with 256 callers deciding through the engine, a
// standalone Redis stopped with SIGSTOP for 15s costs each call at most its
// timeout (plus scheduling slack), every call during the hang gets its
// failure mode's answer (fail-open admits, fail-closed answers
// unavailable), the breaker opens and says so in Health, decisions resume
// after SIGCONT, and no caller is charged for more than the store
// admitted, but for the one call each had in Redis at the moment it
// stopped.
func TestHangUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15s hang")
	}
	t.Parallel() // a server of its own; see helpers_test.go
	server := redistest.Spawn(t)
	var logs logBuffer
	// Calls after the hang must not miss their timeout on a loaded
	// machine (a call that misses it may be charged: see phantoms).
	const timeout = time.Second
	s, err := New(Config{Addrs: []string{server.Addr}, Mode: ModeStandalone, Timeout: timeout, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng, err := decide.New(s, decide.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l := &load{s: s, eng: eng, limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 1<<20, time.Hour)}
	for i := range 256 {
		l.ids = append(l.ids, "caller-"+strconv.Itoa(i))
	}
	l.run(func(int) bool { return true })
	time.Sleep(time.Second)

	server.Stop(t)
	stopped := time.Since(l.base)
	time.Sleep(2 * timeout) // the calls in flight when it stopped time out
	l.hanging.Store(true)
	time.Sleep(15 * time.Second)
	h := s.Health()
	l.hanging.Store(false)
	server.Cont(t)
	l.waitRecovered(t)
	ph := l.phantoms(t)

	if took := time.Duration(l.maxTook.Load()); took > timeout+hangMargin {
		t.Errorf("the longest call took %s, want at most the timeout %s + %s; %s", took, timeout, hangMargin, l.slowest(stopped))
	}
	if l.hungOK.Load() == 0 || l.hungBad.Load() != 0 || l.wrongFailureAnswers.Load() != 0 {
		t.Errorf("during the hang: %d failure-mode answers, %d decided by the store; %d wrong failure-mode answers overall; want only failure-mode answers",
			l.hungOK.Load(), l.hungBad.Load(), l.wrongFailureAnswers.Load())
	}
	if len(h.Nodes) != 1 || h.Nodes[0].Available || h.Nodes[0].Opens == 0 || h.Available() {
		t.Errorf("Health during the hang = %+v; want the node unavailable, its breaker opened", h)
	}
	if !strings.Contains(logs.String(), "circuit breaker open") || !strings.Contains(logs.String(), "circuit breaker closed") {
		t.Errorf("the store's log does not say the breaker opened and closed:\n%s", logs.String())
	}
	if h := s.Health(); !h.Available() {
		t.Errorf("Health after the hang = %+v; want available", h)
	}
	for i, extra := range ph {
		if extra != 1 {
			t.Errorf("caller %d: charged %d more than the store admitted, want at most the 1 call in Redis when it stopped", i, extra)
		}
	}
	info, _ := do(t, s.client, "INFO", "errorstats").ToString()
	t.Logf("%d calls, the longest %s (%s); during the hang %d failure-mode answers; %d callers charged for the call Redis ran as it stopped; %d calls refused past their deadline (errorstat_DEADLINE); Health: %+v",
		l.calls.Load(), time.Duration(l.maxTook.Load()), l.slowest(stopped), l.hungOK.Load(), len(ph), infoField(info, "errorstat_DEADLINE:", "count="), h)
}

// TestHungClusterPrimary: on a 3+3 cluster, with 256 callers spread over
// the primaries, one primary stopped with SIGSTOP for 15s costs its keys'
// calls at most their timeout, with their failure mode's answer, while
// every call for the other primaries' keys is decided by the store.
func TestHungClusterPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15s hang")
	}
	t.Parallel() // a cluster of its own; see helpers_test.go
	// Healthy nodes' calls must never miss it, even under -race on a
	// machine loaded many times over.
	const timeout = 2 * time.Second
	cluster, s := spawnClusterStore(t, timeout)
	eng, err := decide.New(s, decide.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l := &load{s: s, eng: eng, limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 1<<20, time.Hour)}
	hungNode := cluster.Nodes[0]
	onNode := make([]int, 256) // the index of each caller's primary
	for i := range 256 {
		l.ids = append(l.ids, idOn(s, cluster, cluster.Nodes[i%3], "caller-"+strconv.Itoa(i)+"-", l.limit.Algorithm))
		onNode[i] = i % 3
	}
	l.run(func(i int) bool { return cluster.Nodes[onNode[i]] == hungNode })
	time.Sleep(time.Second)

	hungNode.Stop(t)
	stopped := time.Since(l.base)
	time.Sleep(2 * timeout)
	l.hanging.Store(true)
	time.Sleep(15 * time.Second)
	h := s.Health()
	l.hanging.Store(false)
	hungNode.Cont(t)
	l.waitRecovered(t)
	ph := l.phantoms(t)

	if took := time.Duration(l.maxTook.Load()); took > timeout+hangMargin {
		t.Errorf("the longest call took %s, want at most the timeout %s + %s; %s", took, timeout, hangMargin, l.slowest(stopped))
	}
	if l.hungOK.Load() == 0 || l.hungBad.Load() != 0 || l.wrongFailureAnswers.Load() != 0 {
		t.Errorf("the hung primary's keys: %d failure-mode answers, %d decided; %d wrong failure-mode answers; want only failure-mode answers",
			l.hungOK.Load(), l.hungBad.Load(), l.wrongFailureAnswers.Load())
	}
	if l.otherOK.Load() == 0 || l.otherBad.Load() != 0 {
		t.Errorf("the other primaries' keys during the hang: %d decided, %d failed; want every call decided", l.otherOK.Load(), l.otherBad.Load())
	}
	down := 0
	for _, n := range h.Nodes {
		if !n.Available {
			down++
			if n.Addr != hungNode.Addr {
				t.Errorf("Health during the hang: %s unavailable, want only %s", n.Addr, hungNode.Addr)
			}
		}
	}
	if len(h.Nodes) != 3 || down != 1 {
		t.Errorf("Health during the hang = %+v; want 3 primaries, one unavailable", h)
	}
	for i, extra := range ph {
		if extra != 1 {
			t.Errorf("caller %d (primary %d): charged %d more than the store admitted, want at most the 1 call in Redis when its primary stopped", i, onNode[i], extra)
		}
	}
	t.Logf("%d calls, the longest %s; hung primary: %d failure-mode answers; others: %d decided; %d phantom charges; Health: %+v",
		l.calls.Load(), time.Duration(l.maxTook.Load()), l.hungOK.Load(), l.otherOK.Load(), len(ph), h)
}

// TestNoPhantomCharge: calls that reach a stopped Redis time out; when it
// resumes and runs them, past their deadline, they record nothing.
// Without the deadline every one of them would be charged.
func TestNoPhantomCharge(t *testing.T) {
	t.Parallel() // servers of its own; see helpers_test.go
	for _, batch := range []bool{false, true} {
		t.Run("batch="+strconv.FormatBool(batch), func(t *testing.T) {
			server := redistest.Spawn(t)
			// A timeout the warm-up never misses, even under -race on a
			// loaded machine; the calls to the stopped server miss it.
			s, err := New(Config{Addrs: []string{server.Addr}, Mode: ModeStandalone, Timeout: time.Second, KeyPrefix: uniquePrefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			limits := []floodgate.Limit{
				floodgate.NewLimit(floodgate.SlidingWindowLog, 10, time.Hour),
				floodgate.NewTokenBucket(10, 1, time.Hour),
				floodgate.NewLimit(floodgate.SlidingWindowCounter, 10, time.Hour),
				floodgate.NewLimit(floodgate.FixedWindow, 10, time.Hour),
			}
			// Concurrent calls first, so rueidis pipelines in the
			// background (a lone call goes synchronously, and its timeout
			// closes the connection, dropping what it sent).
			var warm sync.WaitGroup
			for i := range 64 {
				warm.Add(1)
				go func() {
					defer warm.Done()
					// Every script once, so Redis has them all (a NOSCRIPT
					// reply would also leave nothing recorded).
					id := "warm-" + strconv.Itoa(i)
					l := limits[i%len(limits)]
					if _, err := s.Allow(t.Context(), id, l); err != nil {
						t.Errorf("warm-up: %v", err)
					}
					res := make([]floodgate.BatchResult, 2)
					s.AllowBatch(t.Context(), []floodgate.BatchItem{bi(id, l, 1), bi(id, limits[(i+1)%len(limits)], 1)}, res)
					if err := errors.Join(res[0].Err, res[1].Err); err != nil {
						t.Errorf("warm-up: %v", err)
					}
				}()
			}
			warm.Wait()
			info, _ := server.Do(t, "INFO", "errorstats").ToString()
			refusedBefore := infoField(info, "errorstat_DEADLINE:", "count=")
			server.Stop(t)
			const callers = 64
			var wg sync.WaitGroup
			var unavailable atomic.Int64
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := "phantom-" + strconv.Itoa(i)
					l := limits[i%len(limits)]
					var err error
					if batch {
						res := make([]floodgate.BatchResult, 2)
						s.AllowBatch(t.Context(), []floodgate.BatchItem{bi(id, l, 1), bi(id, limits[(i+1)%len(limits)], 1)}, res)
						err = errors.Join(res[0].Err, res[1].Err)
					} else {
						_, err = s.Allow(t.Context(), id, l)
					}
					if errors.Is(err, floodgate.ErrStoreUnavailable) {
						unavailable.Add(1)
					}
				}()
			}
			wg.Wait()
			time.Sleep(300 * time.Millisecond)
			server.Cont(t)
			if unavailable.Load() != callers {
				t.Fatalf("%d of %d calls to a stopped server unavailable, want all", unavailable.Load(), callers)
			}
			eventually(t, s, "after", limits[0])
			info, _ = server.Do(t, "INFO", "errorstats").ToString()
			refused := infoField(info, "errorstat_DEADLINE:", "count=") - refusedBefore
			for i := range callers {
				for _, l := range limits {
					if n, _ := server.Do(t, "EXISTS", s.Key("phantom-"+strconv.Itoa(i), l.Algorithm)).AsInt64(); n != 0 {
						t.Errorf("caller %d: %s key %s exists: a call that timed out was charged", i, l.Algorithm, s.Key("phantom-"+strconv.Itoa(i), l.Algorithm))
					}
				}
			}
			if refused != callers {
				t.Errorf("errorstat_DEADLINE = %d; want every call (%d) refused by its deadline when Redis ran it late", refused, callers)
			}
			t.Logf("%d calls timed out; Redis refused %d past their deadline", callers, refused)
		})
	}
}

// TestDeadlineScripts: every script, and the batch, given a deadline in
// the past records nothing and answers DEADLINE, which the store reports
// as unavailable with context.DeadlineExceeded; given one in the future it
// decides as without one.
func TestDeadlineScripts(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	prefix := uniquePrefix(t)
	now := func() int64 {
		v, err := do(t, client, "TIME").AsIntSlice()
		if err != nil || len(v) != 2 {
			t.Fatalf("TIME: %v %v", v, err)
		}
		return v[0]*1_000_000 + v[1]
	}
	for _, a := range algorithmlist.All() {
		l := floodgate.NewLimit(a, 10, time.Minute)
		key := Key(prefix, "deadline", a)
		args := func(dl int64) []string {
			return append((*numberStrings)(nil).scriptArgs(opAllow, l, 1, "")[:5], "", strconv.FormatInt(dl, 10))
		}
		err := client.Do(t.Context(), client.B().Eval().Script(scripts[a].source).Numkeys(1).Key(key).Arg(args(now()-1000)...).Build()).Error()
		if got := classify(t.Context(), scripts[a].file, err); !errors.Is(got, floodgate.ErrStoreUnavailable) || !errors.Is(got, context.DeadlineExceeded) {
			t.Errorf("%s past its deadline: %v, want unavailable and DeadlineExceeded", a, got)
		}
		if n, _ := doKey(t, client, "EXISTS", key).AsInt64(); n != 0 {
			t.Errorf("%s past its deadline wrote its key", a)
		}
		reply, err := client.Do(t.Context(), client.B().Eval().Script(scripts[a].source).Numkeys(1).Key(key).Arg(args(now()+10_000_000)...).Build()).ToMessage()
		if d, derr := decode(l, reply); err != nil || derr != nil || !d.Allowed || d.Remaining != 9 {
			t.Errorf("%s before its deadline: %+v, %v, %v; want admitted with 9 remaining", a, d, err, derr)
		}
	}
	// A fixed window's refund past its deadline gives nothing back: the
	// engine sends a leased block's window end as that deadline, so a late
	// refund cannot credit the next window.
	fw := floodgate.NewLimit(floodgate.FixedWindow, 10, time.Minute)
	fwKey := Key(prefix, "late-refund", floodgate.FixedWindow)
	eval := func(op string, dl int64) error {
		args := append((*numberStrings)(nil).scriptArgs(op, fw, 4, "")[:5], "", strconv.FormatInt(dl, 10))
		return client.Do(t.Context(), client.B().Eval().Script(scripts[floodgate.FixedWindow].source).Numkeys(1).Key(fwKey).Arg(args...).Build()).Error()
	}
	if err := eval(opAllow, now()+10_000_000); err != nil {
		t.Fatalf("taking 4: %v", err)
	}
	if err := eval(opRefund, now()-1000); !errors.Is(classify(t.Context(), scripts[floodgate.FixedWindow].file, err), context.DeadlineExceeded) {
		t.Errorf("a fixed window's refund past its deadline: %v, want DeadlineExceeded", err)
	}
	last, err := client.Do(t.Context(), client.B().Eval().Script(scripts[floodgate.FixedWindow].source).Numkeys(1).Key(fwKey).Arg(append((*numberStrings)(nil).scriptArgs(opAllow, fw, 0, "")[:5], "")...).Build()).ToMessage()
	if d, derr := decode(fw, last); err != nil || derr != nil || d.Remaining != 6 {
		t.Errorf("after a late refund: %+v, %v, %v; want 6 remaining, nothing given back", d, err, derr)
	}
	keys := []string{Key(prefix, "batch", floodgate.TokenBucket), Key(prefix, "batch", floodgate.FixedWindow)}
	items := []string{"", "tb", "10", "60000000", "1", "", "fw", "10", "60000000", "1", ""}
	err = client.Do(t.Context(), client.B().Eval().Script(batch.source).Numkeys(2).Key(keys...).Arg(append(items, strconv.FormatInt(now()-1000, 10))...).Build()).Error()
	if got := classify(t.Context(), batchFile, err); !errors.Is(got, floodgate.ErrStoreUnavailable) || !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("batch past its deadline: %v, want unavailable and DeadlineExceeded", got)
	}
	if n, _ := do(t, client, "EXISTS", keys[0]).AsInt64(); n != 0 {
		t.Errorf("the batch past its deadline wrote")
	}
	vals, err := client.Do(t.Context(), client.B().Eval().Script(batch.source).Numkeys(2).Key(keys...).Arg(append(items, strconv.FormatInt(now()+10_000_000, 10))...).Build()).ToArray()
	if err != nil || len(vals) != 8 || vals[0].Error() != nil || vals[4].Error() != nil {
		t.Errorf("batch before its deadline: %v, %v; want two decisions of 4 entries", vals, err)
	}
}

// TestDeadlineClock: the deadline the store sends is the caller's, in
// Redis's clock, never later: within the sampling round trip of it.
func TestDeadlineClock(t *testing.T) {
	onBackends(t, func(t *testing.T, client rueidis.Client) {
		s := testStore(t, client, nil)
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			slot := 0
			if s.cluster {
				slot = keySlot(s.Key(id, floodgate.TokenBucket))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			dl, err := strconv.ParseInt(s.deadline(ctx, slot), 10, 64)
			cancel()
			if err != nil {
				t.Fatalf("deadline: %v", err)
			}
			ctx, cancel = context.WithTimeout(t.Context(), time.Second)
			v, err := client.Do(ctx, client.B().Eval().Script("return redis.call('TIME')").Numkeys(1).Key(s.Key(id, floodgate.TokenBucket)).Build()).AsIntSlice()
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			redisNow := v[0]*1_000_000 + v[1]
			// The deadline was 10s ahead when computed, a moment ago.
			if ahead := time.Duration(dl-redisNow) * time.Microsecond; ahead > 10*time.Second || ahead < 9*time.Second {
				t.Errorf("key %s: deadline %s ahead of Redis's clock, want just under 10s", id, ahead)
			}
		}
	})
}

// TestOOMEveryAlgorithm: over maxmemory under noeviction, every
// algorithm's script and the batch are refused before they write: the
// call is unavailable, existing keys are unchanged, and no key is created
// (the sliding-window log's trim included).
func TestOOMEveryAlgorithm(t *testing.T) {
	server := redistest.Spawn(t, "--maxmemory-policy", "noeviction")
	client := newClient(t, server.Addr)
	// Time moves by hand, so the log's entry leaves its window while Redis
	// (on its own clock) keeps the key: trimming it is then a write.
	clock := clocktest.NewManual(time.Now())
	s := testStore(t, client, clock)
	ctx := t.Context()
	var limits []floodgate.Limit
	for _, a := range algorithmlist.All() {
		window := time.Hour
		if a == floodgate.SlidingWindowLog {
			window = time.Second
		}
		limits = append(limits, floodgate.NewLimit(a, 5, window))
	}
	// Every key has state, and the log's entry will have left its window,
	// so its trim would be the first write.
	before := map[string]keyState{}
	for _, l := range limits {
		if d, err := s.Allow(ctx, "k", l); err != nil || !d.Allowed {
			t.Fatalf("Allow(%s) = %+v, %v", l.Algorithm, d, err)
		}
	}
	clock.Advance(2 * time.Second)
	for _, l := range limits {
		before[s.Key("k", l.Algorithm)] = stateOf(t, client, s.Key("k", l.Algorithm))
	}
	dbsize, _ := do(t, client, "DBSIZE").AsInt64()
	if err := server.Do(t, "CONFIG", "SET", "maxmemory", "1").Error(); err != nil {
		t.Fatal(err)
	}
	defer server.Do(t, "CONFIG", "SET", "maxmemory", "0")
	for _, l := range limits {
		for _, id := range []string{"k", "new"} {
			for _, cost := range []int64{1, 3} {
				if d, err := s.AllowN(ctx, id, l, cost); !errors.Is(err, floodgate.ErrStoreUnavailable) || d.Allowed {
					t.Errorf("AllowN(%q, %s, %d) over maxmemory = %+v, %v; want ErrStoreUnavailable", id, l.Algorithm, cost, d, err)
				}
			}
		}
	}
	items := []floodgate.BatchItem{bi("k", limits[0], 1), bi("k", limits[1], 1), bi("new", limits[2], 1), bi("k", limits[3], 1)}
	res := make([]floodgate.BatchResult, len(items))
	s.AllowBatch(ctx, items, res)
	for i, r := range res {
		if !errors.Is(r.Err, floodgate.ErrStoreUnavailable) || r.Decision.Allowed {
			t.Errorf("batch item %d over maxmemory: %+v; want ErrStoreUnavailable", i, r)
		}
	}
	checkUnchanged(t, client, before)
	if n, _ := do(t, client, "DBSIZE").AsInt64(); n != dbsize {
		t.Errorf("DBSIZE %d over maxmemory, was %d: a refused script wrote", n, dbsize)
	}
	// The node answers, so its breaker stays closed, but Health (and so
	// /readyz) says it is full.
	if h := s.Health(); len(h.Warnings) != 1 || !strings.Contains(h.Warnings[0], "lack of memory") || !h.Available() {
		t.Errorf("Health over maxmemory = %+v; want available, with a warning that Redis is full", h)
	}
}

// TestLazyConnect: a store made with LazyConnect while Redis is down
// answers unavailable at once, says why in Health and its log, and decides
// soon after Redis comes up.
func TestLazyConnect(t *testing.T) {
	server := redistest.Spawn(t)
	server.Kill()
	var logs logBuffer
	s, err := New(Config{Addrs: []string{server.Addr}, Mode: ModeStandalone, LazyConnect: true, Timeout: callTimeout, Logger: logs.logger()})
	if err != nil {
		t.Fatalf("New with LazyConnect and Redis down: %v", err)
	}
	defer s.Close()
	l := floodgate.PerMinute(10)
	checkUnavailable(t, s, "x", l)
	res := make([]floodgate.BatchResult, 2)
	s.AllowBatch(t.Context(), []floodgate.BatchItem{bi("x", l, 1), bi("y", l, 1)}, res)
	if !errors.Is(res[0].Err, floodgate.ErrStoreUnavailable) || !errors.Is(res[1].Err, floodgate.ErrStoreUnavailable) {
		t.Errorf("AllowBatch before connecting: %+v", res)
	}
	if err := s.Reset(t.Context(), "x", l); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("Reset before connecting: %v", err)
	}
	if err := s.RefundN(t.Context(), "x", l, 1); !errors.Is(err, floodgate.ErrStoreUnavailable) {
		t.Errorf("RefundN before connecting: %v", err)
	}
	if h := s.Health(); h.Connected || !strings.Contains(h.Error, "connection refused") || h.Available() {
		t.Errorf("Health before connecting = %+v; want not connected, connection refused", h)
	}
	if !strings.Contains(logs.String(), "cannot connect") {
		t.Errorf("log before connecting:\n%s", logs.String())
	}
	server.Restart(t)
	up := time.Now()
	eventually(t, s, "x", l)
	t.Logf("decided %s after Redis came up", time.Since(up))
	if h := s.Health(); !h.Connected || !h.Available() || h.Error != "" {
		t.Errorf("Health after connecting = %+v", h)
	}
}

// TestLazyConnectCluster: the same for a cluster that is not up yet.
func TestLazyConnectCluster(t *testing.T) {
	cluster := redistest.SpawnCluster(t, 3)
	addrs := cluster.Addrs()
	for _, n := range cluster.Nodes {
		n.Stop(t)
	}
	s, err := New(Config{Addrs: addrs, Mode: ModeCluster, LazyConnect: true, Timeout: callTimeout})
	if err != nil {
		t.Fatalf("New with LazyConnect and the cluster hung: %v", err)
	}
	defer s.Close()
	checkUnavailable(t, s, "x", floodgate.PerMinute(10))
	for _, n := range cluster.Nodes {
		n.Cont(t)
	}
	eventually(t, s, "x", floodgate.PerMinute(10))
	if h := s.Health(); !h.Available() || len(h.Nodes) != 3 {
		t.Errorf("Health after connecting = %+v; want 3 primaries, available", h)
	}
}

// TestInFlightBound: with a bound of 4 and no breaker, a hung server holds
// exactly 4 calls in flight; the rest wait for a place until their
// deadline, and every call returns in time. After the server answers, the
// abandoned calls' places are free again.
func TestInFlightBound(t *testing.T) {
	server := redistest.Spawn(t)
	s, err := New(Config{Addrs: []string{server.Addr}, Mode: ModeStandalone, Timeout: callTimeout, MaxInFlight: 4, BreakerFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := floodgate.PerMinute(1000)
	server.Stop(t)
	var wg sync.WaitGroup
	var slow, unavailable atomic.Int64
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				start := time.Now()
				_, err := s.Allow(t.Context(), "bound-"+strconv.Itoa(i), l)
				if time.Since(start) > callTimeout+hangMargin {
					slow.Add(1)
				}
				if errors.Is(err, floodgate.ErrStoreUnavailable) {
					unavailable.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	h := s.Health()
	server.Cont(t)
	if slow.Load() != 0 || unavailable.Load() != 64*5 {
		t.Errorf("%d calls took longer than %s, %d of %d unavailable", slow.Load(), callTimeout+hangMargin, unavailable.Load(), 64*5)
	}
	if n := h.Nodes[0].InFlight; n != 4 {
		t.Errorf("calls in flight on the hung server: %d, want the bound, 4", n)
	}
	eventually(t, s, "after", l)
	deadline := time.Now().Add(5 * time.Second)
	for s.Health().Nodes[0].InFlight != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("calls in flight after the server answered: %d, want 0", s.Health().Nodes[0].InFlight)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEvictionPolicy: a server that can evict any key is reported in
// Health and logged loudly; a noeviction server is not.
func TestEvictionPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		warn   bool
	}{{"allkeys-lru", true}, {"allkeys-random", true}, {"noeviction", false}, {"volatile-ttl", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			server := redistest.Spawn(t, "--maxmemory-policy", tc.policy)
			var logs logBuffer
			s, err := New(Config{Addrs: []string{server.Addr}, Mode: ModeStandalone, Logger: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			deadline := time.Now().Add(5 * time.Second)
			for s.Health().Nodes[0].EvictionPolicy == "" {
				if time.Now().After(deadline) {
					t.Fatal("the eviction policy was not read within 5s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			h := s.Health()
			if n := h.Nodes[0]; n.EvictionPolicy != tc.policy || n.Evicting != tc.warn || (len(h.Warnings) > 0) != tc.warn {
				t.Errorf("Health = %+v; want policy %s, evicting %v", h, tc.policy, tc.warn)
			}
			if logged := strings.Contains(logs.String(), "maxmemory-policy="+tc.policy); logged != tc.warn {
				t.Errorf("logged the policy: %v, want %v:\n%s", logged, tc.warn, logs.String())
			}
		})
	}
}

// TestConfigResilience: the new fields are validated.
func TestConfigResilience(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Addrs: []string{"h:1"}, MaxInFlight: 769}, "MaxInFlight"},
		{Config{Addrs: []string{"h:1"}, LazyConnect: true}, "Mode"},
	} {
		var ce *ConfigError
		if err := tc.cfg.Validate(); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("Validate(%+v) = %v; want a ConfigError on %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := NewFromClient(newClient(t, redistest.StandaloneAddr(t)), Config{LazyConnect: true}); err == nil {
		t.Error("NewFromClient accepted LazyConnect")
	}
}

// TestShortCallerDeadlines: callers whose own deadline is shorter than a
// round trip (a gRPC client's grpc-timeout, passed on by Envoy's service and
// the interceptors), or who go away at once, never make a healthy node look
// failed: its breaker stays closed and the callers without a deadline
// decide every call. (Before, such calls counted as node failures and, in
// rueidis's synchronous mode, closed the shared connection.)
func TestShortCallerDeadlines(t *testing.T) {
	t.Parallel() // servers of its own, a timed load; see helpers_test.go
	for _, tc := range []struct {
		name   string
		short  time.Duration
		cancel bool
	}{
		{"deadline 20µs", 20 * time.Microsecond, false},
		{"deadline 300µs", 300 * time.Microsecond, false},
		{"gone after 20µs", 20 * time.Microsecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := redistest.Spawn(t)
			s, err := New(Config{Addrs: []string{server.Addr}, Mode: ModeStandalone, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			limit := floodgate.NewLimit(floodgate.FixedWindow, 1<<40, time.Hour)
			var stop atomic.Bool
			var ok, failed atomic.Int64
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					for !stop.Load() {
						if _, err := s.Allow(context.Background(), "steady-"+strconv.Itoa(i), limit); err != nil {
							if failed.Add(1) == 1 {
								t.Errorf("a caller without a deadline failed: %v", err)
							}
						} else {
							ok.Add(1)
						}
					}
				})
			}
			for i := range 32 {
				wg.Go(func() {
					for !stop.Load() {
						ctx, cancel := context.WithTimeout(context.Background(), tc.short)
						if tc.cancel {
							ctx, cancel = context.WithCancel(context.Background())
							time.AfterFunc(tc.short, cancel)
						}
						_, _ = s.Allow(ctx, "short-"+strconv.Itoa(i), limit)
						cancel()
					}
				})
			}
			time.Sleep(2 * time.Second)
			stop.Store(true)
			wg.Wait()
			h := s.Health()
			if h.Nodes[0].Opens > 0 || failed.Load() > 0 || ok.Load() == 0 {
				t.Errorf("the breaker opened %d times; callers without a deadline: %d decided, %d failed", h.Nodes[0].Opens, ok.Load(), failed.Load())
			}
		})
	}
}

// TestOldRedisVersion: a Redis older than 7.0 cannot compile the scripts'
// "#!lua" line; the store reads INFO server and says so in Health's
// warnings (a 7.x server, as in TestEvictionPolicy, gets none).
func TestOldRedisVersion(t *testing.T) {
	for v, recent := range map[string]bool{"7.0.15": true, "7.2.4": true, "8.0.0": true, "6.2.14": false, "5.0.7": false, "": true, "weird": true} {
		if got := versionAtLeast7(v); got != recent {
			t.Errorf("versionAtLeast7(%q) = %v, want %v", v, got, recent)
		}
	}
	if got := infoValue("# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n", "redis_version"); got != "6.2.14" {
		t.Errorf("infoValue = %q", got)
	}
	server := redistest.Spawn(t)
	s, err := New(Config{Addrs: []string{server.Addr}, Mode: ModeStandalone})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if h := s.Health(); len(h.Warnings) > 0 {
		t.Fatalf("a Redis 7 server warned: %q", h.Warnings)
	}
	old := "6.2.14"
	s.guard.conn.Load().topo.Load().nodes[0].oldVersion.Store(&old)
	if h := s.Health(); len(h.Warnings) != 1 || !strings.Contains(h.Warnings[0], "Redis 6.2.14 is older than 7.0") {
		t.Errorf("Health.Warnings = %q; want the old version named", h.Warnings)
	}
}

// Package loadgen drives a closed-loop load: callers that each send one
// request, wait for its answer and send the next, for keys picked uniformly
// at random, counting admissions, denials, errors and latency in a
// log-linear histogram ([Hist]). floodgate bench runs it against a store or
// a running server.
package loadgen

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Load describes a run.
type Load struct {
	Concurrency int           // callers in flight; at least 1
	Keys        int           // distinct keys, "0" to Keys-1; at least 1
	Duration    time.Duration // how long to run
	Requests    int64         // stop after this many requests; 0: no count
	Timeout     time.Duration // bound on one request
}

// Decide answers one request for key.
type Decide func(ctx context.Context, key string) (allowed bool, err error)

// Tally is what a run, or a moment of it, counted.
type Tally struct {
	Allowed, Denied, Errors int64
	Latency                 *Hist
}

// Requests returns the number of requests answered.
func (t *Tally) Requests() int64 { return t.Allowed + t.Denied + t.Errors }

// worker is one caller's tally. Only the caller writes; readers load
// atomically.
type worker struct {
	allowed, denied, errors atomic.Int64
	hist                    Hist
	_                       [64]byte // keep callers' hot counters apart
}

// Run is a load in progress. Start it with Start.
type Run struct {
	workers  []worker
	start    time.Time
	done     chan struct{}
	stop     atomic.Bool
	errOnce  sync.Once
	firstErr string
	ended    bool // ctx ended the run
	mu       sync.Mutex
}

// Start runs l against d until l.Duration passes, l.Requests are answered
// or ctx ends. Requests in flight then finish: an answer cut off would be
// neither allowed, denied nor a real error.
func Start(ctx context.Context, l Load, d Decide) *Run {
	keys := make([]string, max(l.Keys, 1))
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	r := &Run{workers: make([]worker, max(l.Concurrency, 1)), start: time.Now(), done: make(chan struct{})}
	var claimed atomic.Int64
	var wg sync.WaitGroup
	callCtx := context.WithoutCancel(ctx)
	deadline := time.AfterFunc(l.Duration, func() { r.stop.Store(true) })
	go func() {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.ended = true
			r.mu.Unlock()
			r.stop.Store(true)
		case <-r.done:
		}
	}()
	for g := range r.workers {
		w := &r.workers[g]
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g)+1, uint64(r.start.UnixNano())))
			for !r.stop.Load() {
				if l.Requests > 0 && claimed.Add(1) > l.Requests {
					return
				}
				key := keys[rnd.IntN(len(keys))]
				cctx, cancel := context.WithTimeout(callCtx, l.Timeout)
				t0 := time.Now()
				ok, err := d(cctx, key)
				lat := time.Since(t0)
				cancel()
				switch {
				case err != nil:
					w.errors.Add(1)
					r.errOnce.Do(func() { r.firstErr = err.Error() })
				case ok:
					w.allowed.Add(1)
				default:
					w.denied.Add(1)
				}
				w.hist.Record(lat)
			}
		})
	}
	go func() {
		wg.Wait()
		deadline.Stop()
		close(r.done)
	}()
	return r
}

// Started returns when the run started.
func (r *Run) Started() time.Time { return r.start }

// Done is closed when every caller has stopped.
func (r *Run) Done() <-chan struct{} { return r.done }

// Snapshot returns the counts so far; it may run while the load does.
func (r *Run) Snapshot() Tally {
	t := Tally{Latency: &Hist{}}
	for i := range r.workers {
		w := &r.workers[i]
		t.Allowed += w.allowed.Load()
		t.Denied += w.denied.Load()
		t.Errors += w.errors.Load()
		t.Latency.Add(&w.hist)
	}
	return t
}

// Result is a finished run's summary.
type Result struct {
	Tally
	Elapsed     time.Duration
	FirstError  string // the first error's text, if any
	Interrupted bool   // the context ended the run
}

// Wait waits for the run to end and returns its summary.
func (r *Run) Wait() Result {
	<-r.done
	elapsed := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	return Result{Tally: r.Snapshot(), Elapsed: elapsed, FirstError: r.firstErr, Interrupted: r.ended}
}

package bench

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Workload is a set of keys the callers pick from, uniformly at random.
type Workload struct {
	// Name is "random" (10,000 keys, mostly admitted) or "hot" (one key,
	// mostly denied).
	Name string
	// Title describes it in tables.
	Title string
	Keys  []string
}

// Workloads returns the two workloads of the comparison.
func Workloads() []Workload {
	return []Workload{
		{Name: "random", Title: "10,000 random keys (mostly admitted)", Keys: Keys(10_000)},
		{Name: "hot", Title: "one hot key (mostly denied)", Keys: []string{"hot"}},
	}
}

// Keys returns n distinct keys.
func Keys(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = "user-" + strconv.Itoa(i)
	}
	return k
}

// Load is how one run drives a contender: Concurrency callers in a closed
// loop (each sends its next request when the previous one is answered) for
// Duration, after Warmup of the same load that is not measured.
type Load struct {
	Keys        []string
	Concurrency int
	Duration    time.Duration
	Warmup      time.Duration
}

// Sample is the outcome of one run.
type Sample struct {
	// Decisions counts the calls that returned a decision; Allowed those
	// that admitted; Errors the calls that failed (Err is one of them).
	Decisions, Allowed, Errors int64
	Err                        string `json:",omitempty"`
	// Elapsed is the measured time, from the start of the callers to the
	// end of the last call.
	Elapsed time.Duration
	// P50, P99 and P999 are latencies of one call as the caller sees it.
	P50, P99, P999 time.Duration
	// RedisCPU is the CPU time Redis spent during the run, summed over
	// every node; -1 when not measured.
	RedisCPU time.Duration
	// Commands counts the commands Redis processed during the run, summed
	// over every node (a cluster's replicas count the writes they apply);
	// -1 when not measured. Far more than the contender sends means other
	// clients were using the server.
	Commands int64
	// Scripts is the part of RedisCPU spent running scripts (INFO
	// commandstats); -1 when not measured.
	Scripts time.Duration
	// Allocs counts the Go heap allocations of the whole process during
	// the run (the callers, the client library and its goroutines).
	Allocs uint64
	// ClientCPU is the CPU time this process spent while the callers ran
	// (the callers, the client library and its goroutines); 0 when not
	// measured (or absent from an older report).
	ClientCPU time.Duration `json:",omitempty"`
	// Idle and Stolen are the CPU time the machine's cores spent idle
	// and taken by the hypervisor (/proc/stat) while the callers ran,
	// summed over the cores, when Machine is set.
	Idle, Stolen time.Duration `json:",omitempty"`
	// Machine reports that Idle and Stolen were measured.
	Machine bool `json:",omitempty"`
}

// Rate returns the decisions per second.
func (s Sample) Rate() float64 { return float64(s.Decisions) / s.Elapsed.Seconds() }

// CPUPer100k returns Redis CPU seconds per 100,000 decisions.
func (s Sample) CPUPer100k() float64 {
	if s.RedisCPU < 0 || s.Decisions == 0 {
		return -1
	}
	return s.RedisCPU.Seconds() * 1e5 / float64(s.Decisions)
}

// ClientCPUPer100k returns this process's CPU seconds per 100,000
// decisions, or -1 when not measured.
func (s Sample) ClientCPUPer100k() float64 {
	if s.ClientCPU <= 0 || s.Decisions == 0 {
		return -1
	}
	return s.ClientCPU.Seconds() * 1e5 / float64(s.Decisions)
}

// cores returns d over the run's elapsed time: the cores a CPU time of d
// kept busy on average, or -1 when d is not measured (negative).
func (s Sample) cores(d time.Duration) float64 {
	if d < 0 || s.Elapsed <= 0 {
		return -1
	}
	return d.Seconds() / s.Elapsed.Seconds()
}

// RedisCores returns the cores Redis kept busy, on average over the run;
// -1 when not measured.
func (s Sample) RedisCores() float64 { return s.cores(s.RedisCPU) }

// ClientCores returns the cores this process kept busy, on average over
// the run; -1 when not measured.
func (s Sample) ClientCores() float64 {
	if s.ClientCPU <= 0 {
		return -1
	}
	return s.cores(s.ClientCPU)
}

// IdleCores returns the machine's cores that were idle, on average over
// the run; -1 when not measured.
func (s Sample) IdleCores() float64 {
	if !s.Machine {
		return -1
	}
	return s.cores(s.Idle)
}

// StolenCores returns the machine's cores the hypervisor took, on average
// over the run; -1 when not measured.
func (s Sample) StolenCores() float64 {
	if !s.Machine {
		return -1
	}
	return s.cores(s.Stolen)
}

// ScriptsPer100k returns the seconds Redis spent running scripts per
// 100,000 decisions, or -1 when not measured.
func (s Sample) ScriptsPer100k() float64 {
	if s.Scripts < 0 || s.Decisions == 0 {
		return -1
	}
	return s.Scripts.Seconds() * 1e5 / float64(s.Decisions)
}

// AllocsPerDecision returns Go heap allocations per decision.
func (s Sample) AllocsPerDecision() float64 {
	if s.Decisions == 0 {
		return 0
	}
	return float64(s.Allocs) / float64(s.Decisions)
}

// AllowedShare returns the share of decisions that admitted, 0 to 1.
func (s Sample) AllowedShare() float64 {
	if s.Decisions == 0 {
		return 0
	}
	return float64(s.Allowed) / float64(s.Decisions)
}

// Run drives c with l and measures it. nodes, if not nil, are the Redis
// servers whose CPU time and command count are read before and after.
func Run(ctx context.Context, c *Contender, l Load, nodes *Nodes) (Sample, error) {
	if l.Warmup > 0 {
		drive(ctx, c, l, l.Warmup, false)
	}
	var before Counters
	if nodes != nil {
		var err error
		if before, err = nodes.Counters(ctx); err != nil {
			return Sample{}, err
		}
	}
	allocs0 := heapAllocs()
	s := drive(ctx, c, l, l.Duration, true)
	s.Allocs = heapAllocs() - allocs0
	s.RedisCPU, s.Commands, s.Scripts = -1, -1, -1
	if nodes != nil {
		after, err := nodes.Counters(ctx)
		if err != nil {
			return s, err
		}
		s.RedisCPU, s.Commands, s.Scripts = after.CPU-before.CPU, after.Commands-before.Commands, after.Scripts-before.Scripts
	}
	return s, nil
}

// worker is one caller's tally, padded so callers do not share cache lines.
type worker struct {
	decisions, allowed, errors int64
	firstErr                   error
	lat                        []time.Duration
	_                          [64]byte
}

// drive runs the callers for d. Unless measure is set it only warms up;
// otherwise it returns the tally, the latencies, and the CPU this process
// and the machine spent while the callers ran.
func drive(ctx context.Context, c *Contender, l Load, d time.Duration, measure bool) Sample {
	conc := max(1, l.Concurrency)
	ws := make([]worker, conc)
	if measure {
		// Room for a generous rate, so appends rarely allocate.
		for i := range ws {
			ws[i].lat = make([]time.Duration, 0, 1<<16/conc+1024)
		}
	}
	var stop atomic.Bool
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	var wg sync.WaitGroup
	cpu0 := processCPU()
	idle0, steal0 := machineCPU()
	start := time.Now()
	for g := range conc {
		w := &ws[g]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g)+1, uint64(start.UnixNano())))
			n := len(l.Keys)
			for !stop.Load() && ctx.Err() == nil {
				key := l.Keys[r.IntN(n)]
				t0 := time.Now()
				ok, err := c.Allow(ctx, key)
				lat := time.Since(t0)
				switch {
				case err != nil:
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
					continue
				case ok:
					w.allowed++
				}
				w.decisions++
				if measure {
					w.lat = append(w.lat, lat)
				}
			}
		})
	}
	wg.Wait()
	var s Sample
	s.Elapsed = time.Since(start)
	if !measure {
		return s
	}
	if cpu1 := processCPU(); cpu0 >= 0 && cpu1 >= 0 {
		s.ClientCPU = cpu1 - cpu0
	}
	if idle1, steal1 := machineCPU(); idle0 >= 0 && idle1 >= 0 {
		s.Idle, s.Stolen, s.Machine = idle1-idle0, steal1-steal0, true
	}
	lats := make([][]time.Duration, conc)
	for i := range ws {
		s.Decisions += ws[i].decisions
		s.Allowed += ws[i].allowed
		s.Errors += ws[i].errors
		if s.Err == "" && ws[i].firstErr != nil {
			s.Err = ws[i].firstErr.Error()
		}
		lats[i] = ws[i].lat
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	s.P50, s.P99, s.P999 = Percentile(all, 0.50), Percentile(all, 0.99), Percentile(all, 0.999)
	return s
}

// Percentile returns the q-quantile (0 <= q <= 1) of sorted latencies, by
// the nearest-rank method; 0 for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1 // 1e-9: 0.99*100 is 99.00000000000001
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// heapAllocs returns the number of heap allocations the process has made.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// CommandsPerDecision returns the Redis commands processed per decision, or
// -1 when not measured.
func (s Sample) CommandsPerDecision() float64 {
	if s.Commands < 0 || s.Decisions == 0 {
		return -1
	}
	return float64(s.Commands) / float64(s.Decisions)
}

// Command gubernator measures floodgate's leased quota beside gubernator
// (github.com/gubernator-io/gubernator/v2 v2.13.0, behaviour GLOBAL) on the
// same load: one hot key, three instances of each with 64 callers per
// instance in a closed loop, the demand above the limit, over several
// windows. floodgate is leasebench's lease cell (three engines, each on
// its own client to the harness's Redis Cluster, a fixed window with
// `lease: {}`); gubernator is three daemons in this process on loopback
// ports, peered through a static peer list, a GLOBAL token bucket.
// Rounds alternate the two, so the machine's load falls on both alike.
//
// For each it reports decisions/s and, for every window, the admitted
// units against the limit. floodgate states its bound (a leased fixed
// window admits at most its limit in every window, docs/ALGORITHMS.md):
// the command fails if any window broke it. gubernator states none: its
// over-admission is reported as measured. docs/PERFORMANCE.md ("Beside
// gubernator") has its output.
//
// It is a module of its own so gubernator never enters floodgate's
// dependencies nor the bench module's:
//
//	go -C bench/gubernator run . [-rounds 5] [-duration 5s] [-docs ../../docs/PERFORMANCE.md]
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/docblock"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gubernator:", err)
		os.Exit(1)
	}
}

// config is one run's parameters.
type config struct {
	addrs                 []string
	rounds                int
	duration, calibrate   time.Duration
	instances, callersPer int
	// limit per 1 s window; 0: a third of what gubernator decided per
	// second in the calibration (every request admitted), so the demand
	// is about three times the limit for the slower of the two.
	limit int64
	// only, when set, names the one contender to run.
	only string
}

// round is one round's measurement of one contender.
type round struct {
	o     outcome
	t     tally
	owner int // gubernator: the daemon that owned the key
}

// report is every round of both contenders.
type report struct {
	cfg        config
	limit      int64
	calibrated float64 // gubernator's decisions/s, everything admitted
	floodgate  []round
	gubernator []round
}

func run(ctx context.Context, args []string, out, logw io.Writer) error {
	fs := flag.NewFlagSet("gubernator", flag.ContinueOnError)
	addrs := fs.String("cluster", os.Getenv("FLOODGATE_REDIS_CLUSTER_ADDRS"), "the Redis Cluster's addresses, comma-separated (floodgate's store)")
	var cfg config
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds of each contender, interleaved")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "each phase's length (whole seconds: floodgate's windows)")
	fs.DurationVar(&cfg.calibrate, "calibrate", 2*time.Second, "the calibration's length, when -limit is 0")
	fs.IntVar(&cfg.callersPer, "callers", 64, "callers per instance")
	fs.IntVar(&cfg.instances, "instances", 3, "instances of each contender")
	fs.Int64Var(&cfg.limit, "limit", 0, "units per 1s window (0: a third of gubernator's rate with everything admitted)")
	fs.StringVar(&cfg.only, "only", "", "run only this contender (floodgate or gubernator): for looking into one")
	docs := fs.String("docs", "", "rewrite the gubernator block of this file (docs/PERFORMANCE.md) with the results")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addrs == "" {
		return errors.New("no cluster: set -cluster or FLOODGATE_REDIS_CLUSTER_ADDRS (scripts/redis-harness.sh env)")
	}
	if cfg.duration%time.Second != 0 || cfg.duration <= 0 {
		return fmt.Errorf("-duration %v: must be whole seconds", cfg.duration)
	}
	cfg.addrs = strings.Split(*addrs, ",")
	loadBefore := loadavg()
	rep, err := measure(ctx, cfg, logw)
	if err != nil {
		return err
	}
	table := rep.table()
	fmt.Fprint(out, table)
	if over := rep.floodgateOver(); over > 0 {
		return fmt.Errorf("floodgate admitted more than its limit of %d in %d windows: its stated bound failed", rep.limit, over)
	}
	if *docs != "" {
		return writeDocs(*docs, fmt.Sprintf("`go -C bench/gubernator run . -rounds %d -duration %s -docs ../../docs/PERFORMANCE.md` (%s UTC; `/proc/loadavg` before: %s, after: %s).\n\n%s",
			cfg.rounds, cfg.duration, time.Now().UTC().Format("2006-01-02 15:04"), loadBefore, loadavg(), table))
	}
	return nil
}

// measure runs the calibration (when cfg.limit is 0) and the rounds.
func measure(ctx context.Context, cfg config, logw io.Writer) (*report, error) {
	gc, err := startGubernator(ctx, cfg.instances, behaviors())
	if err != nil {
		return nil, err
	}
	defer gc.close()
	rep := &report{cfg: cfg, limit: cfg.limit}
	stamp := time.Now().UnixNano()
	if rep.limit == 0 {
		g := &guberLimit{c: gc, name: "hot", key: fmt.Sprintf("calibrate-%d", stamp), limit: 1 << 40}
		p := phase{instances: cfg.instances, callersPer: cfg.callersPer, duration: cfg.calibrate, owner: -1}
		o := p.run(ctx, g, nextSecond())
		if o.errors > 0 {
			return nil, fmt.Errorf("gubernator calibration: %d errors, the first: %v", o.errors, o.firstErr)
		}
		rep.calibrated = o.rate()
		rep.limit = max(1, int64(o.rate()/3))
		fmt.Fprintf(logw, "calibration: gubernator decided %.0f/s admitting everything: limit %d per 1s window\n", o.rate(), rep.limit)
	}
	for r := range cfg.rounds {
		order := []string{"floodgate", "gubernator"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			if cfg.only != "" && name != cfg.only {
				continue
			}
			var res round
			if name == "floodgate" {
				res, err = floodgateRound(ctx, cfg, rep.limit, fmt.Sprintf("guberbench-%d-%d:", r, stamp))
				rep.floodgate = append(rep.floodgate, res)
			} else {
				res, err = gubernatorRound(ctx, cfg, gc, rep.limit, fmt.Sprintf("tenant-%d-%d", r, stamp))
				rep.gubernator = append(rep.gubernator, res)
			}
			if err != nil {
				return nil, err
			}
			maxF, meanF, over, whole := res.t.perLimit(rep.limit)
			fmt.Fprintf(logw, "round %d %-10s %9.0f decisions/s, p99 %v, %d unavailable, admitted %d in %d windows (%d whole), max %.1f%% mean %.1f%% of %d, %d over, %d by name, %d by time, %d unplaced",
				r, name, res.o.rate(), res.o.p99, res.o.errors, res.o.admitted, len(res.t.counts), whole, 100*maxF, 100*meanF, rep.limit, over, res.t.byName, res.t.byTime, res.t.unplaced)
			if res.o.firstErr != nil {
				fmt.Fprintf(logw, ", the first unavailable: %v", res.o.firstErr)
			}
			if name == "gubernator" {
				fmt.Fprintf(logw, ", owner daemon %d", res.owner)
			}
			fmt.Fprintln(logw)
		}
	}
	return rep, nil
}

// nextSecond returns the next whole second of the wall clock (no
// monotonic reading: the run's times are the wall clock's, which the
// stores' windows follow).
func nextSecond() time.Time { return time.Now().Truncate(time.Second).Add(time.Second) }

func floodgateRound(ctx context.Context, cfg config, limit int64, prefix string) (round, error) {
	lc, err := newLeaseCell(cfg.addrs, cfg.instances, limit, prefix)
	if err != nil {
		return round{}, err
	}
	defer lc.close()
	p := phase{instances: cfg.instances, callersPer: cfg.callersPer, duration: cfg.duration, owner: -1, record: true}
	o := p.run(ctx, lc, nextSecond())
	if o.errors == o.decisions {
		return round{}, fmt.Errorf("floodgate: every call failed, the first: %v", o.firstErr)
	}
	ws := fixedWindows(o.start, o.start+cfg.duration.Nanoseconds(), time.Second)
	return round{o: o, t: count(ws, o.spans), owner: -1}, nil
}

func gubernatorRound(ctx context.Context, cfg config, gc *guberCluster, limit int64, key string) (round, error) {
	g := &guberLimit{c: gc, name: "hot", key: key, limit: limit}
	owner, err := gc.owner(ctx, g.name, g.key)
	if err != nil {
		return round{}, err
	}
	p := phase{instances: cfg.instances, callersPer: cfg.callersPer, duration: cfg.duration, owner: owner, record: true}
	o := p.run(ctx, g, nextSecond())
	if o.errors == o.decisions {
		return round{}, fmt.Errorf("gubernator: every call failed, the first: %v", o.firstErr)
	}
	return round{o: o, t: count(observedWindows(o.seen, resetUntil), o.spans), owner: owner}, nil
}

// summary pools one contender's rounds.
type summary struct {
	rate, demand     float64 // the median round's
	p50, p99         time.Duration
	decisions        int64
	admitted         int64
	maxF, meanF      float64
	over, windows    int
	whole            int
	excess           int64 // units admitted above the limit, summed over windows
	unplaced         int64
	errors           int64
	byTime           int64
	admittedPerLimit float64 // admitted per second of run, as a multiple of the limit
}

func summarize(rs []round, limit int64) summary {
	var s summary
	if len(rs) == 0 {
		return s
	}
	byRate := slices.Clone(rs)
	slices.SortFunc(byRate, func(a, b round) int { return cmp.Compare(a.o.rate(), b.o.rate()) })
	m := byRate[len(byRate)/2]
	s.rate, s.demand, s.p50, s.p99 = m.o.rate(), m.o.demand(), m.o.p50, m.o.p99
	var sum float64
	var secs float64
	for _, r := range rs {
		s.decisions += r.o.decisions
		s.admitted += r.o.admitted
		s.unplaced += r.t.unplaced
		s.errors += r.o.errors
		s.byTime += r.t.byTime
		secs += r.o.elapsed.Seconds()
		for i, n := range r.t.counts {
			s.windows++
			f := float64(n) / float64(limit)
			s.maxF = max(s.maxF, f)
			if n > limit {
				s.over++
				s.excess += n - limit
			}
			if r.t.windows[i].whole {
				s.whole++
				sum += f
			}
		}
	}
	if s.whole > 0 {
		s.meanF = sum / float64(s.whole)
	}
	s.admittedPerLimit = float64(s.admitted) / secs / float64(limit)
	return s
}

func (r *report) floodgateOver() int { return summarize(r.floodgate, r.limit).over }

// table renders the results as Markdown: the load, the settings, one row
// per contender and what each bound came to.
func (r *report) table() string {
	var b strings.Builder
	c := r.cfg
	f, g := summarize(r.floodgate, r.limit), summarize(r.gubernator, r.limit)
	fmt.Fprintf(&b, "Load: %d instances of each x %d callers, each caller in a closed loop on one key; a limit of %d per 1 s window", c.instances, c.callersPer, r.limit)
	if r.calibrated > 0 {
		fmt.Fprintf(&b, " (a third of the %.0f decisions/s gubernator made admitting everything, in %v of calibration)", r.calibrated, c.calibrate)
	}
	fmt.Fprintf(&b, "; %d rounds of %v for each, alternating which goes first.\n\n", c.rounds, c.duration)
	bc := behaviors()
	fmt.Fprintf(&b, "gubernator v2.13.0: three daemons in this process on loopback ports, peered by a static list (discovery `none`, `SetPeers`), asked in process through `V1Instance.GetRateLimits`; `TOKEN_BUCKET`, `Behavior: GLOBAL`, `Limit` %d, `Duration` 1000 ms, `Hits` 1; GlobalSyncWait %v, GlobalBatchLimit %d, GlobalTimeout %v, GlobalPeerRequestsConcurrency %d, BatchWait %v, BatchLimit %d, BatchTimeout %v, Workers %d (the CPUs), CacheSize 50,000. floodgate: leasebench's lease cell, three engines each on its own client to the harness's 3+3 Redis Cluster, `fixed_window` of %d per 1 s, `lease: {}` (refresh 100 ms, blocks of at most 10%% of the limit), fail closed.\n\n",
		r.limit, bc.GlobalSyncWait, bc.GlobalBatchLimit, bc.GlobalTimeout, bc.GlobalPeerRequestsConcurrency, bc.BatchWait, bc.BatchLimit, bc.BatchTimeout, runtime.NumCPU(), r.limit)
	fmt.Fprintf(&b, "| contender | decisions/s, admitted or denied (median of %d) | p50 | p99 | demand / limit | unavailable answers | admitted per window, %% of limit: max | mean (whole windows) | windows over the limit | units over the limit, all windows | admitted, not placed in a window |\n|---|---|---|---|---|---|---|---|---|---|---|\n", c.rounds)
	row := func(name string, s summary) {
		fmt.Fprintf(&b, "| %s | %.0f | %v | %v | %.0fx | %d of %d | %.1f%% | %.1f%% | %d of %d | %d | %d of %d |\n",
			name, s.rate, short(s.p50), short(s.p99), s.demand/float64(r.limit), s.errors, s.decisions, 100*s.maxF, 100*s.meanF, s.over, s.windows, s.excess, s.unplaced, s.admitted)
	}
	row("floodgate lease", f)
	row("gubernator GLOBAL", g)
	held := "held"
	if f.over > 0 {
		held = fmt.Sprintf("FAILED in %d windows", f.over)
	}
	fmt.Fprintf(&b, "\nfloodgate's stated bound (a leased fixed window: at most its limit, %d, in every window): %s, in %d of %d windows; the most any window admitted was %.1f%% of the limit.\n\n", r.limit, held, f.windows-f.over, f.windows, 100*f.maxF)
	fmt.Fprintf(&b, "gubernator states no bound. As measured, the most any window admitted was %.1f%% of the limit (%+.1f%%); %d of %d windows were over it, by %d units in all; a whole window admitted %.1f%% of the limit on average.",
		100*g.maxF, 100*(g.maxF-1), g.over, g.windows, g.excess, 100*g.meanF)
	if g.byTime+g.unplaced > 0 {
		fmt.Fprintf(&b, " %d of its admissions were answered from a non-owner's own bucket (made before the owner's state reached it), which names none of the owner's windows: %d of them placed by the time of the call, %d not placed (their calls overlapped the moments around a window's start, before the owner's first answer in it, when either window could have held them; not counted above).", g.byTime+g.unplaced, g.byTime, g.unplaced)
	}
	b.WriteString("\n")
	return b.String()
}

// short rounds d to three significant digits.
func short(d time.Duration) time.Duration {
	unit := time.Duration(1)
	for d >= 1000*unit {
		unit *= 10
	}
	return d.Round(unit)
}

// loadavg returns the first three fields of /proc/loadavg.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

const (
	docsBegin = "<!-- gubernator: begin -->"
	docsEnd   = "<!-- gubernator: end -->"
)

// writeDocs replaces what is between the gubernator markers of the file
// at path with body.
func writeDocs(path, body string) error {
	return docblock.Replace(path, docsBegin, docsEnd, "\n<!-- generated by `make bench-gubernator` (bench/gubernator): edit the generator, not this block -->\n\n"+body+"\n")
}

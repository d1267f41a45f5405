// Command peerbench runs floodgate and its peers through the same workloads
// on the same Redis, in interleaved rounds, and writes the tables and charts
// of docs/PERFORMANCE.md's "Peers" section. `make bench` runs it with the
// Redis harness up; from this module's folder:
//
//	go run ./cmd/peerbench                       # print the tables
//	go run ./cmd/peerbench -docs ../docs/PERFORMANCE.md -img ../docs/img
//	go run ./cmd/peerbench -long ...             # more and longer rounds
//	go run ./cmd/peerbench -json run.json ...    # keep the raw figures
//	go run ./cmd/peerbench -from run.json -docs ../docs/PERFORMANCE.md -img ../docs/img
//
// The Redis addresses come from FLOODGATE_REDIS_ADDR and
// FLOODGATE_REDIS_CLUSTER_ADDRS (`scripts/redis-harness.sh env`), or the
// harness's default ports. Keys live under "peerbench:<pid>:" and expire
// within seconds; nothing is flushed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "peerbench:", err)
		}
		os.Exit(1)
	}
}

type options struct {
	rounds, memRounds    int
	duration, warmup     time.Duration
	memBenchtime         time.Duration
	concs                []int
	backends, workloads  []string
	contenders           []string
	redis, memory, probe bool
	docs, img, jsonOut   string
	from                 string
	waitLoad             float64
	waitMax              time.Duration
	memContenders        []string
	long                 bool
	explicit             map[string]bool
	args                 []string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("peerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved `rounds` of every Redis contender per cell")
	fs.DurationVar(&o.duration, "duration", 700*time.Millisecond, "measured `time` of one Redis run")
	fs.DurationVar(&o.warmup, "warmup", 150*time.Millisecond, "unmeasured warm-up before each Redis run")
	concs := fs.String("conc", "1,16,64,256", "comma-separated concurrencies (callers in flight)")
	backends := fs.String("backends", "standalone,cluster", "comma-separated Redis backends: standalone, cluster")
	workloads := fs.String("workloads", "random,hot", "comma-separated workloads: random (10,000 keys), hot (one key)")
	contenders := fs.String("contenders", strings.Join(bench.RedisContenderIDs, ","), "comma-separated Redis contenders")
	memContenders := fs.String("mem-contenders", "fg-tb,fg-swl,x-time-rate,sethvargo,ulule", "comma-separated in-process contenders")
	fs.BoolVar(&o.redis, "redis", true, "run the Redis comparison")
	fs.BoolVar(&o.memory, "memory", true, "run the in-process comparison")
	fs.BoolVar(&o.probe, "probe", true, "measure Redis memory per key (standalone)")
	fs.IntVar(&o.memRounds, "mem-rounds", 3, "interleaved `rounds` of every in-process contender per workload")
	fs.DurationVar(&o.memBenchtime, "mem-benchtime", 300*time.Millisecond, "benchtime of one in-process benchmark")
	fs.BoolVar(&o.long, "long", false, "longer runs for steadier figures: -rounds 5 -duration 3s -mem-rounds 5 -mem-benchtime 1s (explicit flags win)")
	fs.StringVar(&o.docs, "docs", "", "rewrite the generated block of this markdown `file` (docs/PERFORMANCE.md); default: print it")
	fs.StringVar(&o.img, "img", "", "write the charts (PNG and SVG) into this `folder`, linked from -docs")
	fs.StringVar(&o.jsonOut, "json", "", "write the raw figures to this `file`")
	fs.StringVar(&o.from, "from", "", "render the tables and charts from a -json `file` instead of measuring")
	fs.Float64Var(&o.waitLoad, "wait-load", 0, "before measuring, wait until the 1-minute load average is below this (0: do not wait)")
	fs.DurationVar(&o.waitMax, "wait-max", 5*time.Minute, "give up waiting for -wait-load after this long, and measure anyway")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.explicit = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.explicit[f.Name] = true })
	if o.long {
		for name, v := range map[string]any{"rounds": 5, "duration": 3 * time.Second, "mem-rounds": 5, "mem-benchtime": time.Second} {
			if o.explicit[name] {
				continue
			}
			switch name {
			case "rounds":
				o.rounds = v.(int)
			case "duration":
				o.duration = v.(time.Duration)
			case "mem-rounds":
				o.memRounds = v.(int)
			case "mem-benchtime":
				o.memBenchtime = v.(time.Duration)
			}
		}
	}
	for _, c := range split(*concs) {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-conc: %q is not a positive integer", c)
		}
		o.concs = append(o.concs, n)
	}
	o.backends, o.workloads, o.contenders, o.memContenders = split(*backends), split(*workloads), split(*contenders), split(*memContenders)
	for _, b := range o.backends {
		if b != "standalone" && b != "cluster" {
			return nil, fmt.Errorf("-backends: %q is not standalone or cluster", b)
		}
	}
	for _, w := range o.workloads {
		if w != "random" && w != "hot" {
			return nil, fmt.Errorf("-workloads: %q is not random or hot", w)
		}
	}
	for _, c := range o.contenders {
		if !slices.Contains(bench.RedisContenderIDs, c) && !slices.Contains(bench.UnguardedContenderIDs, c) {
			return nil, fmt.Errorf("-contenders: %q is not one of %s", c, strings.Join(append(slices.Clone(bench.RedisContenderIDs), bench.UnguardedContenderIDs...), ", "))
		}
	}
	if o.rounds < 1 || o.memRounds < 1 {
		return nil, errors.New("-rounds and -mem-rounds must be at least 1")
	}
	return o, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	var rep *bench.Report
	if o.from != "" {
		b, err := os.ReadFile(o.from)
		if err != nil {
			return err
		}
		rep = &bench.Report{}
		if err := json.Unmarshal(b, rep); err != nil {
			return fmt.Errorf("%s: %w", o.from, err)
		}
	} else {
		if rep, err = measure(ctx, o, stderr); err != nil {
			return err
		}
		if o.jsonOut != "" {
			b, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
				return err
			}
			fmt.Fprintln(stderr, "wrote", o.jsonOut)
		}
	}
	imgRel := ""
	if o.img != "" {
		files, err := rep.WriteCharts(o.img)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintln(stderr, "wrote", f)
		}
		imgRel = o.img
		if o.docs != "" {
			if rel, err := filepath.Rel(filepath.Dir(o.docs), o.img); err == nil {
				imgRel = filepath.ToSlash(rel)
			}
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md, imgRel); err != nil {
		return err
	}
	if o.docs == "" {
		_, err := stdout.Write(md.Bytes())
		return err
	}
	if err := bench.UpdateFile(o.docs, md.Bytes()); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "updated", o.docs)
	return nil
}

// measure runs everything o selects and returns the report.
func measure(ctx context.Context, o *options, stderr io.Writer) (*bench.Report, error) {
	if o.waitLoad > 0 {
		waitForLoad(ctx, o.waitLoad, o.waitMax, stderr)
	}
	rep := &bench.Report{Meta: meta(o)}
	if o.redis || o.probe {
		if err := measureRedis(ctx, o, rep, stderr); err != nil {
			return nil, err
		}
	}
	if o.memory {
		if err := measureMemory(ctx, o, rep, stderr); err != nil {
			return nil, err
		}
	}
	rep.Meta.LoadEnd = loadavg()
	return rep, nil
}

func measureRedis(ctx context.Context, o *options, rep *bench.Report, stderr io.Writer) error {
	prefix := "peerbench:" + strconv.Itoa(os.Getpid()) + ":"
	var backends []bench.Backend
	for _, b := range bench.Backends() {
		if slices.Contains(o.backends, b.Name) {
			backends = append(backends, b)
		}
	}
	var workloads []bench.Workload
	for _, w := range bench.Workloads() {
		if slices.Contains(o.workloads, w.Name) {
			workloads = append(workloads, w)
		}
	}
	total := len(backends) * len(workloads) * len(o.concs) * o.rounds * len(o.contenders)
	if !o.redis {
		total = 0
	}
	done := 0
	start := time.Now()
	for _, b := range backends {
		nodes, err := bench.OpenNodes(ctx, b)
		if err != nil {
			return err
		}
		defer nodes.Close()
		if rep.Meta.Redis == "" {
			rep.Meta.Redis = nodes.Version(ctx)
		}
		if o.probe && b.Name == "standalone" {
			swl, keys, err := bench.ProbeMemory(ctx, b, nodes, prefix+"probe:")
			if err != nil {
				return fmt.Errorf("memory probe: %w", err)
			}
			rep.SWL, rep.KeyMemory = &swl, keys
			fmt.Fprintf(stderr, "memory: sliding-window log %d bytes at 1 entry, %d at 100 (%s): %.1f bytes per entry\n", swl.One, swl.Hundred, swl.Encoding, swl.PerEntry())
		}
		if !o.redis {
			continue
		}
		for _, w := range workloads {
			for _, conc := range o.concs {
				// Fresh clients for every cell, closed after it: a client
				// that served many callers may keep running differently
				// (rueidis turns on background pipelining for good once
				// calls overlap), and each cell should measure an
				// application running at that concurrency.
				cs := make([]*bench.Contender, len(o.contenders))
				for i, id := range o.contenders {
					c, err := bench.NewRedisContender(id, b, prefix+id+":")
					if err != nil {
						for _, c := range cs[:i] {
							c.Close()
						}
						return fmt.Errorf("%s on %s: %w", id, b.Name, err)
					}
					cs[i] = c
				}
				results := make([]bench.RedisResult, len(cs))
				for i, c := range cs {
					results[i] = bench.RedisResult{Backend: b.Name, Workload: w.Name, Concurrency: conc, Contender: c.ID, Name: c.Name}
				}
				err := runCell(ctx, o, nodes, w, conc, cs, results, func(i, round int, s bench.Sample) {
					done++
					eta := time.Duration(float64(time.Since(start)) / float64(done) * float64(total-done)).Round(time.Second)
					fmt.Fprintf(stderr, "[%d/%d, %s left] %s %s %d callers, round %d: %-34s %8s/s  p99 %6s ms  cpu %5s s/100k  allocs %5.1f  admitted %5.1f%%  errors %d\n",
						done, total, eta, b.Name, w.Name, conc, round+1, cs[i].Name, fmtK(s.Rate()), strconv.FormatFloat(float64(s.P99)/1e6, 'f', 2, 64),
						strconv.FormatFloat(s.CPUPer100k(), 'f', 2, 64), s.AllocsPerDecision(), 100*s.AllowedShare(), s.Errors)
				})
				for _, c := range cs {
					c.Close()
				}
				if err != nil {
					return err
				}
				rep.Redis = append(rep.Redis, results...)
			}
		}
	}
	return nil
}

// runCell runs o.rounds rounds of every contender in one cell, appending
// each sample to its result and reporting it to progress.
func runCell(ctx context.Context, o *options, nodes *bench.Nodes, w bench.Workload, conc int, cs []*bench.Contender, results []bench.RedisResult, progress func(i, round int, s bench.Sample)) error {
	for round := range o.rounds {
		// Rotate the order, so no contender always runs first (or right
		// after the same neighbour).
		for k := range cs {
			i := (k + round) % len(cs)
			s, err := bench.Run(ctx, cs[i], bench.Load{Keys: w.Keys, Concurrency: conc, Duration: o.duration, Warmup: o.warmup}, nodes)
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			results[i].Samples = append(results[i].Samples, s)
			progress(i, round, s)
		}
	}
	return nil
}

func measureMemory(ctx context.Context, o *options, rep *bench.Report, stderr io.Writer) error {
	testing.Init()
	if err := flag.Set("test.benchtime", o.memBenchtime.String()); err != nil {
		return err
	}
	var cs []bench.MemoryContender
	for _, c := range bench.MemoryContenders() {
		if slices.Contains(o.memContenders, c.ID) {
			cs = append(cs, c)
		}
	}
	for _, w := range bench.MemoryWorkloads {
		allows := make([]func(string) bool, len(cs))
		results := make([]bench.MemResult, len(cs))
		for i, c := range cs {
			allow, closeFn := c.New()
			defer closeFn()
			for _, k := range bench.Keys(w.Keys) {
				allow(k)
			}
			allows[i] = allow
			results[i] = bench.MemResult{Workload: w.Name, Contender: c.ID, Name: c.Name}
		}
		for round := range o.memRounds {
			for k := range cs {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				i := (k + round) % len(cs)
				var admitted float64
				r := testing.Benchmark(bench.MemoryBench(allows[i], w, &admitted))
				s := bench.MemSample{NsPerOp: float64(r.T.Nanoseconds()) / float64(r.N), AllocsPerOp: float64(r.MemAllocs) / float64(r.N), BytesPerOp: r.AllocedBytesPerOp(), Admitted: admitted}
				results[i].Samples = append(results[i].Samples, s)
				fmt.Fprintf(stderr, "in process: %s, round %d: %-40s %8.1f ns  %.2f allocs  admitted %.1f%%\n", w.Name, round+1, cs[i].Name, s.NsPerOp, s.AllocsPerOp, 100*admitted)
			}
		}
		rep.InProcess = append(rep.InProcess, results...)
	}
	rep.Meta.MemRounds, rep.Meta.MemBenchFor = o.memRounds, o.memBenchtime
	return nil
}

func fmtK(v float64) string { return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k" }

// meta describes the machine, the versions and the command.
func meta(o *options) bench.Meta {
	m := bench.Meta{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Machine:    machine(),
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		MemTotal:   memTotal(),
		Go:         runtime.Version(),
		Commit:     commit(),
		LoadStart:  loadavg(),
		Rounds:     o.rounds,
		Duration:   o.duration,
		Warmup:     o.warmup,
		Command:    command(o.args),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		want := []string{"github.com/redis/rueidis", "github.com/redis/go-redis/v9", "github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3", "github.com/throttled/throttled/v2", "github.com/sethvargo/go-limiter", "golang.org/x/time"}
		for _, w := range want {
			for _, d := range bi.Deps {
				if d.Path == w {
					m.Versions = append(m.Versions, d.Path+" "+d.Version)
				}
			}
		}
	}
	return m
}

// command is the command line that reproduces the run: `make bench` (with
// PEERBENCHFLAGS for the flags besides -docs and -img) when make ran it,
// and the driver's own command line from the module's folder.
func command(args []string) string {
	var b, extra strings.Builder
	b.WriteString("cd bench && go run ./cmd/peerbench")
	for i := 0; i < len(args); i++ {
		a := quote(args[i])
		b.WriteString(" " + a)
		switch args[i] {
		case "-docs", "--docs", "-img", "--img":
			if i+1 < len(args) {
				i++
				b.WriteString(" " + quote(args[i]))
			}
			continue
		}
		if strings.HasPrefix(args[i], "-docs=") || strings.HasPrefix(args[i], "-img=") {
			continue
		}
		if extra.Len() > 0 {
			extra.WriteByte(' ')
		}
		extra.WriteString(args[i])
	}
	if os.Getenv("MAKELEVEL") == "" {
		return b.String()
	}
	mk := "make bench"
	if extra.Len() > 0 {
		mk += " PEERBENCHFLAGS=" + quote(extra.String())
	}
	return mk + "\n# which runs, with the harness's addresses in the environment:\n" + b.String()
}

// quote quotes a for a POSIX shell when it needs it.
func quote(a string) string {
	if a == "" || strings.ContainsAny(a, " \t'\"$`\\*?;&|<>()") {
		return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return a
}

func machine() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.Join(strings.Fields(v), " ")
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s Linux %s, %s", runtime.GOOS, runtime.GOARCH, strings.TrimSpace(string(kernel)), model)
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "memory unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err == nil {
				return fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	return "memory unknown"
}

// loadavg returns the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func load1() float64 {
	v, err := strconv.ParseFloat(strings.Split(loadavg(), ",")[0], 64)
	if err != nil {
		return 0
	}
	return v
}

// waitForLoad waits until the 1-minute load average is below limit, or max
// has passed.
func waitForLoad(ctx context.Context, limit float64, max time.Duration, stderr io.Writer) {
	deadline := time.Now().Add(max)
	for l := load1(); l >= limit; l = load1() {
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "load average still %.2f after %s: measuring anyway\n", l, max)
			return
		}
		fmt.Fprintf(stderr, "load average %.2f >= %.2f: waiting\n", l, limit)
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
}

// commit returns floodgate's commit, marked when the store sources have
// uncommitted changes.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown commit"
	}
	c := strings.TrimSpace(string(out))
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err == nil {
		root := strings.TrimSpace(string(top))
		st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--", "redisstore", "memory", "algorithm", ":(glob)*.go").Output()
		if err == nil && len(bytes.TrimSpace(st)) > 0 {
			c += " (with uncommitted changes to the stores)"
		}
	}
	return "commit " + c
}

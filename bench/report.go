package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is everything one run of the driver measured, and what it needs
// to write the tables and charts.
type Report struct {
	Meta      Meta
	Redis     []RedisResult `json:",omitempty"`
	SWL       *SWLMemory    `json:",omitempty"`
	KeyMemory []KeyMemory   `json:",omitempty"`
	InProcess []MemResult   `json:",omitempty"`
}

// Meta says where, when and how the figures were taken.
type Meta struct {
	Date        string
	Machine     string // kernel, CPU model
	CPUs        int
	GOMAXPROCS  int
	MemTotal    string
	Go          string
	Redis       string
	Commit      string
	Versions    []string // "module version" of floodgate's clients and the peers
	Command     string   // the command that reproduces the run
	LoadStart   string   // /proc/loadavg before and after
	LoadEnd     string
	Rounds      int
	Duration    time.Duration
	Warmup      time.Duration
	MemRounds   int
	MemBenchFor time.Duration
}

// RedisResult is every round of one contender in one cell.
type RedisResult struct {
	Backend     string
	Workload    string
	Concurrency int
	Contender   string // ID
	Name        string
	Samples     []Sample
}

// MemResult is every round of one in-process contender on one workload.
type MemResult struct {
	Workload  string
	Contender string // ID
	Name      string
	Samples   []MemSample
}

// MemSample is one testing.Benchmark result.
type MemSample struct {
	NsPerOp     float64
	AllocsPerOp float64 // not rounded down, unlike testing's AllocsPerOp
	BytesPerOp  int64
	Admitted    float64 // share of decisions that admitted, 0 to 1
}

// Stat is the median and range of a figure over rounds.
type Stat struct{ Med, Lo, Hi float64 }

// Stats returns the median (the mean of the middle two for an even count),
// minimum and maximum of xs; NaN for none.
func Stats(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{med, s[0], s[len(s)-1]}
}

// Of returns the Stat of f over r's samples.
func (r RedisResult) Of(f func(Sample) float64) Stat {
	xs := make([]float64, len(r.Samples))
	for i, s := range r.Samples {
		xs[i] = f(s)
	}
	return Stats(xs)
}

// Of returns the Stat of f over r's samples.
func (r MemResult) Of(f func(MemSample) float64) Stat {
	xs := make([]float64, len(r.Samples))
	for i, s := range r.Samples {
		xs[i] = f(s)
	}
	return Stats(xs)
}

// Figures of a sample, for Of.
var (
	decRate   = func(s Sample) float64 { return s.Rate() }
	p50       = func(s Sample) float64 { return ms(s.P50) }
	p99       = func(s Sample) float64 { return ms(s.P99) }
	p999      = func(s Sample) float64 { return ms(s.P999) }
	cpu100k   = func(s Sample) float64 { return s.CPUPer100k() }
	script    = func(s Sample) float64 { return s.ScriptsPer100k() }
	clientCPU = func(s Sample) float64 { return s.ClientCPUPer100k() }
	cmdsPer   = func(s Sample) float64 { return s.CommandsPerDecision() }
	allocs    = func(s Sample) float64 { return s.AllocsPerDecision() }
	admitted  = func(s Sample) float64 { return s.AllowedShare() }
	errs      = func(s Sample) float64 { return float64(s.Errors) }
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// find returns the result of contender id in a cell.
func (r *Report) find(backend, workload string, conc int, id string) (RedisResult, bool) {
	for _, x := range r.Redis {
		if x.Backend == backend && x.Workload == workload && x.Concurrency == conc && x.Contender == id {
			return x, true
		}
	}
	return RedisResult{}, false
}

// cells returns the backends, workloads and concurrencies measured, in
// the order they were run.
func (r *Report) cells() (backends, workloads []string, concs []int) {
	for _, x := range r.Redis {
		if !slices.Contains(backends, x.Backend) {
			backends = append(backends, x.Backend)
		}
		if !slices.Contains(workloads, x.Workload) {
			workloads = append(workloads, x.Workload)
		}
		if !slices.Contains(concs, x.Concurrency) {
			concs = append(concs, x.Concurrency)
		}
	}
	slices.Sort(concs)
	return backends, workloads, concs
}

// contenders returns the IDs and names of the Redis contenders measured.
func (r *Report) contenders() (ids []string, names map[string]string) {
	names = map[string]string{}
	for _, x := range r.Redis {
		if !slices.Contains(ids, x.Contender) {
			ids = append(ids, x.Contender)
			names[x.Contender] = x.Name
		}
	}
	slices.SortStableFunc(ids, func(a, b string) int {
		return cmp.Compare(indexOr(RedisContenderIDs, a), indexOr(RedisContenderIDs, b))
	})
	return ids, names
}

func indexOr(list []string, s string) int {
	if i := slices.Index(list, s); i >= 0 {
		return i
	}
	return len(list)
}

var workloadTitles = map[string]string{
	"random": "10,000 random keys (mostly admitted)",
	"hot":    "one hot key (mostly denied)",
}

// ---------------------------------------------------------------- targets --

// Verdict is one target of issue 8 checked against the figures.
type Verdict struct {
	Target   string
	Measured string
	Met      bool
	// Known is false when the figures for it were not measured.
	Known bool
}

// ratioVs compares floodgate contender fg with peer in one cell: the ratio
// of median decisions/s, the range of the per-round ratios (rounds were
// interleaved, so round i of both ran moments apart), and the median p99
// of each.
type ratioVs struct {
	ratio, lo, hi  float64
	fgP99, peerP99 float64
}

func compare(fg, peer RedisResult) ratioVs {
	n := min(len(fg.Samples), len(peer.Samples))
	per := make([]float64, n)
	for i := range n {
		per[i] = fg.Samples[i].Rate() / peer.Samples[i].Rate()
	}
	st := Stats(per)
	return ratioVs{
		ratio: fg.Of(decRate).Med / peer.Of(decRate).Med, lo: st.Lo, hi: st.Hi,
		fgP99: fg.Of(p99).Med, peerP99: peer.Of(p99).Med,
	}
}

// TargetConcurrencies are the concurrencies issue 8 sets its throughput
// and CPU targets at.
var TargetConcurrencies = []int{64, 256}

// Throughput and CPU targets of issue 8.
const (
	TargetVsRedisRate = 1.5
	TargetVsUlule     = 1.2
	TargetCPU         = 1.0 // Redis CPU seconds per 100k decisions
	TargetVsFloor     = 1.3 // Redis CPU per decision over the algorithm's command floor
	TargetSWLBytes    = 24  // bytes per entry at 100 entries
	TargetMemoryNs    = 100 // ns per decision, 100k keys in parallel
)

// targetCell is one of floodgate's results in a cell at a target
// concurrency.
type targetCell struct {
	backend, workload string
	conc              int
	fg                RedisResult
}

// targetCells returns floodgate's token bucket and sliding-window log
// results in every cell at the target concurrencies, in table order.
func (r *Report) targetCells() []targetCell {
	backends, workloads, _ := r.cells()
	var out []targetCell
	for _, b := range backends {
		for _, w := range workloads {
			for _, c := range TargetConcurrencies {
				for _, id := range []string{"fg-tb", "fg-swl"} {
					if fg, ok := r.find(b, w, c, id); ok {
						out = append(out, targetCell{b, w, c, fg})
					}
				}
			}
		}
	}
	return out
}

// ThroughputVerdicts checks floodgate's token bucket and sliding-window log
// against redis_rate (>= 1.5x) and ulule (>= 1.2x), each at a lower p99,
// in every cell at the target concurrencies.
func (r *Report) ThroughputVerdicts() []ThroughputRow {
	var rows []ThroughputRow
	for _, t := range r.targetCells() {
		row := ThroughputRow{Backend: t.backend, Workload: t.workload, Concurrency: t.conc, Contender: t.fg.Name}
		if rr, ok := r.find(t.backend, t.workload, t.conc, "redis_rate"); ok {
			v := compare(t.fg, rr)
			row.VsRedisRate = &v
		}
		if ul, ok := r.find(t.backend, t.workload, t.conc, "ulule"); ok {
			v := compare(t.fg, ul)
			row.VsUlule = &v
		}
		rows = append(rows, row)
	}
	return rows
}

// ThroughputRow is floodgate against the two named peers in one cell.
type ThroughputRow struct {
	Backend, Workload string
	Concurrency       int
	Contender         string
	VsRedisRate       *ratioVs
	VsUlule           *ratioVs
}

// Met reports whether both comparisons meet their targets.
func (t ThroughputRow) Met() bool {
	return t.VsRedisRate != nil && t.VsUlule != nil &&
		t.VsRedisRate.ratio >= TargetVsRedisRate && t.VsRedisRate.fgP99 < t.VsRedisRate.peerP99 &&
		t.VsUlule.ratio >= TargetVsUlule && t.VsUlule.fgP99 < t.VsUlule.peerP99
}

// --------------------------------------------------------------- markdown --

// WriteMarkdown writes the generated part of docs/PERFORMANCE.md: how the
// figures were taken, the targets, the Redis tables, the memory per key
// and the in-process tables. imgDir is the charts' folder relative to the
// document ("" for no charts).
func (r *Report) WriteMarkdown(w io.Writer, imgDir string) error {
	p := &printer{w: w}
	r.writeMeta(p)
	r.writeTargets(p)
	if len(r.Redis) > 0 {
		r.writeRedis(p, imgDir)
	}
	if r.SWL != nil || len(r.KeyMemory) > 0 {
		r.writeKeyMemory(p)
	}
	if len(r.InProcess) > 0 {
		r.writeInProcess(p, imgDir)
	}
	return p.err
}

// printer writes lines and keeps the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

func (r *Report) writeMeta(p *printer) {
	m := r.Meta
	p.f("Measured %s on %s (%d CPUs, GOMAXPROCS %d, %s); %s, Redis %s; floodgate %s.", m.Date, m.Machine, m.CPUs, m.GOMAXPROCS, m.MemTotal, m.Go, m.Redis, m.Commit)
	if len(m.Versions) > 0 {
		p.f("Clients and peers: %s.", strings.Join(m.Versions, ", "))
	}
	p.f("Load average (1, 5, 15 min) at the start: %s; at the end: %s.", m.LoadStart, m.LoadEnd)
	p.f("")
	p.f("Reproduce with the harness up (`make bench` starts it):")
	p.f("")
	p.f("```sh")
	p.f("%s", m.Command)
	p.f("```")
	p.f("")
	if len(r.Redis) > 0 {
		p.f("Redis runs: %d interleaved rounds (every contender once per round, in a rotating order, before the next round) of %s each after %s of unmeasured warm-up, per cell; tables give the median and, for decisions/s, the range over the rounds. Each caller sends its next request when the previous one is answered (closed loop) and picks its key uniformly at random. Every contender enforces %d requests per %s per key (a bucket of %d refilled at %d/s for the bucket-shaped ones). Each cell starts every contender with fresh clients: floodgate through redisstore's rueidis client as configured by default (one auto-pipelined connection per node, a 20µs flush delay), the floor through rueidis set up the same way, the peers through go-redis v9 with its defaults (a pool of 10 connections per GOMAXPROCS). The load generator, the client libraries and Redis share the machine's cores.",
			m.Rounds, m.Duration, m.Warmup, Quota, Window, Quota, Quota)
		p.f("")
	}
}

func (r *Report) writeTargets(p *printer) {
	p.f("### Targets of issue 8")
	p.f("")
	p.f("| target | measured (medians of this run) | verdict |")
	p.f("|---|---|---|")
	if rows := r.ThroughputVerdicts(); len(rows) > 0 {
		met := 0
		for _, t := range rows {
			if t.Met() {
				met++
			}
		}
		p.f("| floodgate TB and SWL on Redis at 64 and 256 callers: >= %.1fx redis_rate and >= %.1fx ulule decisions/s, at a lower p99 | %d of %d cells meet both (table below) | %s |",
			TargetVsRedisRate, TargetVsUlule, met, len(rows), yes(met == len(rows)))
	}
	if cpu := r.cpuVerdicts(); len(cpu) > 0 {
		worst, where := 0.0, ""
		for _, v := range cpu {
			if v.cpu > worst {
				worst, where = v.cpu, v.where
			}
		}
		p.f("| Redis CPU per decision <= 10 µs (%.1f s per 100k) for floodgate TB and SWL at 64 and 256 callers | worst %.2f s per 100k (%s) | %s |", TargetCPU, worst, where, yes(worst <= TargetCPU))
	}
	if rows := r.FloorVerdicts(); len(rows) > 0 {
		worst, where := 0.0, ""
		for _, v := range rows {
			if v.Ratio() > worst {
				worst, where = v.Ratio(), fmt.Sprintf("%s, %s, %s, %d callers", v.Contender, v.Backend, v.Workload, v.Concurrency)
			}
		}
		p.f("| Redis CPU per decision of floodgate TB and SWL within %.1fx of the commands each must run, random keys, at 64 and 256 callers | worst %s (%s; table below) | %s |", TargetVsFloor, fmtRatio(worst), where, yes(worst <= TargetVsFloor))
	}
	if s := r.SWL; s != nil {
		p.f("| sliding-window log <= %d bytes per entry while a listpack (100 entries) | %.1f bytes per entry (MEMORY USAGE %d / 100, encoding %s); %.1f bytes marginal | %s |",
			TargetSWLBytes, s.PerEntry(), s.Hundred, s.Encoding, s.Marginal(), yes(s.PerEntry() <= TargetSWLBytes && s.Encoding == "listpack"))
	}
	if fg, ok := r.findMem(MemoryWorkloads[0].Name, "fg-tb"); ok {
		ns, al := fg.Of(func(s MemSample) float64 { return s.NsPerOp }), fg.Of(func(s MemSample) float64 { return float64(s.AllocsPerOp) })
		by := fg.Of(func(s MemSample) float64 { return float64(s.BytesPerOp) })
		measured := fmt.Sprintf("token bucket %.1f ns (%.1f–%.1f), %s allocs and %.0f bytes per decision", ns.Med, ns.Lo, ns.Hi, fmtAllocs(al.Med, by.Med), by.Med)
		// b.RunParallel itself allocates about ten times per run (an empty
		// body counts as many), a few millionths per decision: "0 allocs"
		// means none that shows at two decimals, and 0 bytes per op.
		met := ns.Med < TargetMemoryNs && al.Hi < 0.005 && by.Hi == 0
		if sv, ok := r.findMem(MemoryWorkloads[0].Name, "sethvargo"); ok {
			sns := sv.Of(func(s MemSample) float64 { return s.NsPerOp })
			measured += fmt.Sprintf("; sethvargo %.1f ns (%.1f–%.1f)", sns.Med, sns.Lo, sns.Hi)
			met = met && ns.Med < sns.Med
		}
		p.f("| memory store < %d ns and 0 allocs per decision on 100k keys in parallel, ahead of sethvargo/go-limiter | %s | %s |", TargetMemoryNs, measured, yes(met))
	}
	p.f("")
	if rows := r.ThroughputVerdicts(); len(rows) > 0 {
		p.f("Floodgate against redis_rate and ulule/limiter, cell by cell: the ratio of median decisions/s (with the range of the per-round ratios) and the median p99 of each side.")
		p.f("")
		p.f("| backend | workload | callers | floodgate | vs redis_rate | p99 ms (fg / redis_rate) | vs ulule | p99 ms (fg / ulule) | verdict |")
		p.f("|---|---|---|---|---|---|---|---|---|")
		for _, t := range rows {
			rr, ul := "–", "–"
			rrP, ulP := "–", "–"
			if v := t.VsRedisRate; v != nil {
				rr = fmt.Sprintf("%s (%s–%s)", fmtRatio(v.ratio), fmtRatio(v.lo), fmtRatio(v.hi))
				rrP = fmtMs(v.fgP99) + " / " + fmtMs(v.peerP99)
			}
			if v := t.VsUlule; v != nil {
				ul = fmt.Sprintf("%s (%s–%s)", fmtRatio(v.ratio), fmtRatio(v.lo), fmtRatio(v.hi))
				ulP = fmtMs(v.fgP99) + " / " + fmtMs(v.peerP99)
			}
			p.f("| %s | %s | %d | %s | %s | %s | %s | %s | %s |", t.Backend, t.Workload, t.Concurrency, t.Contender, rr, rrP, ul, ulP, yes(t.Met()))
		}
		p.f("")
	}
	r.writeCPUBounds(p)
	r.writeFloors(p)
}

type cpuVerdict struct {
	where string
	cpu   float64
}

func (r *Report) cpuVerdicts() []cpuVerdict {
	var out []cpuVerdict
	for _, x := range r.Redis {
		if (x.Contender == "fg-tb" || x.Contender == "fg-swl") && slices.Contains(TargetConcurrencies, x.Concurrency) {
			if c := x.Of(cpu100k).Med; c >= 0 {
				out = append(out, cpuVerdict{fmt.Sprintf("%s, %s, %s, %d callers", x.Name, x.Backend, x.Workload, x.Concurrency), c})
			}
		}
	}
	return out
}

func (r *Report) writeRedis(p *printer, imgDir string) {
	backends, workloads, concs := r.cells()
	ids, _ := r.contenders()
	p.f("### Redis: decisions per second and latency")
	p.f("")
	if imgDir != "" {
		p.f("![Decisions per second by callers, standalone and cluster, random keys and one hot key](%s/%s.png)", imgDir, ChartThroughput)
		p.f("")
		p.f("![p99 latency by callers](%s/%s.png)", imgDir, ChartP99)
		p.f("")
	}
	p.f("Columns: decisions/s (median, and the range over the rounds); latency of one call as the caller sees it (p50, p99, p99.9, ms); Redis CPU seconds per 100,000 decisions (`INFO cpu`, user + sys, summed over every node, the cluster's replicas included) and the time spent inside scripts (the `usec` of EVAL and EVALSHA in `INFO commandstats`, which Redis measures in wall-clock time: on a busy machine it includes moments Redis waited for a core; the rest of the CPU goes to reading requests, writing replies and the event loop); this process's CPU seconds per 100,000 decisions (`getrusage`, user + sys: the callers, the client library and its goroutines); Redis commands processed per decision (`INFO stats`, summed the same way: more than the contender sends means other clients used the server during the run, or replicas applying writes); Go heap allocations per decision (the whole process: caller, client library and its goroutines); the share of decisions that admitted; calls that failed.")
	p.f("")
	for _, b := range backends {
		for _, w := range workloads {
			p.f("#### %s, %s", b, workloadTitles[w])
			p.f("")
			p.f("| callers | contender | decisions/s | range | p50 | p99 | p99.9 | Redis CPU s/100k | in scripts s/100k | client CPU s/100k | cmds/decision | allocs/decision | admitted | errors |")
			p.f("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
			for _, c := range concs {
				for _, id := range ids {
					x, ok := r.find(b, w, c, id)
					if !ok {
						continue
					}
					rt := x.Of(decRate)
					e := x.Of(errs)
					errCell := fmtFloat(e.Med, 0)
					if e.Hi > 0 {
						errCell = fmt.Sprintf("%s (max %s)", fmtFloat(e.Med, 0), fmtFloat(e.Hi, 0))
					}
					p.f("| %d | %s | %s | %s–%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
						c, x.Name, fmtRate(rt.Med), fmtRate(rt.Lo), fmtRate(rt.Hi),
						fmtMs(x.Of(p50).Med), fmtMs(x.Of(p99).Med), fmtMs(x.Of(p999).Med),
						fmtFloat(x.Of(cpu100k).Med, 2), fmtFloat(x.Of(script).Med, 2), fmtFloat(x.Of(clientCPU).Med, 2), fmtFloat(x.Of(cmdsPer).Med, 2), fmtFloat(x.Of(allocs).Med, 1),
						fmtPct(x.Of(admitted).Med), errCell)
				}
			}
			p.f("")
			for _, id := range ids {
				if x, c, msg := r.firstError(b, w, concs, id); msg != "" {
					p.f("Errors of %s at %d callers, for example: `%s`", x, c, strings.ReplaceAll(msg, "`", "'"))
					p.f("")
				}
			}
		}
	}
}

// firstError returns the first error message of contender id in the cells
// of backend b and workload w, with its name and concurrency.
func (r *Report) firstError(b, w string, concs []int, id string) (name string, conc int, msg string) {
	for _, c := range concs {
		if x, ok := r.find(b, w, c, id); ok {
			for _, s := range x.Samples {
				if s.Err != "" {
					return x.Name, c, s.Err
				}
			}
		}
	}
	return "", 0, ""
}

func (r *Report) writeKeyMemory(p *printer) {
	p.f("### Redis memory per key")
	p.f("")
	if s := r.SWL; s != nil {
		p.f("floodgate's sliding-window log keeps each entry as an integer member equal to its score (the entry's time in microseconds), which a listpack stores as two integers. `MEMORY USAGE %s SAMPLES 0`: %d bytes with 1 entry, %d bytes with 100 (encoding %s; zset-max-listpack-entries is %s): %.1f bytes per entry all included, %.1f bytes for each entry after the first.",
			s.Key, s.One, s.Hundred, s.Encoding, s.MaxListpack, s.PerEntry(), s.Marginal())
		p.f("")
	}
	if len(r.KeyMemory) > 0 {
		p.f("Each contender's key after one decision (`MEMORY USAGE key SAMPLES 0`; the key's name counts, so its length is shown):")
		p.f("")
		p.f("| contender | key | name length | bytes | encoding |")
		p.f("|---|---|---:|---:|---|")
		for _, k := range r.KeyMemory {
			p.f("| %s | `%s` | %d | %d | %s |", k.Contender, k.Key, len(k.Key), k.Bytes, k.Encoding)
		}
		p.f("")
	}
}

func (r *Report) findMem(workload, id string) (MemResult, bool) {
	for _, x := range r.InProcess {
		if x.Workload == workload && x.Contender == id {
			return x, true
		}
	}
	return MemResult{}, false
}

func (r *Report) writeInProcess(p *printer, imgDir string) {
	m := r.Meta
	p.f("### In process: floodgate's memory store and the peers")
	p.f("")
	if imgDir != "" {
		p.f("![Nanoseconds per decision in process](%s/%s.png)", imgDir, ChartMemory)
		p.f("")
	}
	p.f("`testing.Benchmark` (%s per benchmark), %d rounds interleaved per workload; the median and range of ns per decision, the median allocations and bytes per decision, and the share admitted. Every contender allows %d per second per key; every key has state before the timing starts. Parallel runs use GOMAXPROCS (%d) goroutines.",
		m.MemBenchFor, m.MemRounds, MemQuota, m.GOMAXPROCS)
	p.f("")
	var workloads []string
	for _, x := range r.InProcess {
		if !slices.Contains(workloads, x.Workload) {
			workloads = append(workloads, x.Workload)
		}
	}
	p.f("| workload | contender | ns/decision | range | allocs | bytes | admitted |")
	p.f("|---|---|---:|---:|---:|---:|---:|")
	for _, w := range workloads {
		for _, x := range r.InProcess {
			if x.Workload != w {
				continue
			}
			ns := x.Of(func(s MemSample) float64 { return s.NsPerOp })
			p.f("| %s | %s | %.1f | %.1f–%.1f | %s | %.0f | %s |", w, x.Name, ns.Med, ns.Lo, ns.Hi,
				fmtAllocs(x.Of(func(s MemSample) float64 { return s.AllocsPerOp }).Med, x.Of(func(s MemSample) float64 { return float64(s.BytesPerOp) }).Med),
				x.Of(func(s MemSample) float64 { return float64(s.BytesPerOp) }).Med,
				fmtPct(x.Of(func(s MemSample) float64 { return s.Admitted }).Med))
		}
	}
	p.f("")
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
)

const benchSynopsis = `bench [--target store|http|grpc] [--concurrency N] [--keys N] [--duration D] [--requests N] [--json] ...

Load-tests a rate-limit store in process (--target store: the memory store,
Redis, a Redis Cluster or Sentinel, from --config or --store), or a running
'floodgate serve' over its HTTP API (--target http: POST /v1/check) or its
Envoy rate-limit gRPC service (--target grpc: ShouldRateLimit). With
--config and --rule, --target store decides each request as serve does:
through the engine (its over-limit cache, the rule's failure mode and
shadow) on the server's store keys; without --rule it calls the store's
AllowN directly ("raw AllowN (no engine)" in the summary). Callers
send requests in a closed loop (each waits for its answer before the next),
each for a key picked uniformly at random among --keys; --keys 1 is one hot
key. A live line on stderr shows the rate and p99 of the last second; the
summary (or --json) goes to stdout.

Examples:
  floodgate bench --store redis --algorithm sliding_window_log --limit 100 --window 1m
  floodgate bench --config floodgate.yaml --rule api --concurrency 256 --keys 1
  floodgate bench --target http --url http://127.0.0.1:8080 --rule api --duration 30s
  floodgate bench --target grpc --grpc-addr 127.0.0.1:8081 --domain edge --descriptor remote_address

Flags`

// benchOptions are the parsed flags of floodgate bench.
type benchOptions struct {
	target      string
	concurrency int
	keys        int
	keyPrefix   string
	duration    time.Duration
	requests    int64
	cost        int64
	timeout     time.Duration
	asJSON      bool
	quiet       bool

	// store target
	cfgPath    string
	store      string
	rule       string
	algorithm  string
	limit      int64
	window     time.Duration
	redisAddr  string
	redisAddrs string
	sentinels  string
	master     string

	// server targets
	url        string
	grpcAddr   string
	domain     string
	descriptor string
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", benchSynopsis, stderr)
	o := &benchOptions{}
	fs.StringVar(&o.target, "target", "store", "what to load: `store` (in process), http (a floodgate serve's POST /v1/check) or grpc (its Envoy ShouldRateLimit)")
	fs.IntVar(&o.concurrency, "concurrency", 64, "`callers` in flight")
	fs.IntVar(&o.keys, "keys", 10_000, "distinct `keys`, each request picking one uniformly at random (1: one hot key)")
	fs.StringVar(&o.keyPrefix, "key-prefix", "", "`prefix` of every key (default: bench-<random>-, so runs do not share state)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to run")
	fs.Int64Var(&o.requests, "requests", 0, "stop after `N` requests (or --duration, whichever comes first); 0: no count")
	fs.Int64Var(&o.cost, "cost", 1, "`cost` of each request")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "bound on one request (the store's own timeout applies too)")
	fs.BoolVar(&o.asJSON, "json", false, "print the summary as JSON")
	fs.BoolVar(&o.quiet, "quiet", false, "no live progress on stderr")
	fs.StringVar(&o.cfgPath, "config", "", "YAML config `file`: its store (--target store) and rules (--rule)")
	fs.StringVar(&o.store, "store", "", "`store` for --target store, overriding the config's: memory, redis, redis-cluster or redis-sentinel (default: the config's, or memory)")
	fs.StringVar(&o.rule, "rule", "", "rule `name`: from --config (--target store) or the server's (--target http; default its first rule)")
	fs.StringVar(&o.algorithm, "algorithm", "token_bucket", "--target store without --rule: the `algorithm` ("+strings.Join(algorithmlist.Names(), ", ")+")")
	fs.Int64Var(&o.limit, "limit", 100, "--target store without --rule: `N` requests per window, or the bucket's capacity (it refills N per window)")
	fs.DurationVar(&o.window, "window", time.Second, "--target store without --rule: the limit's `window`")
	fs.StringVar(&o.redisAddr, "redis-addr", "127.0.0.1:6379", "standalone Redis `host:port` (--store redis)")
	fs.StringVar(&o.redisAddrs, "redis-addrs", "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", "comma-separated cluster `nodes` (--store redis-cluster)")
	fs.StringVar(&o.sentinels, "sentinel-addrs", "127.0.0.1:26379", "comma-separated `sentinels` (--store redis-sentinel)")
	fs.StringVar(&o.master, "sentinel-master", "mymaster", "the `name` of the primary the sentinels monitor (--store redis-sentinel)")
	fs.StringVar(&o.url, "url", "http://"+config.DefaultListen, "base `URL` of floodgate serve (--target http)")
	fs.StringVar(&o.grpcAddr, "grpc-addr", config.DefaultGRPCListen, "`host:port` of floodgate serve's Envoy rate-limit service (--target grpc)")
	fs.StringVar(&o.domain, "domain", "", "Envoy rate-limit `domain` (--target grpc)")
	fs.StringVar(&o.descriptor, "descriptor", "", "descriptor entry `key` whose value is the request's key (--target grpc)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := o.validate(set); err != nil {
		return benchUsageError(stderr, fs.Usage, err)
	}
	if o.keyPrefix == "" {
		o.keyPrefix = "bench-" + strconv.FormatUint(rand.Uint64()&0xffffffff, 36) + "-"
	}

	t, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer t.close()

	var progress io.Writer
	if !o.quiet {
		progress = stderr
	}
	res := benchRun(ctx, t, o, progress)
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if err := res.writeTable(stdout); err != nil {
		return err
	}
	if res.Requests > 0 && res.Errors == res.Requests {
		return fmt.Errorf("bench: every request failed, for example: %s", res.FirstError)
	}
	return nil
}

func benchUsageError(stderr io.Writer, usage func(), err error) error {
	fmt.Fprintf(stderr, "floodgate bench: %v\n", err)
	usage()
	return errUsage
}

func (o *benchOptions) validate(set map[string]bool) error {
	switch {
	case o.concurrency < 1:
		return fmt.Errorf("--concurrency %d must be at least 1", o.concurrency)
	case o.keys < 1:
		return fmt.Errorf("--keys %d must be at least 1", o.keys)
	case o.duration <= 0:
		return fmt.Errorf("--duration %s must be positive", o.duration)
	case o.requests < 0:
		return fmt.Errorf("--requests %d must not be negative", o.requests)
	case o.cost < 1:
		return fmt.Errorf("--cost %d must be at least 1", o.cost)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %s must be positive", o.timeout)
	}
	storeOnly := []string{"config", "store", "algorithm", "limit", "window", "redis-addr", "redis-addrs", "sentinel-addrs", "sentinel-master"}
	only := func(target string, allowed ...string) error {
		for _, name := range storeOnly {
			if set[name] && !slices.Contains(allowed, name) {
				return fmt.Errorf("--%s does not apply to --target %s (the server's rules decide)", name, target)
			}
		}
		return nil
	}
	switch o.target {
	case "store":
		for _, name := range []string{"url", "grpc-addr", "domain", "descriptor"} {
			if set[name] {
				return fmt.Errorf("--%s applies to --target http or grpc, not store", name)
			}
		}
		if o.rule != "" && (set["algorithm"] || set["limit"] || set["window"]) {
			return errors.New("--rule takes the limit from the config: drop --algorithm, --limit and --window")
		}
		if o.rule != "" && o.cfgPath == "" {
			return errors.New("--rule needs --config (the file that defines the rule)")
		}
	case "http":
		if err := only("http"); err != nil {
			return err
		}
		if set["grpc-addr"] || set["domain"] || set["descriptor"] {
			return errors.New("--grpc-addr, --domain and --descriptor apply to --target grpc")
		}
	case "grpc":
		if err := only("grpc"); err != nil {
			return err
		}
		if set["url"] || set["rule"] {
			return errors.New("--url and --rule apply to --target http; gRPC requests name --domain and --descriptor")
		}
		if o.domain == "" || o.descriptor == "" {
			return errors.New("--target grpc needs --domain and --descriptor (the descriptor entry whose value is the key)")
		}
		if o.cost > 1<<32-1 {
			return fmt.Errorf("--cost %d is more than gRPC's hits_addend holds", o.cost)
		}
	default:
		return fmt.Errorf("--target %q is not store, http or grpc", o.target)
	}
	return nil
}

// ---------------------------------------------------------------- the run --

// benchRun drives t with o's load and returns the summary. progress, if not
// nil, gets a live line about once a second.
func benchRun(ctx context.Context, t *benchTarget, o *benchOptions, progress io.Writer) *benchResult {
	run := loadgen.Start(ctx, loadgen.Load{Concurrency: o.concurrency, Keys: o.keys, Duration: o.duration,
		Requests: o.requests, Timeout: o.timeout}, t.decide)
	if progress != nil {
		showProgress(progress, run)
	}
	r := run.Wait()
	res := &benchResult{
		Target: t.desc, Limit: t.limit, Concurrency: o.concurrency, Keys: o.keys, Cost: o.cost,
		DurationS: r.Elapsed.Seconds(), Interrupted: r.Interrupted,
		Requests: r.Requests(), Allowed: r.Allowed, Denied: r.Denied, Errors: r.Errors, FirstError: r.FirstError,
	}
	if r.Elapsed > 0 {
		res.RequestsPerS = math.Round(10*float64(res.Requests)/r.Elapsed.Seconds()) / 10
		res.DecisionsPerS = math.Round(10*float64(res.Allowed+res.Denied)/r.Elapsed.Seconds()) / 10
	}
	res.LatencyMs = summarize(r.Latency)
	return res
}

// summarize returns a histogram's percentiles in milliseconds, to the
// nanosecond (a memory store answers in well under a microsecond).
func summarize(h *loadgen.Hist) latencySummary {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return latencySummary{
		P50: ms(h.Quantile(0.50)), P90: ms(h.Quantile(0.90)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()),
	}
}

// showProgress prints the live line about once a second until the run ends: the
// rate and p99 of the last second, and the totals so far. On a terminal it
// rewrites one line; otherwise it prints one line per second.
func showProgress(w io.Writer, run *loadgen.Run) {
	tty := isTerminal(w)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := run.Started()
	prev := &loadgen.Hist{}
	prevAt := start
	printed := false
	for {
		select {
		case <-run.Done():
			if tty && printed {
				fmt.Fprintln(w)
			}
			return
		case now := <-tick.C:
			cur := run.Snapshot()
			interval := cur.Latency.Minus(prev)
			rate := float64(interval.Count()) / now.Sub(prevAt).Seconds()
			admitted := 0.0
			if cur.Allowed+cur.Denied > 0 {
				admitted = 100 * float64(cur.Allowed) / float64(cur.Allowed+cur.Denied)
			}
			line := fmt.Sprintf("%6.1fs  %10s req/s  p99 %8s  | total %d, admitted %.1f%%, errors %d",
				now.Sub(start).Seconds(), fmtCount(rate), fmtLatency(interval.Quantile(0.99)), cur.Requests(), admitted, cur.Errors)
			if tty {
				fmt.Fprint(w, "\r\033[K"+line)
			} else {
				fmt.Fprintln(w, line)
			}
			printed = true
			prev, prevAt = cur.Latency, now
		}
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// fmtCount formats a rate with thousands separators: 84,211.
func fmtCount(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// fmtLatency formats a duration with 3 significant digits.
func fmtLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d >= 10*time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms"
	case d >= 10*time.Microsecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + "µs"
	case d >= time.Microsecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + "µs"
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// ---------------------------------------------------------------- summary --

// benchResult is the summary of a run, as printed with --json.
type benchResult struct {
	Target        string         `json:"target"`
	Limit         string         `json:"limit,omitempty"`
	Concurrency   int            `json:"concurrency"`
	Keys          int            `json:"keys"`
	Cost          int64          `json:"cost"`
	DurationS     float64        `json:"duration_s"`
	Interrupted   bool           `json:"interrupted,omitempty"`
	Requests      int64          `json:"requests"`
	Allowed       int64          `json:"allowed"`
	Denied        int64          `json:"denied"`
	Errors        int64          `json:"errors"`
	FirstError    string         `json:"first_error,omitempty"`
	RequestsPerS  float64        `json:"requests_per_s"`
	DecisionsPerS float64        `json:"decisions_per_s"`
	LatencyMs     latencySummary `json:"latency_ms"`
}

// latencySummary holds latency percentiles in milliseconds (within about 3%:
// they come from a log-linear histogram).
type latencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func (r *benchResult) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	pct := func(n int64) string {
		if r.Requests == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(r.Requests))
	}
	ms := func(v float64) string { return fmtLatency(time.Duration(v * 1e6)) }
	fmt.Fprintf(tw, "target\t%s\n", r.Target)
	if r.Limit != "" {
		fmt.Fprintf(tw, "limit\t%s\n", r.Limit)
	}
	fmt.Fprintf(tw, "load\t%d callers, %d keys, cost %d\n", r.Concurrency, r.Keys, r.Cost)
	dur := fmt.Sprintf("%.2fs", r.DurationS)
	if r.Interrupted {
		dur += " (interrupted)"
	}
	fmt.Fprintf(tw, "duration\t%s\n", dur)
	fmt.Fprintf(tw, "requests\t%d\n", r.Requests)
	fmt.Fprintf(tw, "allowed\t%d%s\n", r.Allowed, pct(r.Allowed))
	fmt.Fprintf(tw, "denied\t%d%s\n", r.Denied, pct(r.Denied))
	fmt.Fprintf(tw, "errors\t%d%s\n", r.Errors, pct(r.Errors))
	if r.FirstError != "" {
		fmt.Fprintf(tw, "first error\t%s\n", r.FirstError)
	}
	fmt.Fprintf(tw, "throughput\t%s requests/s (%s decisions/s)\n", fmtCount(r.RequestsPerS), fmtCount(r.DecisionsPerS))
	l := r.LatencyMs
	fmt.Fprintf(tw, "latency\tp50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max))
	return tw.Flush()
}

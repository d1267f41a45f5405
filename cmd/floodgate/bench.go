package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/server"
)

const benchSynopsis = `bench [--target store|http|grpc] [--concurrency N] [--keys N] [--duration D] [--requests N] [--json] ...

Load-tests a rate-limit store in process (--target store: the memory store,
Redis, a Redis Cluster or Sentinel, from --config or --store), or a running
'floodgate serve' over its HTTP API (--target http: POST /v1/check) or its
Envoy rate-limit gRPC service (--target grpc: ShouldRateLimit). Callers
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
	fs.StringVar(&o.algorithm, "algorithm", "token_bucket", "--target store without --rule: the `algorithm` ("+simAlgorithmNames()+")")
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
	if fs.NArg() > 0 {
		return benchUsageError(stderr, fs.Usage, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
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
			if set[name] && !benchContains(allowed, name) {
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

func benchContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// benchTarget is what the callers load: decide answers one request.
type benchTarget struct {
	// desc and limit describe it in the summary.
	desc, limit string
	decide      func(ctx context.Context, key string) (allowed bool, err error)
	close       func()
}

// open connects to the target o names.
func (o *benchOptions) open(ctx context.Context) (*benchTarget, error) {
	switch o.target {
	case "http":
		return o.openHTTP(ctx)
	case "grpc":
		return o.openGRPC()
	}
	return o.openStore(ctx)
}

func (o *benchOptions) openStore(ctx context.Context) (*benchTarget, error) {
	cfg, err := loadConfig(o.cfgPath)
	if err != nil {
		return nil, err
	}
	if o.cfgPath == "" {
		// The built-in example runs on memory; without --config only
		// --store chooses.
		cfg.Store = config.Store{Type: config.StoreMemory}
	}
	if o.store != "" {
		sc := cfg.Store
		sc.Type = o.store
		switch o.store {
		case config.StoreMemory:
		case config.StoreRedis:
			sc.Addrs = []string{o.redisAddr}
		case config.StoreRedisCluster:
			sc.Addrs = simSplitList(o.redisAddrs)
		case config.StoreRedisSentinel:
			sc.Addrs, sc.MasterName = simSplitList(o.sentinels), o.master
		default:
			return nil, fmt.Errorf("--store %q is not memory, redis, redis-cluster or redis-sentinel", o.store)
		}
		cfg.Store = sc
	}
	var limit floodgate.Limit
	storeKey := func(key string) string { return o.keyPrefix + key }
	if o.rule != "" {
		policy, err := cfg.Policy()
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(policy.Rules, func(r server.Rule) bool { return r.Name == o.rule })
		if i < 0 {
			return nil, fmt.Errorf("no rule named %q in %s", o.rule, cfg.Source)
		}
		r := policy.Rules[i]
		limit = r.Limit
		// As floodgate serve keys a rule.
		storeKey = func(key string) string { return decide.StoreKey("", r.Name, o.keyPrefix+key) }
	} else {
		alg, err := floodgate.ParseAlgorithm(o.algorithm)
		if err != nil {
			return nil, err
		}
		limit = floodgate.NewLimit(alg, o.limit, o.window)
	}
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	if err := limit.CheckCost(o.cost); err != nil {
		return nil, err
	}
	store, closeStore, err := openStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	cost := o.cost
	return &benchTarget{
		desc:  "store " + cfg.Store.String(),
		limit: limit.String(),
		decide: func(ctx context.Context, key string) (bool, error) {
			d, err := store.AllowN(ctx, storeKey(key), limit, cost)
			return d.Allowed, err
		},
		close: closeStore,
	}, nil
}

func (o *benchOptions) openHTTP(ctx context.Context) (*benchTarget, error) {
	base := strings.TrimRight(o.url, "/")
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        o.concurrency,
		MaxIdleConnsPerHost: o.concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
	// Ask the server for its rules: to default to the first, and to say
	// what the rule is.
	rule, limit := o.rule, ""
	rules, err := fetchRules(ctx, client, base, o.timeout)
	switch {
	case err != nil && rule == "":
		return nil, fmt.Errorf("--target http without --rule: %w", err)
	case err == nil && len(rules) == 0:
		return nil, fmt.Errorf("%s/v1/rules lists no rules", base)
	case err == nil:
		if rule == "" {
			rule = rules[0].Name
		}
		found := false
		for _, r := range rules {
			if r.Name == rule {
				limit, found = r.Description, true
			}
		}
		if !found {
			return nil, fmt.Errorf("the server at %s has no rule %q", base, rule)
		}
	}
	endpoint := base + "/v1/check"
	ruleJSON, _ := json.Marshal(rule)
	prefix, cost := o.keyPrefix, o.cost
	return &benchTarget{
		desc:  "http " + endpoint + " rule " + rule,
		limit: limit,
		decide: func(ctx context.Context, key string) (bool, error) {
			body := make([]byte, 0, 64+len(prefix)+len(key))
			body = append(body, `{"rule":`...)
			body = append(body, ruleJSON...)
			body = append(body, `,"key":`...)
			body = strconv.AppendQuote(body, prefix+key)
			body = append(body, `,"cost":`...)
			body = strconv.AppendInt(body, cost, 10)
			body = append(body, '}')
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
			if err != nil {
				return false, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				_, err = io.Copy(io.Discard, resp.Body)
				return true, err
			case http.StatusTooManyRequests:
				_, err = io.Copy(io.Discard, resp.Body)
				return false, err
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
			return false, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		},
		close: client.CloseIdleConnections,
	}, nil
}

// fetchRules reads GET /v1/rules.
func fetchRules(ctx context.Context, client *http.Client, base string, timeout time.Duration) ([]struct{ Name, Description string }, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot list the server's rules: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/v1/rules: HTTP %d", base, resp.StatusCode)
	}
	var out struct {
		Rules []struct{ Name, Description string } `json:"rules"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET %s/v1/rules: %w", base, err)
	}
	return out.Rules, nil
}

func (o *benchOptions) openGRPC() (*benchTarget, error) {
	conn, err := grpc.NewClient(o.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("grpc: %w", err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	domain, descKey, prefix, cost := o.domain, o.descriptor, o.keyPrefix, uint32(o.cost)
	return &benchTarget{
		desc: fmt.Sprintf("grpc %s domain %s descriptor %s", o.grpcAddr, domain, descKey),
		decide: func(ctx context.Context, key string) (bool, error) {
			resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
				Domain:      domain,
				HitsAddend:  cost,
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: descKey, Value: prefix + key}}}},
			})
			if err != nil {
				return false, err
			}
			switch resp.GetOverallCode() {
			case rlsv3.RateLimitResponse_OK:
				return true, nil
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				return false, nil
			}
			return false, fmt.Errorf("overall_code %s", resp.GetOverallCode())
		},
		close: func() { _ = conn.Close() },
	}, nil
}

// ---------------------------------------------------------------- the run --

// benchWorker is one caller's tally, read live by the progress line. Only
// the caller writes; readers load atomically.
type benchWorker struct {
	allowed, denied, errors atomic.Int64
	hist                    latencyHist
	_                       [64]byte // keep callers' hot counters apart
}

// benchRun drives t with o's load and returns the summary. progress, if not
// nil, gets a live line about once a second.
func benchRun(ctx context.Context, t *benchTarget, o *benchOptions, progress io.Writer) *benchResult {
	keys := make([]string, o.keys)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	workers := make([]benchWorker, o.concurrency)
	var (
		stop     atomic.Bool
		claimed  atomic.Int64
		errOnce  sync.Once
		firstErr string
		wg       sync.WaitGroup
	)
	// Requests in flight finish when the run ends or is interrupted: an
	// answer cut off would be neither allowed, denied nor a real error.
	callCtx := context.WithoutCancel(ctx)
	start := time.Now()
	deadline := time.AfterFunc(o.duration, func() { stop.Store(true) })
	defer deadline.Stop()
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			stop.Store(true)
		case <-done:
		}
	}()
	for g := range workers {
		w := &workers[g]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g)+1, uint64(start.UnixNano())))
			for !stop.Load() {
				if o.requests > 0 && claimed.Add(1) > o.requests {
					return
				}
				key := keys[r.IntN(len(keys))]
				cctx, cancel := context.WithTimeout(callCtx, o.timeout)
				t0 := time.Now()
				ok, err := t.decide(cctx, key)
				lat := time.Since(t0)
				cancel()
				switch {
				case err != nil:
					w.errors.Add(1)
					errOnce.Do(func() { firstErr = err.Error() })
				case ok:
					w.allowed.Add(1)
				default:
					w.denied.Add(1)
				}
				w.hist.record(lat)
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	if progress != nil {
		showProgress(progress, workers, start, done)
	} else {
		<-done
	}
	elapsed := time.Since(start)
	stop.Store(true)

	res := &benchResult{
		Target: t.desc, Limit: t.limit, Concurrency: o.concurrency, Keys: o.keys, Cost: o.cost,
		DurationS: elapsed.Seconds(), Interrupted: ctx.Err() != nil,
	}
	var all latencyHist
	for i := range workers {
		w := &workers[i]
		res.Allowed += w.allowed.Load()
		res.Denied += w.denied.Load()
		res.Errors += w.errors.Load()
		all.add(&w.hist)
	}
	res.Requests = res.Allowed + res.Denied + res.Errors
	res.FirstError = firstErr
	if elapsed > 0 {
		res.RequestsPerS = math.Round(10*float64(res.Requests)/elapsed.Seconds()) / 10
		res.DecisionsPerS = math.Round(10*float64(res.Allowed+res.Denied)/elapsed.Seconds()) / 10
	}
	res.LatencyMs = all.summary()
	return res
}

// showProgress prints the live line about once a second until done: the
// rate and p99 of the last second, and the totals so far. On a terminal it
// rewrites one line; otherwise it prints one line per second.
func showProgress(w io.Writer, workers []benchWorker, start time.Time, done <-chan struct{}) {
	tty := isTerminal(w)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prev := &latencyHist{}
	prevAt := start
	printed := false
	for {
		select {
		case <-done:
			if tty && printed {
				fmt.Fprintln(w)
			}
			return
		case now := <-tick.C:
			cur := &latencyHist{}
			var allowed, denied, errs int64
			for i := range workers {
				cur.add(&workers[i].hist)
				allowed += workers[i].allowed.Load()
				denied += workers[i].denied.Load()
				errs += workers[i].errors.Load()
			}
			interval := cur.minus(prev)
			n := interval.count()
			rate := float64(n) / now.Sub(prevAt).Seconds()
			total := allowed + denied + errs
			admitted := 0.0
			if allowed+denied > 0 {
				admitted = 100 * float64(allowed) / float64(allowed+denied)
			}
			line := fmt.Sprintf("%6.1fs  %10s req/s  p99 %8s  | total %d, admitted %.1f%%, errors %d",
				now.Sub(start).Seconds(), fmtCount(rate), fmtLatency(interval.quantile(0.99)), total, admitted, errs)
			if tty {
				fmt.Fprint(w, "\r\033[K"+line)
			} else {
				fmt.Fprintln(w, line)
			}
			printed = true
			prev, prevAt = cur, now
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

// ---------------------------------------------------------------- latency --

// latencyHist is a log-linear histogram of durations: exact below 32ns,
// then 16 buckets per power of two (within about 3%). Its counters are
// atomic, so one goroutine can record while others read.
type latencyHist struct {
	counts [histBuckets]atomic.Uint64
	max    atomic.Int64
}

const histBuckets = 32 + 59*16

func histIndex(ns uint64) int {
	if ns < 32 {
		return int(ns)
	}
	shift := bits.Len64(ns) - 5 // top = ns >> shift is in [16, 32)
	return 32 + (shift-1)*16 + int(ns>>shift) - 16
}

// histValue returns the middle of bucket i, in nanoseconds.
func histValue(i int) float64 {
	if i < 32 {
		return float64(i)
	}
	shift := (i-32)/16 + 1
	top := uint64((i-32)%16 + 16)
	lo, hi := top<<shift, (top+1)<<shift
	return float64(lo+hi) / 2
}

func (h *latencyHist) record(d time.Duration) {
	ns := max(int64(d), 0)
	h.counts[histIndex(uint64(ns))].Add(1)
	if ns > h.max.Load() {
		h.max.Store(ns) // only the recording goroutine writes max
	}
}

// add adds o's counts into h (h must not be recorded into concurrently).
func (h *latencyHist) add(o *latencyHist) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
}

// minus returns h - o, counts only: what was recorded between two
// snapshots.
func (h *latencyHist) minus(o *latencyHist) *latencyHist {
	d := &latencyHist{}
	for i := range h.counts {
		d.counts[i].Store(h.counts[i].Load() - o.counts[i].Load())
	}
	return d
}

func (h *latencyHist) count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// quantile returns the q-quantile (nearest rank), 0 when empty.
func (h *latencyHist) quantile(q float64) time.Duration {
	n := h.count()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			v := time.Duration(histValue(i))
			if m := time.Duration(h.max.Load()); m > 0 && v > m {
				v = m // never report more than the largest seen
			}
			return v
		}
	}
	return time.Duration(h.max.Load())
}

func (h *latencyHist) summary() latencySummary {
	// Milliseconds to the nanosecond (a memory store answers in well under
	// a microsecond).
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return latencySummary{
		P50: ms(h.quantile(0.50)), P90: ms(h.quantile(0.90)), P99: ms(h.quantile(0.99)),
		P999: ms(h.quantile(0.999)), Max: ms(time.Duration(h.max.Load())),
	}
}

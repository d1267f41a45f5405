// Package simulate runs traffic patterns against every floodgate algorithm on
// a virtual clock, through a real floodgate.Store, and measures what each
// algorithm let through. It backs the "floodgate simulate" command and the
// figures in docs/ALGORITHMS.md.
//
// Nothing sleeps: before each request the simulation sets a
// clocktest.Manual that the store reads, so a simulated hour takes
// milliseconds on the memory store. Randomness comes from a PCG generator
// seeded by Config.Seed (and the pattern's name), so a report is the same
// for the same Config on every run and every store.
//
// # Metrics
//
// For each pattern and algorithm a [Result] holds:
//
//   - Admitted and Denied: the store's decisions.
//   - MaxInWindow: the most requests admitted for one key in any interval of
//     length Window (found exactly, by two pointers over the admission
//     times). An exact limit keeps it at or below Limit.
//   - Disagreements and ErrorRate: the requests decided otherwise than by
//     an exact sliding-window log run on the same arrivals, as a count and
//     over all requests. ExcessAdmitted is Admitted minus what the exact
//     log admitted: positive when the algorithm is more permissive. The
//     sliding-window log algorithm scores zero on both.
//   - RetryAfterMean and RetryAfterP99: over denied requests, the store's
//     Decision.RetryAfter (p99 by nearest rank).
//   - MemoryPerKey: the most bytes one key's state took, as the backend
//     measures it (the memory store's estimate, or Redis's MEMORY USAGE),
//     sampled after each decision that leaves the key fuller than before
//     (a new low of Decision.Remaining), which is when state is largest.
package simulate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/memory"
)

// Defaults used for zero Config fields.
const (
	DefaultLimit    = 100
	DefaultWindow   = time.Minute
	DefaultDuration = 5 * time.Minute
)

// MaxWindows bounds Limit × Duration/Window, which sets the number of
// requests a simulation sends (the many-clients pattern sends about 21 times
// that), so that a typo cannot start an hour-long run.
const MaxWindows = 200_000

// Config says what to simulate. The zero value simulates every built-in
// pattern against every algorithm with 100 requests per minute for five
// minutes, seed 0.
type Config struct {
	// Limit is the quota: requests per Window, and the token bucket's
	// capacity (refilled at Limit per Window). Zero means DefaultLimit.
	Limit int64
	// Window is the limit's window. Zero means DefaultWindow.
	Window time.Duration
	// Duration is the simulated time per pattern; at least two windows.
	// Zero means DefaultDuration.
	Duration time.Duration
	// Seed seeds the random patterns.
	Seed uint64
	// Patterns to run; nil means Patterns().
	Patterns []Pattern
	// Algorithms to run each pattern against; nil means
	// algorithmlist.All().
	Algorithms []floodgate.Algorithm
}

// withDefaults returns c with its zero fields filled.
func (c Config) withDefaults() Config {
	if c.Limit == 0 {
		c.Limit = DefaultLimit
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Patterns == nil {
		c.Patterns = Patterns()
	}
	if c.Algorithms == nil {
		c.Algorithms = algorithmlist.All()
	}
	return c
}

// Validate reports whether c (with its defaults) can be simulated; the error
// names the field and the bad value.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, a := range c.Algorithms {
		if err := floodgate.NewLimit(a, c.Limit, c.Window).Validate(); err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
	}
	switch {
	case c.Duration < 2*c.Window:
		return fmt.Errorf("simulate: Duration %s must be at least two windows (%s)", c.Duration, 2*c.Window)
	case float64(c.Limit)*(float64(c.Duration)/float64(c.Window)) > MaxWindows:
		return fmt.Errorf("simulate: Limit %d × Duration/Window (%s/%s) is more than %d requests' worth; simulate fewer windows or a smaller limit", c.Limit, c.Duration, c.Window, MaxWindows)
	case len(c.Patterns) == 0:
		return errors.New("simulate: Patterns is empty (nil means all)")
	case len(c.Algorithms) == 0:
		return errors.New("simulate: Algorithms is empty (nil means all)")
	}
	for i, p := range c.Patterns {
		if p.Name == "" || p.Generate == nil {
			return fmt.Errorf("simulate: Patterns[%d] %q needs a Name and a Generate function", i, p.Name)
		}
	}
	return nil
}

// Backend is the store a simulation sends its requests to, with the manual
// clock that store reads its time from.
type Backend struct {
	// Name describes the store in reports, such as "memory".
	Name string
	// Store decides the requests. It must read time from Clock.
	Store floodgate.Store
	// Clock is set to each request's virtual time before it is sent.
	Clock *clocktest.Manual
	// MemoryUsage, if not nil, returns the bytes the store spends on key
	// under limit's algorithm; nil leaves Result.MemoryPerKey zero.
	MemoryUsage func(ctx context.Context, key string, limit floodgate.Limit) (int64, error)

	close func()
}

// Close releases the backend's connections, if it has any.
func (b *Backend) Close() {
	if b.close != nil {
		b.close()
	}
}

// NewMemoryBackend returns a Backend on a fresh memory store reading a
// manual clock, with memory measured by (*memory.Store).MemoryUsage.
func NewMemoryBackend() *Backend {
	clock := clocktest.NewManual(time.Unix(0, 0))
	s := memory.New(memory.WithClock(clock))
	return &Backend{
		Name:  "memory",
		Store: s,
		Clock: clock,
		MemoryUsage: func(_ context.Context, key string, limit floodgate.Limit) (int64, error) {
			return int64(s.MemoryUsage(key, limit)), nil
		},
	}
}

// Report is the outcome of a simulation.
type Report struct {
	// Store is the backend's name.
	Store string `json:"store"`
	// Limit, Window, Duration and Seed are the Config the report ran with.
	Limit    int64         `json:"limit"`
	Window   time.Duration `json:"window_ns"`
	Duration time.Duration `json:"duration_ns"`
	Seed     uint64        `json:"seed"`
	// Patterns describes the patterns that ran, in order.
	Patterns []PatternInfo `json:"patterns"`
	// Results holds one entry per pattern and algorithm, patterns in order
	// and each pattern's algorithms in order.
	Results []Result `json:"results"`
}

// PatternInfo describes one pattern as it ran.
type PatternInfo struct {
	// Name and Description are the Pattern's.
	Name        string `json:"name"`
	Description string `json:"description"`
	// Clients is the number of distinct clients (keys) that sent requests.
	Clients int `json:"clients"`
	// Requests is the number of requests sent.
	Requests int `json:"requests"`
}

// Result is what one algorithm did with one pattern. See the package
// documentation for how each figure is measured.
type Result struct {
	// Pattern is the pattern's name.
	Pattern string `json:"pattern"`
	// Algorithm is the algorithm the requests were decided by; in JSON,
	// its configuration name such as "fixed_window".
	Algorithm floodgate.Algorithm `json:"algorithm"`
	// Requests is the number of requests sent: Admitted + Denied.
	Requests int `json:"requests"`
	// Admitted and Denied count the store's decisions.
	Admitted int `json:"admitted"`
	Denied   int `json:"denied"`
	// MaxInWindow is the most requests admitted for one key in any interval
	// of length Window.
	MaxInWindow int `json:"max_in_window"`
	// ExactAdmitted is how many requests the exact sliding-window log
	// reference admitted on the same arrivals.
	ExactAdmitted int `json:"exact_admitted"`
	// ExcessAdmitted is Admitted - ExactAdmitted.
	ExcessAdmitted int `json:"excess_admitted"`
	// Disagreements counts the requests decided differently from the exact
	// reference; ErrorRate is Disagreements / Requests (0 with no requests).
	Disagreements int     `json:"disagreements"`
	ErrorRate     float64 `json:"error_rate"`
	// RetryAfterMean and RetryAfterP99 summarise the RetryAfter of denied
	// requests (zero if none was denied), rounded to microseconds.
	RetryAfterMean time.Duration `json:"retry_after_mean_ns"`
	RetryAfterP99  time.Duration `json:"retry_after_p99_ns"`
	// MemoryPerKey is the most bytes one key's state took; zero if the
	// backend does not measure memory.
	MemoryPerKey int64 `json:"memory_per_key_bytes"`
	// Admissions are the times (from the start of the pattern) of the
	// admitted requests, all clients together, in order. Not in JSON.
	Admissions []time.Duration `json:"-"`
}

// Result returns the result for pattern and algorithm, if the report has it.
func (r *Report) Result(pattern string, alg floodgate.Algorithm) (Result, bool) {
	i := slices.IndexFunc(r.Results, func(x Result) bool { return x.Pattern == pattern && x.Algorithm == alg })
	if i < 0 {
		return Result{}, false
	}
	return r.Results[i], true
}

// epoch is the virtual time of the first run, before window alignment.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Run simulates every pattern of cfg against every algorithm through b.
//
// Each pattern × algorithm run starts at its own virtual time, aligned to a
// window edge (so the boundary attack straddles the fixed windows' edges)
// and later than the previous run's end, so the store's clock never runs
// backwards; each client's key is distinct per pattern and is Reset after
// the run. Run is not safe to call concurrently on one Backend.
func Run(ctx context.Context, cfg Config, b *Backend) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := Params{Limit: cfg.Limit, Window: cfg.Window, Duration: cfg.Duration}
	w := cfg.Window.Microseconds()
	base := (epoch.UnixMicro() + w - 1) / w * w
	stride := (cfg.Duration.Microseconds() + 2*w + w - 1) / w * w
	rep := &Report{Store: b.Name, Limit: cfg.Limit, Window: cfg.Window, Duration: cfg.Duration, Seed: cfg.Seed}
	for _, pat := range cfg.Patterns {
		h := fnv.New64a()
		h.Write([]byte(pat.Name))
		rng := rand.New(rand.NewPCG(cfg.Seed, h.Sum64()))
		arrivals := normalize(pat.Generate(p, rng), cfg.Duration)
		exact := exactDecisions(arrivals, cfg.Limit, cfg.Window)
		exactAdmitted := 0
		clients := map[int]bool{}
		for i, a := range arrivals {
			clients[a.Client] = true
			if exact[i] {
				exactAdmitted++
			}
		}
		rep.Patterns = append(rep.Patterns, PatternInfo{Name: pat.Name, Description: pat.Description, Clients: len(clients), Requests: len(arrivals)})
		for _, alg := range cfg.Algorithms {
			start := time.UnixMicro(base)
			base += stride
			res, err := runOne(ctx, b, pat.Name, floodgate.NewLimit(alg, cfg.Limit, cfg.Window), start, arrivals, exact)
			if err != nil {
				return nil, fmt.Errorf("simulate: pattern %s, %s, %s store: %w", pat.Name, alg, b.Name, err)
			}
			res.ExactAdmitted = exactAdmitted
			res.ExcessAdmitted = res.Admitted - exactAdmitted
			rep.Results = append(rep.Results, res)
		}
	}
	return rep, nil
}

// key returns the store key of a client in a pattern.
func key(pattern string, client int) string { return fmt.Sprintf("sim/%s/%d", pattern, client) }

// runOne sends arrivals through b under limit, the first at start.
func runOne(ctx context.Context, b *Backend, pattern string, limit floodgate.Limit, start time.Time, arrivals []Arrival, exact []bool) (Result, error) {
	res := Result{Pattern: pattern, Algorithm: limit.Algorithm, Requests: len(arrivals)}
	type client struct {
		key       string
		admitted  []time.Duration
		remaining int64 // lowest Remaining seen
	}
	clients := map[int]*client{}
	var retries []time.Duration
	defer func() {
		// Leave nothing behind, even after an error (Redis keys would
		// linger until they expire).
		for _, c := range clients {
			_ = b.Store.Reset(context.WithoutCancel(ctx), c.key, limit)
		}
	}()
	for i, a := range arrivals {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return res, err
			}
		}
		c := clients[a.Client]
		if c == nil {
			c = &client{key: key(pattern, a.Client), remaining: math.MaxInt64}
			clients[a.Client] = c
		}
		b.Clock.Set(start.Add(a.At))
		d, err := b.Store.Allow(ctx, c.key, limit)
		if err != nil {
			return res, err
		}
		if d.Allowed {
			res.Admitted++
			c.admitted = append(c.admitted, a.At)
			res.Admissions = append(res.Admissions, a.At)
		} else {
			res.Denied++
			retries = append(retries, d.RetryAfter)
		}
		if d.Allowed != exact[i] {
			res.Disagreements++
		}
		if b.MemoryUsage != nil && d.Remaining < c.remaining {
			c.remaining = d.Remaining
			m, err := b.MemoryUsage(ctx, c.key, limit)
			if err != nil {
				return res, fmt.Errorf("memory usage of %q: %w", c.key, err)
			}
			res.MemoryPerKey = max(res.MemoryPerKey, m)
		}
	}
	for _, c := range clients {
		res.MaxInWindow = max(res.MaxInWindow, MaxInWindow(c.admitted, limit.Window))
	}
	if len(arrivals) > 0 {
		res.ErrorRate = float64(res.Disagreements) / float64(len(arrivals))
	}
	res.RetryAfterMean, res.RetryAfterP99 = meanP99(retries)
	return res, nil
}

// MaxInWindow returns the most of the sorted times that fall in any interval
// [t, t+w) of length w: the worst window a client saw. It runs in linear
// time, with two pointers. A w of zero or less returns 0.
func MaxInWindow(times []time.Duration, w time.Duration) int {
	if w <= 0 {
		return 0
	}
	best, lo := 0, 0
	for hi, t := range times {
		for t-times[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// exactDecisions decides arrivals with an exact sliding-window log, kept
// apart from the stores: a request at t is admitted iff fewer than limit
// requests of its client were admitted in (t-window, t].
func exactDecisions(arrivals []Arrival, limit int64, window time.Duration) []bool {
	type log struct {
		times []time.Duration
		head  int
	}
	logs := map[int]*log{}
	out := make([]bool, len(arrivals))
	for i, a := range arrivals {
		g := logs[a.Client]
		if g == nil {
			g = &log{}
			logs[a.Client] = g
		}
		for g.head < len(g.times) && g.times[g.head] <= a.At-window {
			g.head++
		}
		if int64(len(g.times)-g.head) < limit {
			g.times = append(g.times, a.At)
			out[i] = true
		}
		if g.head > 1024 && g.head > len(g.times)/2 {
			g.times = append(g.times[:0], g.times[g.head:]...)
			g.head = 0
		}
	}
	return out
}

// meanP99 returns the mean and the nearest-rank 99th percentile of ds,
// rounded to microseconds, or zeros for none.
func meanP99(ds []time.Duration) (mean, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	var sum float64
	for _, d := range ds {
		sum += float64(d)
	}
	slices.Sort(ds)
	rank := int(math.Ceil(0.99*float64(len(ds)))) - 1
	mean = time.Duration(math.Round(sum / float64(len(ds))))
	return mean.Round(time.Microsecond), ds[rank].Round(time.Microsecond)
}

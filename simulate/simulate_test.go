package simulate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/simulate"
)

func run(t *testing.T, cfg simulate.Config) *simulate.Report {
	t.Helper()
	b := simulate.NewMemoryBackend()
	defer b.Close()
	rep, err := simulate.Run(context.Background(), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func patterns(t *testing.T, names ...string) []simulate.Pattern {
	t.Helper()
	ps, err := simulate.LookupPatterns(names...)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestBoundaryBurst checks the seed's claim: under the boundary-burst
// attack a fixed window admits 2N requests within 2 seconds, while the
// sliding-window log never admits more than N in any window.
func TestBoundaryBurst(t *testing.T) {
	tests := []struct {
		limit    int64
		window   time.Duration
		duration time.Duration
	}{
		{100, time.Minute, 3 * time.Minute}, // the seed's example
		{100, time.Minute, 5 * time.Minute}, // two attacks
		{1, 10 * time.Second, 30 * time.Second},
		{37, 2 * time.Second, 10 * time.Second}, // bursts over W/4 = 500ms
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("N=%d,W=%s,D=%s", tt.limit, tt.window, tt.duration), func(t *testing.T) {
			rep := run(t, simulate.Config{Limit: tt.limit, Window: tt.window, Duration: tt.duration, Patterns: patterns(t, "boundary-burst")})
			span := simulate.BurstSpan(tt.window)
			attacks := 0 // at the window edges W, 3W, 5W, ... with room for the second half
			for edge := tt.window; edge+span <= tt.duration; edge += 2 * tt.window {
				attacks++
			}

			fixed, ok := rep.Result("boundary-burst", floodgate.FixedWindow)
			if !ok {
				t.Fatal("no fixed_window result")
			}
			if got, want := simulate.MaxInWindow(fixed.Admissions, 2*span), int(2*tt.limit); got != want {
				t.Errorf("fixed window admitted %d within %s, want 2N = %d", got, 2*span, want)
			}
			if got, want := fixed.MaxInWindow, int(2*tt.limit); got != want {
				t.Errorf("fixed window: max in any window = %d, want %d", got, want)
			}
			if got, want := fixed.Admitted, attacks*int(2*tt.limit); got != want {
				t.Errorf("fixed window admitted %d, want every request of %d attacks = %d", got, attacks, want)
			}

			log, ok := rep.Result("boundary-burst", floodgate.SlidingWindowLog)
			if !ok {
				t.Fatal("no sliding_window_log result")
			}
			if got, want := log.MaxInWindow, int(tt.limit); got != want {
				t.Errorf("log: max in any window = %d, want N = %d", got, want)
			}
			if got := simulate.MaxInWindow(log.Admissions, tt.window); got > int(tt.limit) {
				t.Errorf("log admitted %d in one window, more than N = %d", got, tt.limit)
			}
			if log.Disagreements != 0 || log.ExcessAdmitted != 0 {
				t.Errorf("log: %d disagreements, excess %d against the exact reference; want 0, 0", log.Disagreements, log.ExcessAdmitted)
			}
			if got, want := fixed.ExcessAdmitted, fixed.Admitted-log.Admitted; got != want {
				t.Errorf("fixed window excess = %d, want admitted - log's admitted = %d", got, want)
			}
		})
	}
}

// TestExactLimits runs every pattern and checks what holds for each: the
// log (an exact limit) never exceeds N in any window and agrees with the
// simulation's own exact reference, the counts add up, and the token bucket
// stays within its bound of N + N refilled over a window.
func TestExactLimits(t *testing.T) {
	const limit = 20
	rep := run(t, simulate.Config{Limit: limit, Window: 10 * time.Second, Duration: 40 * time.Second, Seed: 3})
	if got, want := len(rep.Results), len(simulate.Patterns())*len(algorithmlist.All()); got != want {
		t.Fatalf("%d results, want %d", got, want)
	}
	for _, x := range rep.Results {
		t.Run(x.Pattern+"/"+x.Algorithm.String(), func(t *testing.T) {
			if x.Requests == 0 {
				t.Fatal("no requests")
			}
			if x.Admitted+x.Denied != x.Requests || len(x.Admissions) != x.Admitted {
				t.Errorf("admitted %d + denied %d != requests %d (admissions %d)", x.Admitted, x.Denied, x.Requests, len(x.Admissions))
			}
			if x.MemoryPerKey <= 0 {
				t.Errorf("memory per key = %d, want > 0 on the memory store", x.MemoryPerKey)
			}
			if x.Denied > 0 && (x.RetryAfterMean <= 0 || x.RetryAfterP99 < x.RetryAfterMean/2) {
				t.Errorf("retry-after mean %s, p99 %s for %d denials", x.RetryAfterMean, x.RetryAfterP99, x.Denied)
			}
			switch x.Algorithm {
			case floodgate.SlidingWindowLog:
				if x.MaxInWindow > limit || x.Disagreements != 0 {
					t.Errorf("log: max in window %d (limit %d), %d disagreements with the exact reference", x.MaxInWindow, limit, x.Disagreements)
				}
			case floodgate.TokenBucket:
				if x.MaxInWindow > 2*limit {
					t.Errorf("bucket: max in window %d, more than capacity + refill = %d", x.MaxInWindow, 2*limit)
				}
			case floodgate.FixedWindow:
				if x.MaxInWindow > 2*limit {
					t.Errorf("fixed window: max in window %d, more than 2N = %d", x.MaxInWindow, 2*limit)
				}
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	cfg := simulate.Config{Limit: 10, Window: 10 * time.Second, Duration: time.Minute, Seed: 42}
	a, b := run(t, cfg), run(t, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs with the same seed differ")
	}
	var ja, jb bytes.Buffer
	if err := a.WriteJSON(&ja); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	if ja.String() != jb.String() {
		t.Error("two runs with the same seed print different JSON")
	}

	// A pattern's arrivals do not depend on which other patterns ran.
	alone := run(t, simulate.Config{Limit: 10, Window: 10 * time.Second, Duration: time.Minute, Seed: 42, Patterns: patterns(t, "poisson-3x")})
	for _, x := range alone.Results {
		y, _ := a.Result(x.Pattern, x.Algorithm)
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s/%s alone differs from the same pattern among all", x.Pattern, x.Algorithm)
		}
	}

	cfg.Seed = 43
	c := run(t, cfg)
	if reflect.DeepEqual(a.Patterns, c.Patterns) {
		t.Error("seeds 42 and 43 sent the same traffic")
	}
}

// TestJSON decodes the JSON output into a struct of its own, as a machine
// reading it would.
func TestJSON(t *testing.T) {
	rep := run(t, simulate.Config{Limit: 10, Window: 10 * time.Second, Duration: 30 * time.Second})
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Store    string `json:"store"`
		Limit    int64  `json:"limit"`
		WindowNS int64  `json:"window_ns"`
		Seed     uint64 `json:"seed"`
		Patterns []struct {
			Name     string `json:"name"`
			Requests int    `json:"requests"`
		} `json:"patterns"`
		Results []struct {
			Pattern        string  `json:"pattern"`
			Algorithm      string  `json:"algorithm"`
			Requests       int     `json:"requests"`
			Admitted       int     `json:"admitted"`
			Denied         int     `json:"denied"`
			MaxInWindow    int     `json:"max_in_window"`
			ExactAdmitted  int     `json:"exact_admitted"`
			Disagreements  int     `json:"disagreements"`
			ErrorRate      float64 `json:"error_rate"`
			RetryAfterMean int64   `json:"retry_after_mean_ns"`
			RetryAfterP99  int64   `json:"retry_after_p99_ns"`
			MemoryPerKey   int64   `json:"memory_per_key_bytes"`
		} `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, buf.String())
	}
	if got.Store != "memory" || got.Limit != 10 || got.WindowNS != int64(10*time.Second) {
		t.Errorf("header = %q, %d, %d", got.Store, got.Limit, got.WindowNS)
	}
	if len(got.Patterns) != len(simulate.Patterns()) || len(got.Results) != len(rep.Results) {
		t.Fatalf("%d patterns, %d results; want %d, %d", len(got.Patterns), len(got.Results), len(simulate.Patterns()), len(rep.Results))
	}
	for i, r := range got.Results {
		want := rep.Results[i]
		if r.Pattern != want.Pattern || r.Algorithm != want.Algorithm.String() || r.Admitted != want.Admitted ||
			r.MaxInWindow != want.MaxInWindow || r.RetryAfterP99 != int64(want.RetryAfterP99) || r.MemoryPerKey != want.MemoryPerKey {
			t.Errorf("result %d decoded as %+v, want %+v", i, r, want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	rep := run(t, simulate.Config{Limit: 10, Window: 10 * time.Second, Duration: 30 * time.Second, Patterns: patterns(t, "boundary-burst")})
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"boundary-burst", "fixed_window", "sliding_window_log", "max/W", "bytes/key", "10 requests per 10s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestPlot(t *testing.T) {
	rep := run(t, simulate.Config{Limit: 10, Window: 10 * time.Second, Duration: 30 * time.Second, Patterns: patterns(t, "boundary-burst", "poisson-1x")})
	dir := filepath.Join(t.TempDir(), "figs") // Plot creates it
	files, err := rep.Plot(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	want := []string{"boundary-burst.png", "boundary-burst.svg", "boundary-burst-zoom.png", "boundary-burst-zoom.svg", "worst-window.png", "worst-window.svg"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("wrote %v, want %v", names, want)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Errorf("%s: %v", f, err)
			} else if img.Bounds().Dx() < 500 {
				t.Errorf("%s: %d pixels wide", f, img.Bounds().Dx())
			}
		case ".svg":
			if !bytes.Contains(b, []byte("<svg")) {
				t.Errorf("%s is not SVG", f)
			}
		}
	}

}

func TestMaxInWindow(t *testing.T) {
	s := func(secs ...float64) []time.Duration {
		var out []time.Duration
		for _, x := range secs {
			out = append(out, time.Duration(x*float64(time.Second)))
		}
		return out
	}
	tests := []struct {
		name  string
		times []time.Duration
		w     time.Duration
		want  int
	}{
		{"empty", nil, time.Second, 0},
		{"one", s(5), time.Second, 1},
		{"all inside", s(0, 0.5, 0.9), time.Second, 3},
		{"edge excluded", s(0, 1), time.Second, 1}, // [0, 1s) holds only 0
		{"later cluster wins", s(0, 2, 2.1, 2.2, 3.5), time.Second, 3},
		{"ties", s(1, 1, 1, 2), time.Second, 3},
		{"zero window", s(1, 2), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := simulate.MaxInWindow(tt.times, tt.w); got != tt.want {
				t.Errorf("MaxInWindow(%v, %s) = %d, want %d", tt.times, tt.w, got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  simulate.Config
		want string // substring of the error; "" for none
	}{
		{"zero value is the default", simulate.Config{}, ""},
		{"negative limit", simulate.Config{Limit: -1}, "Quota -1"},
		{"short duration", simulate.Config{Window: time.Minute, Duration: 90 * time.Second}, "at least two windows"},
		{"sub-microsecond window", simulate.Config{Window: time.Second + 1, Duration: time.Minute}, "whole number of microseconds"},
		{"too big", simulate.Config{Limit: 100000, Window: time.Second, Duration: time.Hour}, "more than"},
		{"empty patterns", simulate.Config{Patterns: []simulate.Pattern{}}, "Patterns is empty"},
		{"empty algorithms", simulate.Config{Algorithms: []floodgate.Algorithm{}}, "Algorithms is empty"},
		{"pattern without generator", simulate.Config{Patterns: []simulate.Pattern{{Name: "x"}}}, `Patterns[0] "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestLookupPatterns(t *testing.T) {
	all, err := simulate.LookupPatterns("all")
	if err != nil || len(all) != len(simulate.Patterns()) {
		t.Errorf(`LookupPatterns("all") = %d patterns, %v`, len(all), err)
	}
	two, err := simulate.LookupPatterns("on-off", "poisson-1x")
	if err != nil || len(two) != 2 || two[0].Name != "on-off" || two[1].Name != "poisson-1x" {
		t.Errorf("LookupPatterns(on-off, poisson-1x) = %v, %v", two, err)
	}
	if _, err := simulate.LookupPatterns("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("LookupPatterns(nope) error = %v", err)
	}
}

// TestCustomPattern runs a hand-made pattern whose every request shares one
// microsecond: Run moves them apart, so the log still admits exactly N.
func TestCustomPattern(t *testing.T) {
	same := simulate.Pattern{
		Name: "same-instant",
		Generate: func(p simulate.Params, _ *rand.Rand) []simulate.Arrival {
			out := make([]simulate.Arrival, 3*p.Limit)
			for i := range out {
				out[i].At = 5 * time.Second
			}
			return out
		},
	}
	rep := run(t, simulate.Config{Limit: 7, Window: 10 * time.Second, Duration: 20 * time.Second, Patterns: []simulate.Pattern{same}})
	for _, x := range rep.Results {
		if x.Requests != 21 {
			t.Errorf("%s: %d requests, want 21", x.Algorithm, x.Requests)
		}
		if x.Algorithm == floodgate.SlidingWindowLog && (x.Admitted != 7 || x.Disagreements != 0) {
			t.Errorf("log admitted %d (%d disagreements), want 7 (0)", x.Admitted, x.Disagreements)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := simulate.Run(ctx, simulate.Config{}, simulate.NewMemoryBackend())
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a cancelled context = %v, want context.Canceled", err)
	}
}

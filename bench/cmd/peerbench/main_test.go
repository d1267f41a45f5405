package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/bench"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"-long", "-rounds", "2", "-conc", "1,64", "-backends", "standalone"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	// -long sets what is not given explicitly.
	if o.rounds != 2 || o.duration != 3*time.Second || o.memRounds != 5 || o.memBenchtime != time.Second {
		t.Errorf("rounds %d, duration %s, mem-rounds %d, mem-benchtime %s: want 2, 3s, 5, 1s", o.rounds, o.duration, o.memRounds, o.memBenchtime)
	}
	if len(o.concs) != 2 || o.concs[1] != 64 || len(o.backends) != 1 {
		t.Errorf("concs %v, backends %v", o.concs, o.backends)
	}
	for _, bad := range [][]string{
		{"-conc", "0"}, {"-conc", "x"}, {"-backends", "sentinel"}, {"-workloads", "zipf"},
		{"-contenders", "tollbooth"}, {"-rounds", "0"}, {"extra"},
	} {
		if _, err := parse(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parse(%v): no error", bad)
		}
	}
}

func TestCommand(t *testing.T) {
	t.Setenv("MAKELEVEL", "")
	args := []string{"-docs", "../docs/PERFORMANCE.md", "-img", "../docs/img", "-rounds", "5", "-contenders", "fg-tb,redis_rate"}
	if got, want := command(args), "cd bench && go run ./cmd/peerbench -docs ../docs/PERFORMANCE.md -img ../docs/img -rounds 5 -contenders fg-tb,redis_rate"; got != want {
		t.Errorf("command = %q, want %q", got, want)
	}
	t.Setenv("MAKELEVEL", "1")
	got := command(args)
	if !strings.HasPrefix(got, "make bench PEERBENCHFLAGS='-rounds 5 -contenders fg-tb,redis_rate'\n") {
		t.Errorf("under make, command = %q, want make bench with the extra flags first", got)
	}
	if got := quote("it's"); got != `'it'\''s'` {
		t.Errorf("quote = %q", got)
	}
}

// TestRenderFrom renders a saved report into a document and charts, as
// `-from` does, without measuring anything.
func TestRenderFrom(t *testing.T) {
	dir := t.TempDir()
	rep := bench.Report{Meta: bench.Meta{Date: "2026-11-30", Command: "make bench", Rounds: 1, Duration: time.Second}}
	s := bench.Sample{Decisions: 50_000, Allowed: 50_000, Elapsed: time.Second, P50: time.Millisecond, P99: 3 * time.Millisecond, P999: 5 * time.Millisecond, RedisCPU: 600 * time.Millisecond, Scripts: 400 * time.Millisecond, Commands: 250_000, Allocs: 400_000}
	for _, id := range []string{"fg-tb", "redis_rate"} {
		for _, c := range []int{1, 64} {
			rep.Redis = append(rep.Redis, bench.RedisResult{Backend: "standalone", Workload: "random", Concurrency: c, Contender: id, Name: id, Samples: []bench.Sample{s}})
		}
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	from := filepath.Join(dir, "run.json")
	doc := filepath.Join(dir, "docs", "PERFORMANCE.md")
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(from, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte("# Performance\n\n## Memory store\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-from", from, "-docs", doc, "-img", filepath.Join(dir, "docs", "img")}, &out, &errOut); err != nil {
		t.Fatal(err, errOut.String())
	}
	got, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Memory store\n\nkept\n", "## Peers", bench.BeginMarker, bench.EndMarker, "](img/peers-throughput.png)", "| 64 | fg-tb | 50.0k |"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("document lacks %q:\n%s", want, got)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "docs", "img", "peers-p99.svg")); err != nil {
		t.Error(err)
	}
}

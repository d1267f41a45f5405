package decide_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// benchCheck is one rule whose quota a benchmark never exhausts.
var benchCheck = []decide.Check{{Rule: "api", Key: "k", Limit: floodgate.NewLimit(floodgate.FixedWindow, 1<<30, time.Hour)}}

// benchDecisions decides benchCheck with e, admitted every time, on one
// goroutine: the engine's own cost over the memory store, the cheapest
// store, where any cost the engine adds shows most.
func benchDecisions(b *testing.B, e *decide.Engine) {
	b.Helper()
	ctx := context.Background()
	var out [1]decide.Outcome
	b.ReportAllocs()
	for b.Loop() {
		if r := e.DecideInto(ctx, benchCheck, out[:]); !r.Allowed() {
			b.Fatalf("denied: %v", r.Err())
		}
	}
}

// BenchmarkDecision is one admitted decision with the engine's default
// options (docs/PERFORMANCE.md, "Tracing", compares it with a build
// without tracing):
//
//	go test -run '^$' -bench '^BenchmarkDecision$' -count 10 ./decide
func BenchmarkDecision(b *testing.B) {
	e, err := decide.New(memory.New(), decide.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	benchDecisions(b, e)
}

package logthrottle

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWarnOncePerInterval(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	now := time.Unix(1_900_000_000, 0)
	var mu sync.Mutex
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	})
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { l.Warn(ctx, "store down", slog.String("rule", "api")) })
	}
	wg.Wait()
	if got := strings.Count(buf.String(), "store down"); got != 1 {
		t.Fatalf("100 warnings in one interval logged %d lines, want 1:\n%s", got, buf.String())
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	l.Warn(ctx, "store down", slog.String("rule", "api"))
	if got := strings.Count(buf.String(), "store down"); got != 2 {
		t.Fatalf("after an interval: %d lines, want 2", got)
	}
	if !strings.Contains(buf.String(), "suppressed=99") {
		t.Fatalf("the second line does not count the 99 held back:\n%s", buf.String())
	}
}

// Package logthrottle logs a recurring warning at most once per interval, so
// an outage (a store that cannot be reached) writes a line per interval with
// a count of what it held back, not a line per request.
package logthrottle

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Logger writes Warn records through an slog.Logger at most once per
// interval. It is safe for concurrent use; the zero value is not usable.
type Logger struct {
	logger     *slog.Logger
	interval   int64        // nanoseconds
	next       atomic.Int64 // unix nanos before which nothing is logged
	suppressed atomic.Int64
	now        func() time.Time
}

// New returns a Logger writing to l at most once per interval, reading the
// time from now (nil: time.Now).
func New(l *slog.Logger, interval time.Duration, now func() time.Time) *Logger {
	if now == nil {
		now = time.Now
	}
	return &Logger{logger: l, interval: int64(interval), now: now}
}

// Warn logs msg with attrs unless a record was logged less than an interval
// ago; then it only counts it. Every record logged carries, as
// "suppressed", the count of those held back since the previous one.
func (l *Logger) Warn(ctx context.Context, msg string, attrs ...slog.Attr) {
	now := l.now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+l.interval) {
		l.suppressed.Add(1)
		return
	}
	attrs = append(attrs, slog.Int64("suppressed", l.suppressed.Swap(0)))
	l.logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
}

// Package logthrottle logs a recurring warning at most once per interval, so
// an outage (a store that cannot be reached) writes a line per interval with
// a count of what it held back, not a line per request.
package logthrottle

import (
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

// New returns a Logger writing to l at most once per interval.
func New(l *slog.Logger, interval time.Duration) *Logger {
	return &Logger{logger: l, interval: int64(interval), now: time.Now}
}

// Warn logs msg with args unless a record was logged less than an interval
// ago; then it only counts it. The next record logged carries the count of
// those held back as "suppressed".
func (l *Logger) Warn(msg string, args ...any) {
	now := l.now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+l.interval) {
		l.suppressed.Add(1)
		return
	}
	if n := l.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed", n)
	}
	l.logger.Warn(msg, args...)
}

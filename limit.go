// Package floodgate is a distributed rate limiter: the core types that every
// store and front end shares.
//
// A [Limit] names an algorithm and its parameters, a [Store] decides whether a
// request of some cost fits that limit for one key, and a [Decision] reports
// the outcome with the figures clients need (remaining quota, when to retry,
// when the key is fully replenished).
//
// The stores live in their own packages: memory (the embedded default,
// in-process), redisstore (shared by every app instance, decided atomically
// in Redis) and remotestore (through a floodgate server). The front ends
// (httplimit, grpclimit, the standalone server, Envoy's service) accept any
// Store. Beside the Store, [Wait] blocks until a request is admitted, and
// [AllowAll] and [WaitAll] decide several limits all or nothing.
//
// # Keys
//
// A key holds one limit's state. Two limits of the same algorithm on one
// key count the same requests: after 3 requests under PerMinute(10) on
// "user-42", PerHour(1000) on "user-42" has 996 remaining, and PerSecond(2)
// denies. Give each limit its own key, such as "per-minute|user-42" and
// "per-hour|user-42" (the front ends do it for you: their store keys begin
// with the rule's name). Limits of different algorithms on one key are kept
// apart.
//
// # Shared semantics
//
// Every store implements these rules exactly, and the conformance suite in
// package storetest checks them:
//
//   - A denied request consumes nothing: a client hammering a key while it is
//     over its limit does not push its own retry time further out.
//   - Remaining is never negative.
//   - A cost larger than the limit's quota (or bucket capacity) can never
//     succeed: the store returns [ErrCostExceedsLimit] instead of admitting it
//     or asking the caller to wait forever.
//   - RetryAfter is exact: a retry of the same cost at RetryAfter is admitted
//     (unless other requests took the quota meanwhile), one earlier is not.
//   - Time is kept in whole microseconds.
package floodgate

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// Algorithm selects how a [Limit] counts requests.
type Algorithm uint8

// The algorithms. The zero value is invalid, so that a forgotten field is an
// error rather than a silent default.
const (
	// SlidingWindowLog keeps the time of every admitted request for one
	// window: exact (never more than Quota admitted in any interval of length
	// Window), memory O(Quota) per key.
	SlidingWindowLog Algorithm = iota + 1
	// TokenBucket holds up to Quota tokens, refilled at Refill tokens per
	// Window; each request takes its cost in tokens. O(1) memory; allows
	// bursts of up to Quota.
	TokenBucket
	// SlidingWindowCounter counts requests in clock-aligned windows and
	// weights the previous window's count by how much of it still overlaps
	// the sliding window. O(1) memory; an approximation of the log.
	SlidingWindowCounter
	// FixedWindow counts requests in clock-aligned windows. O(1) memory; it
	// admits up to 2*Quota across a window edge (the boundary burst), and is
	// offered for comparison and compatibility.
	FixedWindow
)

// algorithmNames is the one list of algorithms: everything else (validity,
// parsing, error messages, internal/algorithmlist and through it the stores'
// tables) derives from it.
var algorithmNames = [...]string{
	SlidingWindowLog:     "sliding_window_log",
	TokenBucket:          "token_bucket",
	SlidingWindowCounter: "sliding_window_counter",
	FixedWindow:          "fixed_window",
}

// String returns the algorithm's configuration name, such as
// "sliding_window_log".
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

func (a Algorithm) valid() bool { return a > 0 && int(a) < len(algorithmNames) }

// ParseAlgorithm returns the algorithm whose configuration name is s.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if a > 0 && s == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w: algorithm %q is not one of %s", ErrInvalidLimit, s, strings.Join(algorithmNames[1:], ", "))
}

// MarshalText implements [encoding.TextMarshaler]. It fails for a value that
// is none of the algorithms' constants.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: algorithm %d", ErrInvalidLimit, a)
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Bounds that keep every store's arithmetic exact. The Redis store computes
// in Lua, whose numbers are IEEE doubles: integers are exact up to 2^53.
const (
	// minWindow is the shortest window or refill period a Limit accepts.
	minWindow = time.Millisecond
	// maxWindow is the longest window or refill period a Limit accepts.
	maxWindow = 366 * 24 * time.Hour
	// maxQuota is the largest quota or capacity a Limit accepts.
	maxQuota = 1 << 40
	// maxLogQuota is the largest quota of a SlidingWindowLog limit: the log
	// keeps one entry per admitted request, so its memory grows with it.
	maxLogQuota = 1 << 20
	// maxExact is the largest integer every store computes exactly.
	maxExact = 1 << 53
)

// Limit is a rate limit: an algorithm and its parameters. The zero value is
// invalid; build one with [PerSecond], [PerMinute], [PerHour], [NewLimit] or
// [NewTokenBucket], or fill the fields and call [Limit.Validate].
//
// A Limit is a small value, safe to copy and to share between goroutines.
type Limit struct {
	// Algorithm selects how requests are counted.
	Algorithm Algorithm
	// Quota is the number of requests admitted per Window for the windowed
	// algorithms, and the bucket's capacity (the largest burst) for
	// TokenBucket.
	Quota int64
	// Window is the window length for the windowed algorithms, and the
	// period over which Refill tokens are added for TokenBucket.
	Window time.Duration
	// Refill is the number of tokens added per Window (TokenBucket only).
	// Zero means Quota: a bucket of 100 per minute refills 100 per minute.
	// Fractional rates are exact: 0.5 per second is Refill 1 per 2s, and 1
	// per 7 seconds is Refill 1 per 7s.
	Refill int64
}

// NewLimit returns a limit of quota requests per window with the given
// algorithm. For TokenBucket, quota is the capacity and the bucket refills
// quota tokens per window.
func NewLimit(alg Algorithm, quota int64, window time.Duration) Limit {
	return Limit{Algorithm: alg, Quota: quota, Window: window}
}

// NewTokenBucket returns a token bucket holding up to capacity tokens,
// refilled with refill tokens every per: NewTokenBucket(100, 10, time.Second)
// bursts to 100 and sustains 10 per second.
func NewTokenBucket(capacity, refill int64, per time.Duration) Limit {
	return Limit{Algorithm: TokenBucket, Quota: capacity, Window: per, Refill: refill}
}

// PerSecond returns a sliding-window-log limit of n requests per second.
func PerSecond(n int64) Limit { return NewLimit(SlidingWindowLog, n, time.Second) }

// PerMinute returns a sliding-window-log limit of n requests per minute.
func PerMinute(n int64) Limit { return NewLimit(SlidingWindowLog, n, time.Minute) }

// PerHour returns a sliding-window-log limit of n requests per hour.
func PerHour(n int64) Limit { return NewLimit(SlidingWindowLog, n, time.Hour) }

// String describes the limit, such as "100 per 1m0s (sliding_window_log)" or
// "capacity 100, 10 per 1s (token_bucket)".
func (l Limit) String() string {
	if l.Algorithm == TokenBucket {
		return fmt.Sprintf("capacity %d, %d per %s (%s)", l.Quota, fixedpoint.Refill(l.Quota, l.Refill), l.Window, l.Algorithm)
	}
	return fmt.Sprintf("%d per %s (%s)", l.Quota, l.Window, l.Algorithm)
}

// LimitError reports an invalid Limit field. It matches [ErrInvalidLimit]
// with [errors.Is].
type LimitError struct {
	Field  string // the field's name, such as "Window"
	Value  string // the bad value, formatted
	Reason string // what is wrong, such as "must be at least 1ms"
}

// Error implements error.
func (e *LimitError) Error() string {
	return fmt.Sprintf("floodgate: invalid limit: %s %s %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is ErrInvalidLimit.
func (e *LimitError) Is(target error) bool { return target == ErrInvalidLimit }

// Validate reports whether l is usable: a known algorithm, a quota of at
// least 1 and at most 2^40 (2^20 for a SlidingWindowLog, which keeps one
// entry per admitted request), a window of whole microseconds from 1ms to
// 366 days, a refill (TokenBucket) of at most 2^40 tokens, and parameters
// small enough for exact arithmetic in every store. The error is a
// *LimitError naming the field and the value.
func (l Limit) Validate() error {
	if !l.Algorithm.valid() {
		return &LimitError{Field: "Algorithm", Value: strconv.Itoa(int(l.Algorithm)), Reason: "is not a known algorithm"}
	}
	badQuota := func(reason string) error {
		return &LimitError{Field: "Quota", Value: strconv.FormatInt(l.Quota, 10), Reason: reason}
	}
	switch {
	case l.Quota < 1:
		return badQuota("must be at least 1")
	case l.Quota > maxQuota:
		return badQuota(fmt.Sprintf("must be at most %d", int64(maxQuota)))
	case l.Algorithm == SlidingWindowLog && l.Quota > maxLogQuota:
		return badQuota(fmt.Sprintf("must be at most %d for sliding_window_log (one entry per request)", maxLogQuota))
	}
	badWindow := func(reason string) error {
		return &LimitError{Field: "Window", Value: l.Window.String(), Reason: reason}
	}
	switch {
	case l.Window < minWindow:
		return badWindow("must be at least 1ms")
	case l.Window > maxWindow:
		return badWindow("must be at most 366 days")
	case l.Window%time.Microsecond != 0:
		return badWindow("must be a whole number of microseconds")
	}
	badRefill := func(reason string) error {
		return &LimitError{Field: "Refill", Value: strconv.FormatInt(l.Refill, 10), Reason: reason}
	}
	if l.Algorithm != TokenBucket {
		if l.Refill != 0 {
			return badRefill("applies to token_bucket only")
		}
		return nil
	}
	switch {
	case l.Refill < 0:
		return badRefill("must not be negative")
	case l.Refill > maxQuota:
		return badRefill(fmt.Sprintf("must be at most %d", int64(maxQuota)))
	}
	// A unit is at most the window in microseconds: when the window times
	// the quota is exact, so is every level, and no divisor need be found.
	if hi, lo := bits.Mul64(uint64(l.Window.Microseconds()), uint64(l.Quota)); hi == 0 && lo <= maxExact {
		return nil
	}
	if unit := fixedpoint.Unit(l.Window.Microseconds(), fixedpoint.Refill(l.Quota, l.Refill)); unit > maxExact/l.Quota {
		return badQuota(fmt.Sprintf("times the refill period (%s per %d tokens) is too large for exact token arithmetic; use a smaller capacity or a faster refill", l.Window, fixedpoint.Refill(l.Quota, l.Refill)))
	}
	return nil
}

// Sentinel errors, matched with [errors.Is].
var (
	// ErrInvalidLimit means a Limit failed Validate; the error is a
	// *LimitError naming the field.
	ErrInvalidLimit = errors.New("floodgate: invalid limit")
	// ErrInvalidCost means a negative cost was requested, a cost above
	// 65,536 under a SlidingWindowLog, or, in a batch, a cost below 1.
	ErrInvalidCost = errors.New("floodgate: invalid cost")
	// ErrCostExceedsLimit means a cost above the limit's quota was
	// requested: such a request can never be admitted, so the store says so
	// instead of admitting it or reporting a retry time.
	ErrCostExceedsLimit = errors.New("floodgate: cost exceeds limit")
	// ErrStoreUnavailable means the store could not decide in time (Redis
	// down, slow or unreachable). Front ends apply the rule's failure mode.
	ErrStoreUnavailable = errors.New("floodgate: store unavailable")
)

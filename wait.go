package floodgate

import (
	"context"
	"fmt"
	"time"
)

// Wait is WaitN with a cost of 1.
func Wait(ctx context.Context, s Store, key string, limit Limit) (Decision, error) {
	return waitN(ctx, "Wait", s, key, limit, 1)
}

// WaitN blocks until s admits a request of cost n for key under limit, or
// ctx ends, as x/time/rate's Limiter.WaitN does for one process. On a
// denial it sleeps the decision's RetryAfter and asks again (another
// caller may have taken the quota meanwhile, so it may ask more than
// twice). When ctx's deadline would pass before the retry, it returns at
// once, without sleeping, with an error matching context.DeadlineExceeded.
// A store error ends the wait with it (ErrCostExceedsLimit: the cost can
// never fit; ErrStoreUnavailable: the caller decides what an outage
// means).
//
// It returns the admitting decision, or the last one with the error. It
// sleeps on the system clock, so a store moved by a clocktest.Manual never
// sees the time pass: test with testing/synctest. It is safe for
// concurrent use, as the store is; each caller waits on its own.
func WaitN(ctx context.Context, s Store, key string, limit Limit, n int64) (Decision, error) {
	return waitN(ctx, "WaitN", s, key, limit, n)
}

// WaitAll is WaitN for several limits at once: it blocks until [AllowAll]
// admits items, all or nothing, or ctx ends, sleeping the deciding
// denial's RetryAfter between tries, so a request waiting on one limit
// holds nothing of the others meanwhile. Its errors are AllowAll's and
// WaitN's.
func WaitAll(ctx context.Context, s Store, items ...BatchItem) (Decision, error) {
	return wait(ctx, "WaitAll", func() (Decision, error) { return allowAll(ctx, "WaitAll", s, items) })
}

// waitN is WaitN, its errors naming op.
func waitN(ctx context.Context, op string, s Store, key string, limit Limit, n int64) (Decision, error) {
	if s == nil {
		return Decision{}, fmt.Errorf("floodgate: %s: the store is nil", op)
	}
	return wait(ctx, op, func() (Decision, error) { return s.AllowN(ctx, key, limit, n) })
}

// wait calls try until it admits or fails, sleeping each denial's
// RetryAfter in between, for as long as ctx allows.
func wait(ctx context.Context, op string, try func() (Decision, error)) (Decision, error) {
	var d Decision
	for {
		if err := ctx.Err(); err != nil {
			return d, fmt.Errorf("floodgate: %s: %w", op, err)
		}
		var err error
		if d, err = try(); err != nil || d.Allowed {
			return d, err
		}
		// A store keeps time in microseconds: never spin on a zero delay.
		delay := max(d.RetryAfter, time.Microsecond)
		if deadline, ok := ctx.Deadline(); ok {
			if left := time.Until(deadline); left < delay {
				return d, fmt.Errorf("floodgate: %s: the retry in %s would come after the context's deadline, %s away: %w",
					op, delay, max(left, 0), context.DeadlineExceeded)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return d, fmt.Errorf("floodgate: %s: %w", op, ctx.Err())
		case <-t.C:
		}
	}
}

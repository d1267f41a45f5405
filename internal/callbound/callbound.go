// Package callbound lets the decision engine give a store call that no
// request waits on, such as a lease's fetch in the background, a bound of
// its own in place of the store's per-request timeout: on a machine whose
// cores are held by callers that never block, the goroutines that carry
// such a call can wait longer than a request's timeout to run, and the
// call would fail with no store at fault.
package callbound

import (
	"context"
	"time"
)

type key struct{}

// With returns ctx carrying d as the bound of the store calls made under it.
func With(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, key{}, d)
}

// From returns the bound ctx carries, if any.
func From(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(key{}).(time.Duration)
	return d, ok && d > 0
}

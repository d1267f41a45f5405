package storetest_test

import (
	"context"
	"sync"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/storetest"
)

// serialBatch is the plainest BatchStore: one lock around every call, a
// batch decided by AllowN calls in item order and undone by RefundN calls
// when one is denied. The suite's batch cases must pass it.
type serialBatch struct {
	mu sync.Mutex
	s  floodgate.Store
}

func (b *serialBatch) Allow(ctx context.Context, key string, l floodgate.Limit) (floodgate.Decision, error) {
	return b.AllowN(ctx, key, l, 1)
}

func (b *serialBatch) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.AllowN(ctx, key, l, n)
}

func (b *serialBatch) RefundN(ctx context.Context, key string, l floodgate.Limit, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.RefundN(ctx, key, l, n)
}

func (b *serialBatch) Reset(ctx context.Context, key string, l floodgate.Limit) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.Reset(ctx, key, l)
}

func (b *serialBatch) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	denied := false
	for i, it := range items {
		d, err := b.s.AllowN(ctx, it.Key, it.Limit, it.Cost)
		if it.Cost == 0 && err == nil { // a batch takes what it decides: cost 0 is AllowN's only
			d, err = floodgate.Decision{Limit: it.Limit.Quota}, floodgate.ErrInvalidCost
		}
		results[i] = floodgate.BatchResult{Decision: d, Err: err}
		denied = denied || err == nil && !d.Allowed
	}
	if !denied {
		return
	}
	for i := len(items) - 1; i >= 0; i-- {
		if r := results[i]; r.Err == nil && r.Decision.Allowed {
			if err := b.s.RefundN(ctx, items[i].Key, items[i].Limit, items[i].Cost); err != nil {
				results[i].Err = err
			}
		}
	}
}

func TestRunBatchOnSerialBatch(t *testing.T) {
	storetest.RunBatch(t, func(t *testing.T, clock floodgate.Clock) floodgate.Store {
		return &serialBatch{s: memory.New(memory.WithClock(clock))}
	})
}

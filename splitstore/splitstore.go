// Package splitstore is a [floodgate.Store] that keeps the per-second
// limits in a store of their own: every call for a limit whose Window is
// exactly one second goes to the per-second store, every other call to the
// main store. It is envoyproxy/ratelimit's REDIS_PERSECOND (per-second
// limits, the busiest keys, in a second Redis) for every front end of
// floodgate, as `store.per_second` in floodgate's configuration.
//
// A [Store] is a [floodgate.BatchStore]: a request whose checks all go to
// one store is that store's batch; one whose checks span both is decided in
// both at once, and when either denies, the other gives its admitted items
// back with RefundN (not atomically across the two). It is a
// [health.Reporter] too, with both stores' nodes, so readiness fails while
// either is down.
package splitstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/health"
)

// Window is the window length whose limits go to the per-second store.
const Window = time.Second

// Store routes each call to one of two stores by its limit's window. It is
// safe for concurrent use; it does not own the stores (close them after
// it).
type Store struct {
	main, perSecond floodgate.BatchStore
}

var (
	_ floodgate.BatchStore = (*Store)(nil)
	_ health.Reporter      = (*Store)(nil)
)

// New returns a store that sends the calls of limits of [Window] to
// perSecond and all others to main.
func New(main, perSecond floodgate.BatchStore) (*Store, error) {
	if main == nil || perSecond == nil {
		return nil, errors.New("splitstore: both the main and the per-second store are required")
	}
	return &Store{main: main, perSecond: perSecond}, nil
}

// Timeout returns the shorter of the two stores' per-call timeouts, as
// their Timeout methods report them (redisstore's, remotestore's), or 0
// when neither has one: the bound the library front ends hold their own
// Timeout below.
func (s *Store) Timeout() time.Duration {
	var least time.Duration
	for _, st := range []floodgate.Store{s.main, s.perSecond} {
		if ts, ok := st.(interface{ Timeout() time.Duration }); ok {
			if d := ts.Timeout(); d > 0 && (least == 0 || d < least) {
				least = d
			}
		}
	}
	return least
}

// route returns the store of limit l's calls.
func (s *Store) route(l floodgate.Limit) floodgate.BatchStore {
	if l.Window == Window {
		return s.perSecond
	}
	return s.main
}

// Allow is AllowN with a cost of 1.
func (s *Store) Allow(ctx context.Context, key string, limit floodgate.Limit) (floodgate.Decision, error) {
	return s.route(limit).AllowN(ctx, key, limit, 1)
}

// AllowN decides in the store of limit's window.
func (s *Store) AllowN(ctx context.Context, key string, limit floodgate.Limit, n int64) (floodgate.Decision, error) {
	return s.route(limit).AllowN(ctx, key, limit, n)
}

// RefundN gives back in the store of limit's window.
func (s *Store) RefundN(ctx context.Context, key string, limit floodgate.Limit, n int64) error {
	return s.route(limit).RefundN(ctx, key, limit, n)
}

// Reset clears key under limit's algorithm in both stores, at once: a rule
// whose window changed to or from one second left its earlier state in the
// other store. It is thus a round trip to each, as readiness probes want.
// The error names the store that failed.
func (s *Store) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	var perSecondErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.perSecond.Reset(ctx, key, limit); err != nil {
			perSecondErr = fmt.Errorf("per-second store: %w", err)
		}
	}()
	mainErr := s.main.Reset(ctx, key, limit)
	<-done
	return errors.Join(mainErr, perSecondErr)
}

// AllowBatch decides items as one request, all or nothing (see the package
// documentation and floodgate.BatchStore).
func (s *Store) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	results = results[:len(items)]
	perSecond := 0
	for _, it := range items {
		if it.Limit.Window == Window {
			perSecond++
		}
	}
	switch perSecond {
	case 0:
		s.main.AllowBatch(ctx, items, results)
		return
	case len(items):
		s.perSecond.AllowBatch(ctx, items, results)
		return
	}
	var parts [2]part
	for i, it := range items {
		p := &parts[0]
		if it.Limit.Window == Window {
			p = &parts[1]
		}
		p.index = append(p.index, i)
		p.items = append(p.items, it)
	}
	parts[0].store, parts[1].store = s.main, s.perSecond
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		parts[1].decide(ctx)
	}()
	parts[0].decide(ctx)
	wg.Wait()
	for _, p := range parts {
		for j, i := range p.index {
			results[i] = p.results[j]
		}
	}
	if !parts[0].denied && !parts[1].denied {
		return
	}
	// The part that denied recorded nothing; the other gives its admitted
	// items back, even if the caller has gone away (the stores bound their
	// own calls): a denied request must not keep quota.
	rctx := context.WithoutCancel(ctx)
	for _, p := range parts {
		if p.denied {
			continue
		}
		for j, i := range p.index {
			r := p.results[j]
			if r.Err != nil || !r.Decision.Allowed {
				continue
			}
			it := p.items[j]
			if err := p.store.RefundN(rctx, it.Key, it.Limit, it.Cost); err != nil {
				results[i].RefundErr = fmt.Errorf("splitstore: another item of the batch was denied, and giving this admitted one back failed (it may still be recorded): %w", err)
			}
		}
	}
}

// part is the items of a batch that go to one store.
type part struct {
	store   floodgate.BatchStore
	index   []int // the items' indexes in the batch
	items   []floodgate.BatchItem
	results []floodgate.BatchResult
	denied  bool // an item was denied: the store recorded none of them
}

func (p *part) decide(ctx context.Context) {
	p.results = make([]floodgate.BatchResult, len(p.items))
	p.store.AllowBatch(ctx, p.items, p.results)
	for _, r := range p.results {
		if r.Err == nil && !r.Decision.Allowed {
			p.denied = true
		}
	}
}

// PerSecondPrefix starts the names of the per-second store's nodes in
// Health.
const PerSecondPrefix = "per-second "

// Health reports both stores' health, without a round trip: connected when
// both are, every node of each (the per-second store's named with
// [PerSecondPrefix]), and both stores' warnings. A store that does not
// report its health (the memory store) counts as connected, without nodes.
func (s *Store) Health() health.Report {
	h := reportOf(s.main)
	ps := reportOf(s.perSecond)
	h.Connected = h.Connected && ps.Connected
	if ps.Error != "" {
		if h.Error != "" {
			h.Error += "; "
		}
		h.Error += "per-second store: " + ps.Error
	}
	for _, n := range ps.Nodes {
		n.Addr = PerSecondPrefix + n.Addr
		h.Nodes = append(h.Nodes, n)
	}
	for _, w := range ps.Warnings {
		h.Warnings = append(h.Warnings, "per-second store: "+w)
	}
	return h
}

// InProcess reports whether both stores decide in this process (each has
// an InProcess method that says so), as two memory stores do: an engine in
// front of them then needs no over-limit cache.
func (s *Store) InProcess() bool { return inProcess(s.main) && inProcess(s.perSecond) }

// Broadcast sends msg on the main store's change channel, if it has one
// (see redisstore.Store.Broadcast): every instance listens there.
func (s *Store) Broadcast(ctx context.Context, msg string) error {
	if b, ok := s.main.(changes); ok {
		return b.Broadcast(ctx, msg)
	}
	return nil
}

// Listen listens on the main store's change channel until ctx ends; with
// a main store that has none, it waits for ctx alone.
func (s *Store) Listen(ctx context.Context, fn func(msg string)) error {
	if b, ok := s.main.(changes); ok {
		return b.Listen(ctx, fn)
	}
	<-ctx.Done()
	return ctx.Err()
}

// changes is a store with a change channel.
type changes interface {
	Broadcast(ctx context.Context, msg string) error
	Listen(ctx context.Context, fn func(msg string)) error
}

func inProcess(s floodgate.Store) bool {
	l, ok := s.(interface{ InProcess() bool })
	return ok && l.InProcess()
}

func reportOf(s floodgate.Store) health.Report {
	if hr, ok := s.(health.Reporter); ok {
		return hr.Health()
	}
	return health.Report{Connected: true}
}

// Package quota divides a limit's rate among the clients that report their
// demand for it, across every instance that shares one store: the
// assignments of Envoy's Rate Limit Quota Service, where each Envoy applies
// a token bucket the server gives it and reports what it admitted and
// denied.
//
// Every instance runs a [Sharer] over its decision engine. Four times per
// reporting interval, on the store's own clock, every instance adds its
// clients' demand for a bucket to one counter in the store and, a
// sixteenth of an interval later, reads the total back: all instances read
// the same total, so the parts they hand out, each in proportion to its
// own clients' demand, add up to the limit's rate. Eight store calls per
// bucket per instance per interval, whatever the number of requests.
//
// The shares an instance has in force add up to 95.5-98% of its part (the
// rest absorbs the full bucket Envoy starts each changed share with);
// a share changes only when its target moves by more than its client's
// counting noise (at least 2%) or when the sum needs it, so that noise
// alone refills no bucket. Between rounds, a report that moves a
// client's target beyond its noise moves its share at once, within the
// instance's part: down at once, up as far as the other shares in force
// leave room. See docs/ENVOY.md's quota section for the bound.
package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultIdle     = time.Minute
)

// Options configure a Sharer. The zero value of each field picks its
// default.
type Options struct {
	// Interval is the reporting interval: how often each instance adds
	// its demand to the store and shares anew. Clients should report at
	// least as often. Default: DefaultInterval.
	Interval time.Duration
	// TTL is how long a client may apply a share it was sent; a share
	// still in force is sent again before then. It must be a whole number
	// of seconds (Envoy ignores fractions) longer than two intervals.
	// Default: three intervals, rounded up to a whole second.
	TTL time.Duration
	// Idle abandons a client's bucket it reported no use of for this
	// long. Default: DefaultIdle.
	Idle time.Duration
	// Logger receives store failures. Default: discard.
	Logger *slog.Logger
}

// Bucket is one shared limit: every client that reports a Bucket with the
// same Key shares its Limit's rate (Limit.Quota per Limit.Window).
type Bucket struct {
	// Rule names the bucket in logs.
	Rule string
	// Key is the store key of the bucket's demand counter; distinct
	// limits need distinct keys.
	Key string
	// Limit is the limit shared.
	Limit floodgate.Limit
	// Failure is what the clients get while the store cannot be asked:
	// FailOpen an AllowAll share, FailLocal the shares last sent, kept in
	// force, anything else DenyAll.
	Failure decide.FailureMode
}

// Share is what a client is sent for a bucket.
type Share struct {
	// Tokens is the client's part of the limit, per Limit.Window.
	Tokens int64
	// Burst is the most the client admits at once: the size of its token
	// bucket, at least 1.
	Burst int64
	// Blanket, when not None, replaces the token bucket: the store could
	// not be asked (AllowAll, DenyAll), or Abandon (the client's bucket
	// went idle and is forgotten).
	Blanket Blanket
	// TTL is how long the client may apply the share.
	TTL time.Duration
}

// Blanket is a share that is not a token bucket.
type Blanket uint8

// The blankets.
const (
	None Blanket = iota
	AllowAll
	DenyAll
	Abandon
)

// margin is the part of the limit handed out (the rest absorbs the full
// buckets Envoy starts every changed share with), and band the least
// relative change of a target that changes a share in force: see
// Sharer.share for how the shares in force are kept within the margin.
const (
	margin = 0.98
	band   = 0.02
)

// floor is the least part of its budget (margin × its part of the limit)
// the shares an instance has in force add up to: under it, the shares
// furthest below their targets are raised. Higher, and noise raises more
// shares, each a full Envoy bucket (over the limit under random arrivals);
// lower, and shares set before a shift stay low for longer.
const floor = 0.975

// rounds is the number of sharing rounds per interval, and writeAt and
// readAt where in a round (of the store's clock) each instance adds its
// demand and reads the total: a report reaches the shares within a
// quarter of an interval, and every instance has a sixteenth of one to
// add its demand before any reads.
const (
	rounds  = 4
	writeAt = 5 // eighths of a round
	readAt  = 7
)

// dispersed is a token bucket's size, over the dispersion of its client's
// arrivals, for arrivals at random (Sharer.burst).
const dispersed = 4

// aggregate is the demand counters' quota: never reached.
const aggregate = 1 << 40

// Sharer shares buckets among the clients of one instance, in step with
// every other Sharer on the same store. It is safe for concurrent use.
type Sharer struct {
	engine *decide.Engine
	opts   Options
	agg    floodgate.Limit // the demand counters' limit
	round  time.Duration   // a quarter of the interval: the demand counters' window

	mu      sync.Mutex
	buckets map[string]*bucket
	nextID  uint64
	end     time.Time // the store's current interval's end, in this clock
	closed  bool
	follows []following   // members whose report moved their target: follow them
	kick    chan struct{} // wakes the goroutine for follows

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New returns a Sharer asking the store through engine. Close stops it.
func New(engine *decide.Engine, opts Options) (*Sharer, error) {
	if engine == nil {
		return nil, errors.New("quota: New needs an engine")
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Interval < 10*time.Millisecond {
		return nil, fmt.Errorf("quota: Options.Interval %v is below 10ms: the store calls of a round (a quarter of it) must fit in a sixteenth of it", opts.Interval)
	}
	if opts.Interval%(rounds*time.Microsecond) != 0 {
		return nil, fmt.Errorf("quota: Options.Interval %v must be a whole number of %dµs, so that its rounds are whole microseconds (try %v)", opts.Interval, rounds, opts.Interval.Truncate(time.Millisecond))
	}
	if opts.TTL == 0 {
		opts.TTL = max(time.Second, (3*opts.Interval+time.Second-1)/time.Second*time.Second)
	}
	if opts.TTL%time.Second != 0 || opts.TTL <= 2*opts.Interval {
		return nil, fmt.Errorf("quota: Options.TTL %v must be a whole number of seconds longer than two intervals (%v): Envoy applies whole seconds only", opts.TTL, 2*opts.Interval)
	}
	if opts.Idle == 0 {
		opts.Idle = DefaultIdle
	}
	if opts.Idle < 2*opts.Interval {
		return nil, fmt.Errorf("quota: Options.Idle %v must be at least two intervals (%v)", opts.Idle, 2*opts.Interval)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	round := opts.Interval / rounds
	return &Sharer{
		round:   round,
		engine:  engine,
		opts:    opts,
		agg:     floodgate.NewLimit(floodgate.FixedWindow, aggregate, round),
		buckets: map[string]*bucket{},
		kick:    make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}, nil
}

// Options returns the options in force, defaults filled in.
func (s *Sharer) Options() Options { return s.opts }

// Client is one party sharing buckets: an Envoy's stream.
type Client struct {
	s    *Sharer
	id   uint64
	send func(Bucket, Share)
}

// Join adds a client whose shares are given to send, from the Sharer's
// goroutine: send must not block, nor call the Sharer. Leave removes it.
func (s *Sharer) Join(send func(Bucket, Share)) *Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.once.Do(func() { go s.run() })
	return &Client{s: s, id: s.nextID, send: send}
}

// Report records that the client used n units of b (admitted and denied
// requests alike: its demand) since its previous report of b. The first
// report of a bucket that has use subscribes the client to it. A report
// that moves the target of the client's share beyond its noise has the
// Sharer send it a new share at once, rather than at the next round.
func (c *Client) Report(b Bucket, n int64) {
	s := c.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	bk := s.buckets[b.Key]
	if n == 0 && (bk == nil || bk.clients[c.id] == nil) {
		return // an abandoned bucket comes back with a request (Envoy reports it at once)
	}
	if bk == nil {
		bk = &bucket{Bucket: b, clients: map[uint64]*member{}}
		s.buckets[b.Key] = bk
	}
	bk.Bucket = b // a reload may change the limit
	m := bk.clients[c.id]
	if m == nil {
		m = &member{client: c, used: now}
		bk.clients[c.id] = m
	}
	m.report(n, now, s.opts.Interval)
	if d, _ := s.off(bk, m); d != 0 {
		s.follows = append(s.follows, following{bk, m})
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// Leave removes the client from every bucket: what it was sent stops
// counting at the next interval.
func (c *Client) Leave() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, bk := range s.buckets {
		delete(bk.clients, c.id)
		if len(bk.clients) == 0 {
			delete(s.buckets, k)
		}
	}
}

// Drain sends every client a TTL of 0 for each share in force, so that it
// falls back at once, and stops sharing: call it before shutting down.
func (s *Sharer) Drain() {
	s.mu.Lock()
	s.closed = true
	var out []delivery
	for _, bk := range s.buckets {
		for _, m := range bk.clients {
			if m.sent != nil {
				sh := *m.sent
				sh.TTL = 0
				out = append(out, delivery{m.client, bk.Bucket, sh})
			}
		}
	}
	s.buckets = map[string]*bucket{}
	s.mu.Unlock()
	deliver(out)
	s.Close()
}

// Close stops the Sharer's goroutine and waits for it.
func (s *Sharer) Close() {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	started := s.nextID > 0
	s.mu.Unlock()
	if started {
		<-s.done
	}
}

// bucket is a Bucket and its clients on this instance.
type bucket struct {
	Bucket
	clients map[uint64]*member
	wrote   int64     // the demand added to the store this interval
	wroteAt time.Time // the end of the interval it was added in; zero: none
	failed  bool      // the store could not be asked this interval
	others  int64     // the other instances' demand at the last round shared
	held    bool      // the last round kept the shares: the others' demand fell
	budget  float64   // the tokens the last round shared among the members
	scale   float64   // and its tokens per unit of a member's demand
}

// member is one client's part in a bucket.
type member struct {
	client     *Client
	rate       float64   // units per second: the estimate in force
	acc        int64     // units reported since from
	from       time.Time // when the estimate's measurement began
	moved      bool      // the demand changed at the last report, which may hold some of before
	last       time.Time // its last report
	prev       time.Time // the one before
	prevN      int64     // the units of the last report
	spread     float64   // the mean squared relative deviation of a report from the rate, over about 8 reports
	spreadN    int       // the reports in spread, up to 8
	reports    int       // reports taken since the spread last started again
	restarted  bool      // the last report started the spread again
	jumpedFrom float64   // the rate before the last report, if that report jumped to twice it or half
	used       time.Time // the last report with use
	demand     int64     // its demand as added to the store this interval
	sent       *Share    // the share in force
	sentAt     time.Time
}

// report takes a report of n units at now into m's rate. The rate in
// force is the mean since the demand last changed, over at most ten
// intervals, so that a slow client's few requests per report do not
// shake it; a change is seen when the last two reports' rate is off by
// more than their counting's noise (1.5/√units, at least 2%) or the last
// report alone is off by more than four times the spread of those before
// it, and the
// measurement starts again from the last report, then from the next (the
// report that saw the change may hold some of the demand before it).
// A report that jumps to twice the rate or half of it, followed by one
// that holds the jump, starts the spread again too: counting noise,
// relative to the rate, depends on the rate.
func (m *member) report(n int64, now time.Time, interval time.Duration) {
	if n > 0 {
		m.used = now
	}
	defer func() { m.prev, m.prevN, m.last = m.last, n, now }()
	if m.last.IsZero() { // the first report, sent at once: n over one interval
		m.rate, m.acc, m.from = float64(n)/interval.Seconds(), n, now.Add(-interval)
		return
	}
	units, from := n+m.prevN, m.prev
	if m.prev.IsZero() {
		units, from = n, m.last
	}
	fast := float64(units) / max(now.Sub(from), interval/2).Seconds()
	noise := max(band, 1.5/math.Sqrt(float64(max(1, units))))
	// The last report alone, against the spread the reports before it
	// showed: a demand steadier than counting noise shows its change at
	// once. A report's count is off by up to a unit from where its
	// interval cut the requests: 2/n.
	one := float64(n) / max(now.Sub(m.last), interval/2).Seconds()
	dev := 0.0
	if m.rate > 0 {
		dev = (one - m.rate) / m.rate
	}
	jumped := m.reports >= 3 && math.Abs(dev) > max(band, 2/float64(max(1, n)), 4*math.Sqrt(m.spread))
	before := m.jumpedFrom // the rate before the last report, if it jumped
	m.jumpedFrom, m.restarted = 0, false
	switch {
	case math.Abs(fast-m.rate) > noise*m.rate || m.rate == 0 || jumped:
		m.acc, m.from, m.moved = n, m.last, true
	case m.moved: // the report that saw the change may hold some of before: start after it
		m.acc, m.from, m.moved = n, m.last, false
	default:
		m.acc += n
	}
	switch {
	case jumped && (one > 2*m.rate || one < m.rate/2):
		m.jumpedFrom = m.rate
		if before > 0 { // on from, or back from, a jump not yet held: measured from before it
			m.jumpedFrom = before
		}
	case !jumped && before == 0 && m.rate > 0: // the mean of the first 8, then decaying by an eighth
		// (The report after a jump is measured against the one that
		// jumped, which may hold some of before: no measure of noise.)
		m.spreadN = min(8, m.spreadN+1)
		m.spread += (dev*dev - m.spread) / float64(m.spreadN)
	}
	m.reports++
	if span := now.Sub(m.from); span > 10*interval { // forget the oldest half
		m.acc, m.from = int64(float64(m.acc)*(5*interval).Seconds()/span.Seconds()), now.Add(-5*interval)
	}
	m.rate = float64(m.acc) / max(now.Sub(m.from), interval/2).Seconds()
	if before > 0 && (m.rate > 2*before || m.rate < before/2) {
		// The jump held over the next report (one late or early report
		// alone does not): the noise learned at the old rate is not the
		// new rate's.
		m.spread, m.spreadN, m.reports, m.restarted, m.jumpedFrom = 0, 0, 0, true, 0
	}
}

// units is m's demand in thousandths of a unit per interval, at least 1
// (an idle member not yet abandoned keeps a trickle): thousandths, so
// that slow clients' parts are not rounded.
func (m *member) units(interval time.Duration) int64 {
	return max(1, int64(math.Ceil(m.rate*interval.Seconds()*1000)))
}

// tolerance is how far a target may move from the share in force before
// the share is changed: twice the estimate's relative noise (the spread of
// one report over the reports the estimate holds), at least band.
func (m *member) tolerance(interval time.Duration) float64 {
	reports := max(1, m.last.Sub(m.from).Seconds()/interval.Seconds())
	return max(band, 2*math.Sqrt(m.spread/reports))
}

// dispersion is how randomly m's requests come: the variance of a
// report's count over its mean, about 1 for Poisson arrivals and 0 for
// evenly spaced ones.
func (m *member) dispersion(interval time.Duration) float64 {
	return m.spread * m.rate * interval.Seconds()
}

// following is a member whose report moved its share's target.
type following struct {
	bk *bucket
	m  *member
}

// delivery is a share to give a client, outside the Sharer's lock.
type delivery struct {
	c  *Client
	b  Bucket
	sh Share
}

func deliver(out []delivery) {
	for _, d := range out {
		d.c.send(d.b, d.sh)
	}
}

package quota

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/decide"
)

// parallel bounds the store calls a Sharer makes at once.
const parallel = 16

// run is the Sharer's goroutine: in every round of the store's clock (a
// quarter of an interval), five eighths in it adds this instance's demand
// for each bucket to the store, seven eighths in it reads every instance's
// total and shares. Each starts early by as long as its kind last took
// (at most half a round), so that both land in their slots even over a
// slow store. Each slot is acted on once, even when the round's end as
// learned from the store moves a little.
func (s *Sharer) run() {
	defer close(s.done)
	t := s.round
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var last time.Time        // the slot last acted on
	var lead [2]time.Duration // of the writes, of the reads
	// slot is when the write or the read of the round ending at end lands.
	slot := func(end time.Time, write bool) time.Time {
		if write {
			return end.Add(-t + t*writeAt/8)
		}
		return end.Add(-t + t*readAt/8)
	}
	for {
		now := time.Now()
		end := s.windowEnd(now)
		write := true
		switch {
		case now.Before(slot(end, true)):
		case now.Before(slot(end, false)):
			write = false
		default:
			end = end.Add(t)
		}
		at := slot(end, write)
		for !last.IsZero() && at.Sub(last) < t/8 { // that slot is done: the next
			if !write {
				end = end.Add(t)
			}
			write = !write
			at = slot(end, write)
		}
		kind := 1
		if write {
			kind = 0
		}
		timer.Reset(at.Add(-lead[kind]).Sub(now))
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
			s.followReports()
			continue
		case <-timer.C:
		}
		last = at
		began := time.Now()
		if write {
			s.write()
		} else {
			s.read(end)
		}
		// The slowest of the last few, decaying by a quarter a round.
		lead[kind] = min(t/2, max(time.Since(began), lead[kind]*3/4))
	}
}

// windowEnd returns the end of the store's interval that holds now, as
// last learned from the store's answers.
func (s *Sharer) windowEnd(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.round
	if s.end.IsZero() {
		s.end = now.Truncate(t).Add(t)
	}
	for !now.Before(s.end) {
		s.end = s.end.Add(t)
	}
	for now.Before(s.end.Add(-t)) {
		s.end = s.end.Add(-t)
	}
	return s.end
}

// near reports whether two interval ends name the same interval.
func (s *Sharer) near(a, b time.Time) bool {
	d := a.Sub(b)
	return d < s.round/4 && d > -s.round/4
}

// call makes one store call per bucket in parallel, fn building each one's
// check; got receives each answer under the Sharer's lock.
func (s *Sharer) call(bks []*bucket, check func(*bucket) (decide.Check, bool), got func(*bucket, decide.Outcome, time.Time)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, bk := range bks {
		s.mu.Lock()
		c, ok := check(bk)
		s.mu.Unlock()
		if !ok {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx := context.WithoutCancel(s.ctx)
			r := s.engine.Decide(ctx, []decide.Check{c})
			at := time.Now()
			if r.Outcomes[0].Err != nil {
				s.opts.Logger.Warn("floodgate: the quota service could not ask the store", slog.String("rule", c.Rule), slog.String("error", r.Outcomes[0].Err.Error()))
			}
			s.mu.Lock()
			got(bk, r.Outcomes[0], at)
			s.mu.Unlock()
		})
	}
	wg.Wait()
}

// asked reports whether o is the store's answer.
func asked(o decide.Outcome) bool {
	return o.Decided && !o.Local && !o.Cached && o.Err == nil
}

// snapshot returns the buckets, after abandoning the members idle at now.
func (s *Sharer) snapshot(now time.Time) ([]*bucket, []delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery
	bks := make([]*bucket, 0, len(s.buckets))
	for k, bk := range s.buckets {
		for id, m := range bk.clients {
			if now.Sub(m.used) >= s.opts.Idle {
				delete(bk.clients, id)
				out = append(out, delivery{m.client, bk.Bucket, Share{Blanket: Abandon}})
			}
		}
		if len(bk.clients) == 0 {
			delete(s.buckets, k)
			continue
		}
		bks = append(bks, bk)
	}
	return bks, out
}

// write adds each bucket's demand on this instance, in thousandths of a
// unit per interval, to the store's counter of the current interval.
func (s *Sharer) write() {
	bks, out := s.snapshot(time.Now())
	deliver(out)
	s.call(bks, func(bk *bucket) (decide.Check, bool) {
		bk.wrote, bk.wroteAt, bk.failed = 0, time.Time{}, false
		for _, m := range bk.clients {
			m.demand = m.units(s.opts.Interval)
			bk.wrote += m.demand
		}
		return decide.Check{Rule: bk.Rule, Key: bk.Key, Limit: s.agg, Cost: bk.wrote, Failure: decide.FailClosed, NoCache: true}, true
	}, func(bk *bucket, o decide.Outcome, at time.Time) {
		if !asked(o) || o.Verdict != decide.Admitted {
			bk.failed = true
			return
		}
		bk.wroteAt = s.learnLocked(at, o.Decision.ResetAfter)
	})
}

// learnLocked is learn with s.mu held.
func (s *Sharer) learnLocked(at time.Time, resetAfter time.Duration) time.Time {
	s.end = at.Add(resetAfter)
	return s.end
}

// read reads each bucket's total demand in the interval ending at end and
// shares it.
func (s *Sharer) read(end time.Time) {
	bks, out := s.snapshot(time.Now())
	deliver(out)
	s.call(bks, func(bk *bucket) (decide.Check, bool) {
		if bk.failed {
			out = append(out, s.outage(bk, time.Now())...)
			return decide.Check{}, false
		}
		if bk.wroteAt.IsZero() || !s.near(bk.wroteAt, end) {
			out = append(out, s.keep(bk, time.Now())...) // not in step this interval
			return decide.Check{}, false
		}
		return decide.Check{Rule: bk.Rule, Key: bk.Key, Limit: s.agg, CheckOnly: true, Failure: decide.FailClosed, NoCache: true}, true
	}, func(bk *bucket, o decide.Outcome, at time.Time) {
		now := time.Now()
		if !asked(o) {
			out = append(out, s.outage(bk, now)...)
			return
		}
		total := aggregate - o.Decision.Remaining
		if !s.near(s.learnLocked(at, o.Decision.ResetAfter), bk.wroteAt) || total < bk.wrote || total <= 0 {
			out = append(out, s.keep(bk, now)...) // the interval ended between: not in step
			return
		}
		// The other instances' demand fell by more than a tenth since the
		// last round: their write may have landed late, and sharing now
		// would hand out their part too. Keep the shares in force for a
		// round; a fall that stays is shared at the next.
		others := total - bk.wrote
		if others < bk.others-bk.others/10 && !bk.held {
			bk.held = true
			out = append(out, s.keep(bk, now)...)
			return
		}
		bk.held, bk.others = false, others
		out = append(out, s.share(bk, float64(bk.wrote)/float64(total), now)...)
	})
	deliver(out)
}

// share hands out part of bk's limit, this instance's part of the demand
// of every instance as added to the store, among its members in
// proportion to their demand now, which reports since the write may have
// moved (followReports moves their shares between rounds); s.mu is held.
// A share in force stays while its target is within the member's tolerance of it (its estimate's noise, at
// least 2%), unless the shares would then add up to more than the part
// (then the shares furthest above their targets are set to them, until the
// sum fits) or to less than floor of it (then those furthest below, while
// the sum still fits). Every share that changes starts a full bucket
// on its Envoy, so noise alone changes none.
func (s *Sharer) share(bk *bucket, part float64, now time.Time) []delivery {
	var out []delivery
	budget := margin * float64(bk.Limit.Quota) * part
	var units int64
	for _, m := range bk.clients {
		if m.demand != 0 { // else joined after the demand was added: shared next interval
			units += m.units(s.opts.Interval)
		}
	}
	scale := budget / float64(units)
	bk.budget, bk.scale = budget, scale
	plans := make([]plan, 0, len(bk.clients))
	sum := 0.0
	for _, m := range bk.clients {
		if m.demand == 0 {
			continue
		}
		p := plan{m: m, target: scale * float64(m.units(s.opts.Interval))}
		if sent := m.sent; sent != nil && sent.Blanket == None &&
			math.Abs(float64(sent.Tokens)-p.target) <= m.tolerance(s.opts.Interval)*p.target {
			p.keep = true
			sum += float64(sent.Tokens)
		} else {
			sum += math.Floor(p.target)
		}
		plans = append(plans, p)
	}
	if sum > budget {
		slices.SortFunc(plans, func(a, b plan) int {
			return cmp.Compare(b.excess(), a.excess())
		})
		for i := range plans {
			if sum <= budget || plans[i].excess() <= 0 {
				break
			}
			if plans[i].keep {
				sum -= float64(plans[i].m.sent.Tokens) - math.Floor(plans[i].target)
				plans[i].keep = false
			}
		}
	}
	if low := budget * floor; sum < low {
		slices.SortFunc(plans, func(a, b plan) int {
			return cmp.Compare(a.excess(), b.excess())
		})
		for i := range plans {
			if sum >= low || plans[i].excess() >= 0 {
				break
			}
			if plans[i].keep && sum-plans[i].excess() <= budget {
				sum -= plans[i].excess()
				plans[i].keep = false
			}
		}
	}
	for _, p := range plans {
		if p.keep {
			out = s.extend(out, bk, p.m, now)
			continue
		}
		tokens := int64(p.target)
		sh := Share{Tokens: tokens, Burst: s.burst(bk, p.m, tokens), TTL: s.opts.TTL}
		out = s.give(out, bk, p.m, sh, now)
	}
	return out
}

// plan is what share does with one member's share.
type plan struct {
	m      *member
	target float64
	keep   bool // the share in force stays
}

// excess is how far the share in force that p keeps is above its target.
func (p plan) excess() float64 {
	if !p.keep {
		return 0
	}
	return float64(p.m.sent.Tokens) - math.Floor(p.target)
}

// burst is the token bucket's size for a share of tokens per window: a
// quarter of an interval's tokens, at least 2 so that a slow client's
// requests, which come further apart than its tokens, still use them, and
// more for requests that come at random: a bucket of b tokens fed at its
// share's rate by Poisson arrivals a third above it wastes about 16% of
// its tokens at b = 2, 3.5% at 4 and 0.2% at 8, whatever the rate.
func (s *Sharer) burst(bk *bucket, m *member, tokens int64) int64 {
	b := max(2, int64(float64(tokens)*s.opts.Interval.Seconds()/bk.Limit.Window.Seconds()/4))
	return max(b, int64(math.Ceil(dispersed*min(2, m.dispersion(s.opts.Interval)))))
}

// outage gives bk's members what its failure mode says while the store
// cannot be asked; s.mu is held.
func (s *Sharer) outage(bk *bucket, now time.Time) []delivery {
	var blanket Blanket
	switch bk.Failure {
	case decide.FailOpen:
		blanket = AllowAll
	case decide.FailLocal:
		return s.keep(bk, now)
	default:
		blanket = DenyAll
	}
	var out []delivery
	for _, m := range bk.clients {
		if m.sent != nil && m.sent.Blanket == blanket {
			out = s.extend(out, bk, m, now)
			continue
		}
		out = s.give(out, bk, m, Share{Blanket: blanket, TTL: s.opts.TTL}, now)
	}
	return out
}

// keep keeps every share in force, sending them again when their TTL
// would end before the next interval's; s.mu is held.
func (s *Sharer) keep(bk *bucket, now time.Time) []delivery {
	var out []delivery
	for _, m := range bk.clients {
		out = s.extend(out, bk, m, now)
	}
	return out
}

// extend sends m's share in force again if its TTL ends within two
// intervals.
func (s *Sharer) extend(out []delivery, bk *bucket, m *member, now time.Time) []delivery {
	if m.sent == nil || now.Sub(m.sentAt) < s.opts.TTL-2*s.opts.Interval {
		return out
	}
	return s.give(out, bk, m, *m.sent, now)
}

// give records sh as m's share in force and queues it.
func (s *Sharer) give(out []delivery, bk *bucket, m *member, sh Share, now time.Time) []delivery {
	m.sent, m.sentAt = &sh, now
	return append(out, delivery{m.client, bk.Bucket, sh})
}

// off is how far m's share in force is from target, its target at m's
// demand now, beyond m's tolerance (0 within it, < 0 below); s.mu is held.
func (s *Sharer) off(bk *bucket, m *member) (d, target float64) {
	if bk.scale == 0 || m.demand == 0 || m.sent == nil || m.sent.Blanket != None {
		return 0, 0
	}
	target = bk.scale * float64(m.units(s.opts.Interval))
	if d = float64(m.sent.Tokens) - target; math.Abs(d) <= m.tolerance(s.opts.Interval)*target {
		return 0, target
	}
	return d, target
}

// followReports moves the share of each member whose report moved its
// target beyond its tolerance (Report queues them) to the target at once,
// rather than at the next round, within the part the last round gave
// this instance: down at once, up as far as the shares in force leave
// room. It runs on the Sharer's goroutine, so that every client gets its
// shares in the order they were made.
func (s *Sharer) followReports() {
	s.mu.Lock()
	var out []delivery
	now := time.Now()
	for _, f := range s.follows {
		if s.closed || s.buckets[f.bk.Key] != f.bk || f.bk.clients[f.m.client.id] != f.m {
			continue // gone since
		}
		out = s.follow(out, f.bk, f.m, now)
	}
	s.follows = s.follows[:0]
	s.mu.Unlock()
	deliver(out)
}

// follow moves m's share to its target if it is off it (see
// followReports); s.mu is held.
func (s *Sharer) follow(out []delivery, bk *bucket, m *member, now time.Time) []delivery {
	d, target := s.off(bk, m)
	if d == 0 {
		return out
	}
	sent := float64(m.sent.Tokens)
	tokens := math.Floor(target)
	if d < 0 {
		sum := 0.0
		for _, o := range bk.clients {
			if o.sent != nil && o.sent.Blanket == None {
				sum += float64(o.sent.Tokens)
			}
		}
		tokens = min(tokens, sent+math.Floor(bk.budget-sum))
		if tokens-sent <= m.tolerance(s.opts.Interval)*target {
			return out // no room worth a full bucket: the next round shares
		}
	}
	t := int64(tokens)
	return s.give(out, bk, m, Share{Tokens: t, Burst: s.burst(bk, m, t), TTL: s.opts.TTL}, now)
}

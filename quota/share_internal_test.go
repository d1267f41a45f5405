package quota

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestShareBound: whatever the shares in force, their targets and their
// members' noise, the shares in force after share add up to at most the
// instance's part of the limit (times margin), and a share in force within
// its member's tolerance of its target is not changed unless the sum needs
// it; and they still do after each member's share follows a report.
func TestShareBound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	s := &Sharer{opts: Options{Interval: time.Second, TTL: 3 * time.Second}}
	now := time.Unix(1000, 0)
	for trial := range 2000 {
		bk := &bucket{Bucket: Bucket{Limit: floodgate.NewLimit(floodgate.FixedWindow, 1+r.Int64N(100_000), time.Minute)}, clients: map[uint64]*member{}}
		n := 1 + r.IntN(40)
		for i := range n {
			m := &member{
				client: &Client{send: func(Bucket, Share) {}},
				demand: 1 + r.Int64N(50_000),
				spread: r.Float64() * r.Float64(),
				rate:   r.Float64() * 50,
				from:   now.Add(-time.Duration(1+r.IntN(10)) * time.Second),
				last:   now,
			}
			if r.IntN(4) > 0 {
				m.sent, m.sentAt = &Share{Tokens: r.Int64N(bk.Limit.Quota + 1), Burst: 2, TTL: s.opts.TTL}, now
			}
			bk.wrote += m.demand
			bk.clients[uint64(i)] = m
		}
		part := r.Float64()
		before := map[*member]int64{}
		for _, m := range bk.clients {
			if m.sent != nil {
				before[m] = m.sent.Tokens
			}
		}
		s.share(bk, part, now)
		budget := margin * float64(bk.Limit.Quota) * part
		sum := 0.0
		changed := 0
		for _, m := range bk.clients {
			sum += float64(m.sent.Tokens)
			if old, ok := before[m]; ok && old != m.sent.Tokens {
				changed++
			}
		}
		if sum > budget+1e-9 {
			t.Fatalf("trial %d: %d members: shares in force add up to %.0f, over the part %.1f", trial, n, sum, budget)
		}
		if math.IsNaN(sum) {
			t.Fatalf("trial %d: NaN", trial)
		}
		// Reports move the members' demand: each share follows its own,
		// and the sum still fits.
		for _, m := range bk.clients {
			m.rate *= 0.2 + 5*r.Float64()
			s.follow(nil, bk, m, now)
		}
		sum = 0
		for _, m := range bk.clients {
			sum += float64(m.sent.Tokens)
		}
		if sum > budget+1e-9 {
			t.Fatalf("trial %d: %d members: after following their reports the shares add up to %.0f, over the part %.1f", trial, n, sum, budget)
		}
	}
}

// TestShareKeepsWithinTolerance: a share in force a little off its target
// (within its member's noise) stays when the sum allows it, and one far off
// changes.
func TestShareKeepsWithinTolerance(t *testing.T) {
	s := &Sharer{opts: Options{Interval: time.Second, TTL: 3 * time.Second}}
	now := time.Unix(1000, 0)
	limit := floodgate.NewLimit(floodgate.FixedWindow, 10_000, time.Minute)
	for _, tc := range []struct {
		name       string
		sent       [2]int64
		spread     float64
		wantChange [2]bool
	}{
		{"both within 2%", [2]int64{4850, 4850}, 0, [2]bool{false, false}},
		{"one 3% low, no noise", [2]int64{4753, 4900}, 0, [2]bool{true, false}},
		{"one 3% low, noisy", [2]int64{4753, 4900}, 0.09, [2]bool{false, false}},
		{"one 10% low, noisy: the sum is 5% under", [2]int64{4410, 4900}, 0.09, [2]bool{true, false}},
		{"both 5% high, noisy: the sum is over", [2]int64{5145, 5145}, 0.09, [2]bool{true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bk := &bucket{Bucket: Bucket{Limit: limit}, clients: map[uint64]*member{}, wrote: 2}
			ms := make([]*member, 2)
			for i := range ms {
				ms[i] = &member{client: &Client{send: func(Bucket, Share) {}}, demand: 1, spread: tc.spread,
					from: now.Add(-time.Second), last: now, sent: &Share{Tokens: tc.sent[i], Burst: 2, TTL: s.opts.TTL}, sentAt: now}
				bk.clients[uint64(i)] = ms[i]
			}
			s.share(bk, 1, now) // targets: 4900 each
			for i, m := range ms {
				if changed := m.sent.Tokens != tc.sent[i]; changed != tc.wantChange[i] {
					t.Errorf("member %d: sent %d, now %d: changed %v, want %v", i, tc.sent[i], m.sent.Tokens, changed, tc.wantChange[i])
				}
			}
		})
	}
}

// TestSpreadAfterJump: the noise a member learned at one rate does not
// follow it to a rate many times higher (where counting noise is smaller
// relative to it), nor does the report that saw the jump count as noise;
// one outlying report does not start it again, nor does noise alone: a member whose reports are
// Poisson keeps a spread near its variance.
func TestSpreadAfterJump(t *testing.T) {
	const interval = time.Second
	now := time.Unix(1000, 0)
	m := &member{}
	for i := range 20 { // 1.5 a report, counted as 1 or 2
		m.report(int64(1+i%2), now, interval)
		now = now.Add(interval)
	}
	if tol := m.tolerance(interval); tol < 0.2 {
		t.Fatalf("at 1.5 a report counted as 1 or 2 the tolerance is %.3f, want the counting noise (about a third)", tol)
	}
	for range 3 { // 40 a report, evenly: only the counting of a unit
		m.report(40, now, interval)
		now = now.Add(interval)
	}
	if tol := m.tolerance(interval); tol > 0.05 {
		t.Errorf("three reports after a jump to 40 a report the tolerance is %.3f, want the new rate's (a few %%), not the old one's", tol)
	}

	// One report at 2.5 times the rate (a late one, bunched with the
	// next, on a loaded machine) and then the rate again: not a new rate.
	o := &member{}
	for range 10 {
		o.report(20, now, interval)
		now = now.Add(interval)
	}
	spread := o.spread
	for _, n := range []int64{50, 20, 20} {
		o.report(n, now, interval)
		now = now.Add(interval)
		if o.restarted {
			t.Fatalf("a report of %d, after one of 50 among reports of 20, started the spread again", n)
		}
	}
	if o.spreadN < 8 || o.spread > spread+0.01 {
		t.Errorf("after one report of 50 among reports of 20 the spread is %.4f of %d reports (was %.4f): want the old one kept", o.spread, o.spreadN, spread)
	}

	r := rand.New(rand.NewPCG(1, 2))
	p := &member{}
	restarts := 0
	for range 400 {
		n := int64(0) // Poisson, mean 20
		for l, q := math.Exp(-20), r.Float64(); q > l; q *= r.Float64() {
			n++
		}
		p.report(n, now, interval)
		if p.restarted {
			restarts++
		}
		now = now.Add(interval)
	}
	if restarts > 2 {
		t.Errorf("noise alone started the spread of a Poisson member again %d times in 400 reports", restarts)
	}
	if p.spread < 0.5/20 || p.spread > 2.0/20 {
		t.Errorf("a Poisson member of 20 a report has a spread of %.4f, want about its relative variance 1/20", p.spread)
	}
}

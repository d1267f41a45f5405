package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

var _ floodgate.BatchStore = (*Store)(nil)

// AllowBatch decides items as one request, all or nothing, in one round
// trip: see floodgate.BatchStore. The items whose keys share a hash slot
// (all of them on a single server or through Sentinel; on a cluster, those
// of one identity) are decided atomically by one call of the batch script.
// On a cluster the calls for several slots go out together, and when one
// slot denies, the items admitted in the others are given back as RefundN
// does, in a second round trip that is not atomic; an item whose refund
// fails keeps its Decision and gets RefundErr.
//
// Config.Timeout bounds the scripts' round trip, and the refunds after a
// denial get one of their own even if the caller has gone away. When a
// script call fails (ErrStoreUnavailable), every item it carried gets the
// error and may or may not have been recorded, as for AllowN; such items
// are not refunded.
func (s *Store) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	results = results[:len(items)]
	now := ""
	if s.clock != nil {
		now = strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
	}
	var groups []batchGroup
	for i, it := range items {
		if d, err := limitcheck.Item(it.Limit, it.Cost); err != nil {
			results[i] = floodgate.BatchResult{Decision: d, Err: err}
			continue
		}
		key := s.Key(it.Key, it.Limit.Algorithm)
		slot := 0
		if s.cluster {
			slot = keySlot(key)
		}
		g := 0
		for g < len(groups) && groups[g].slot != slot {
			g++
		}
		if g == len(groups) {
			// Sized for every item: one group is the usual case.
			left := len(items) - i
			groups = append(groups, batchGroup{slot: slot, items: make([]int, 0, left), keys: make([]string, 0, left), args: append(make([]string, 0, 1+5*left), now)})
		}
		groups[g].add(i, key, it)
	}
	if len(groups) == 0 {
		return
	}
	if g := groups[0]; len(groups) == 1 && len(g.items) == 1 {
		// One item: its own script decides it the same, for less.
		i := g.items[0]
		d, err := s.AllowN(ctx, items[i].Key, items[i].Limit, items[i].Cost)
		results[i] = floodgate.BatchResult{Decision: d, Err: err}
		return
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	calls := make([]evalCall, len(groups))
	for g := range groups {
		// The deadline, last: a call that starts after it records nothing.
		if dl := s.deadline(ctx, groups[g].slot); dl != "" {
			groups[g].args = append(groups[g].args, dl)
		}
		calls[g] = evalCall{script: &batch, keys: groups[g].keys, args: groups[g].args}
	}
	denied := false
	for g, res := range s.evalMulti(ctx, calls) {
		denied = groups[g].decide(ctx, items, results, res) || denied
	}
	if denied && len(groups) > 1 {
		// The refunds run even if the caller has gone away or the batch
		// used up its time: a denied request must not keep quota.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer rcancel()
		s.refundBatch(rctx, items, results, groups, now)
	}
}

// batchGroup is the items of a batch that one call of the batch script
// decides.
type batchGroup struct {
	slot   int      // their hash slot on a cluster, 0 otherwise
	items  []int    // their indexes in the batch
	keys   []string // the script's KEYS
	args   []string // the script's ARGV
	denied bool     // an item was denied: the script recorded none of them
	failed bool     // the call failed: what it recorded is unknown
}

// add appends item i, of key, to the group.
func (g *batchGroup) add(i int, key string, it floodgate.BatchItem) {
	l := it.Limit
	refill := ""
	if l.Algorithm == floodgate.TokenBucket && l.Refill != 0 && l.Refill != l.Quota {
		refill = strconv.FormatInt(l.Refill, 10)
	}
	g.items = append(g.items, i)
	g.keys = append(g.keys, key)
	g.args = append(g.args, suffixes[l.Algorithm], strconv.FormatInt(l.Quota, 10),
		strconv.FormatInt(l.Window.Microseconds(), 10), strconv.FormatInt(it.Cost, 10), refill)
}

// decide writes the results of the group's items from the script's reply
// res, and reports whether one was denied.
func (g *batchGroup) decide(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult, res rueidis.RedisResult) bool {
	fail := func(err error) bool {
		g.failed = true
		for _, i := range g.items {
			results[i] = floodgate.BatchResult{Decision: floodgate.Decision{Limit: items[i].Limit.Quota}, Err: err}
		}
		return false
	}
	reply, err := res.ToMessage()
	if err != nil {
		return fail(classify(ctx, batchFile, err))
	}
	vals, err := reply.ToArray()
	if err != nil || len(vals) != 4*len(g.items) {
		return fail(fmt.Errorf("%w: %s answered %s, want an array of 4 entries for each of %d items", ErrReply, batchFile, describe(reply), len(g.items)))
	}
	for j, i := range g.items {
		l := items[i].Limit
		if err := vals[4*j].Error(); err != nil {
			results[i] = floodgate.BatchResult{Decision: floodgate.Decision{Limit: l.Quota}, Err: classify(ctx, batchFile+" (key "+strconv.Quote(g.keys[j])+")", err)}
			continue
		}
		d, err := decodeValues(l, vals[4*j:4*j+4], reply)
		results[i] = floodgate.BatchResult{Decision: d, Err: err}
		if err == nil && !d.Allowed {
			g.denied = true
		}
	}
	return g.denied
}

// refundBatch gives back, in one round trip, the items that the groups
// without a denial admitted, after another group denied.
func (s *Store) refundBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult, groups []batchGroup, now string) {
	var calls []evalCall
	var whom []int
	for g := range groups {
		if groups[g].denied || groups[g].failed {
			continue
		}
		for j, i := range groups[g].items {
			if r := results[i]; r.Err != nil || !r.Decision.Allowed {
				continue
			}
			l := items[i].Limit
			calls = append(calls, evalCall{script: &scripts[l.Algorithm], keys: []string{groups[g].keys[j]}, args: s.numbers.scriptArgs(opRefund, l, items[i].Cost, now)})
			whom = append(whom, i)
		}
	}
	if len(calls) == 0 {
		return
	}
	for j, res := range s.evalMulti(ctx, calls) {
		i := whom[j]
		if err := refundReply(ctx, items[i].Limit, res); err != nil {
			results[i].RefundErr = fmt.Errorf("redisstore: another item of the batch was denied, and giving this admitted one back failed (it may still be recorded): %w", err)
		}
	}
}

// evalCall is one script call of evalMulti.
type evalCall struct {
	script     *script
	keys, args []string
}

// evalMulti sends calls in one round trip (pipelined, and to every node
// concerned in parallel on a cluster) and returns their results in order.
// Each is sent with EVALSHA, and those that meet NOSCRIPT again with EVAL,
// in a second round trip. Nothing is retried otherwise.
func (s *Store) evalMulti(ctx context.Context, calls []evalCall) []rueidis.RedisResult {
	if err := s.connected(); err != nil {
		return failAll(len(calls), err)
	}
	if len(calls) == 1 {
		c := calls[0]
		return []rueidis.RedisResult{c.script.lua.Exec(ctx, s.client, c.keys, c.args)}
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = s.client.B().Evalsha().Sha1(c.script.sha).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
	}
	res := s.client.DoMulti(ctx, cmds...)
	var again []int
	for i := range res {
		if err, ok := rueidis.IsRedisErr(res[i].Error()); ok && err.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res
	}
	cmds = cmds[:0] // DoMulti recycled the commands it ran
	for _, i := range again {
		c := calls[i]
		cmds = append(cmds, s.client.B().Eval().Script(c.script.source).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
	}
	for j, r := range s.client.DoMulti(ctx, cmds...) {
		res[again[j]] = r
	}
	return res
}

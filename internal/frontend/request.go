package frontend

import (
	"context"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// MaxInline is the number of rules a request can match before a
// [Request]'s buffers leave the stack.
const MaxInline = 8

// Request holds the buffers of one request of a library front end on its
// way through the engine. A front end that declares one in its handler
// keeps them on the stack; nothing in it points into it, or it would not
// stay there.
type Request struct {
	checks   [MaxInline]decide.Check
	rules    [MaxInline]int
	policies [MaxInline]*ratelimitheader.Policy
	outcomes [MaxInline]decide.Outcome
}

// Decided is a request decided by [Front.Decide].
type Decided struct {
	decide.Result
	// Rules is the index in Front.Rules of each check's rule, in order.
	Rules []int
	// Policies are the rules' header pieces, one per check, for
	// WriteHeaders.
	Policies []*ratelimitheader.Policy
}

// Decide decides a request with the rules of f that apply to it, in q's
// buffers: applies(i) says whether rule i matches the request, and key(i)
// gives the rule's key and the key function's error, which For turns into
// the check (wrapped in errKey, the front end's ErrKey). A rule whose key
// is empty, without an error, does not apply. A request no rule applies to
// is admitted without asking the engine.
func (f *Front) Decide(ctx context.Context, q *Request, errKey error, applies func(i int) bool, key func(i int) (string, error)) Decided {
	checks, rules, policies := q.checks[:0], q.rules[:0], q.policies[:0]
	for i := range f.Rules {
		if !applies(i) {
			continue
		}
		k, err := key(i)
		rc := &f.Rules[i]
		c, ok := rc.For(k, err, errKey)
		if !ok {
			continue
		}
		checks = append(checks, c)
		rules = append(rules, i)
		policies = append(policies, &rc.Policy)
	}
	if len(checks) == 0 {
		return Decided{Result: decide.Result{Deciding: -1}}
	}
	return Decided{Result: f.Engine.DecideInto(ctx, checks, q.outcomes[:]), Rules: rules, Policies: policies}
}

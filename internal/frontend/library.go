// Package frontend is what the front ends share beyond the decision: for
// httplimit and grpclimit, their Config and rule checks ([New]), request
// loop ([Front.Decide]), counters and hooks ([Reporter]); for every front
// end, the header view of a result ([Headers], [WriteHeaders],
// [WriteUnavailable]) and the events to report ([EventOf]).
package frontend

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/rulecheck"
	"github.com/floodgate-rl/floodgate/internal/storekey"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// Library is what the library front ends (httplimit's middleware,
// grpclimit's interceptors) hold under the same names in their Configs:
// the store, the clock, the rules' common parts, the key prefix and the
// engine's options. [New] checks them, once for both.
type Library struct {
	// Store decides the limits; required.
	Store floodgate.Store
	// Clock tells the engine's time (Options.Now). Nil: the system clock.
	Clock floodgate.Clock
	// Rules are the Config's rules, in its order: at least one.
	Rules []Rule
	// KeyPrefix begins the store keys ([rulecheck.KeyPrefix]).
	KeyPrefix string
	// Options are the engine's; their Now is Clock's.
	Options decide.Options
}

// Rule is what every library front end's rule holds under the same names:
// what becomes its [decide.Check]. How the rule matches a request and
// finds its key is the front end's own.
type Rule struct {
	// Name names the rule: required, of the one shape of rule names
	// ([rulecheck.RuleName]), unique within the Config.
	Name string
	// Limit is the rule's limit; it must be valid.
	Limit floodgate.Limit
	// Cost is the cost of each request under the rule; 0 means 1.
	Cost int64
	// Failure, LocalShare, NoCache, Shadow and Lease are the Check's
	// (decide.Check).
	Failure    decide.FailureMode
	LocalShare float64
	NoCache    bool
	Shadow     bool
	Lease      *decide.LeaseOptions
}

// Front is a [Library] checked by [New]: its engine, the
// time it tells by, and each rule's check.
type Front struct {
	// Engine decides the front end's requests.
	Engine *decide.Engine
	// Now is the Clock's Now, or time.Now.
	Now func() time.Time
	// Rules holds each rule's check, in the Library's order.
	Rules []RuleCheck
}

// RuleCheck is one rule of a library front end, checked and ready to
// decide: the engine's Check for it, but for the Key, and its store keys.
type RuleCheck struct {
	// Check is the rule's check; its Key is set per request by For.
	Check decide.Check
	// Keys are the rule's store keys: storekey.Of(KeyPrefix, rule name, key).
	Keys storekey.Space
	// Policy is the rule's header pieces (its RateLimit-Policy item).
	Policy ratelimitheader.Policy
}

// For returns the rule's check of a request for which the rule's key
// function returned key and err, and false when the rule does not apply
// (an empty key and no error). A key function's error, wrapped in errKey,
// becomes the check's Err, so the rule's failure mode applies.
func (rc *RuleCheck) For(key string, err, errKey error) (decide.Check, bool) {
	c := rc.Check
	switch {
	case err != nil:
		c.Err = fmt.Errorf("%w: %w", errKey, err)
	case key == "":
		return c, false
	default:
		c.Key = rc.Keys.Key(key)
	}
	return c, true
}

// New checks l and returns its engine, the time it tells by and its rules'
// checks. An unusable setting is an error wrapping a *fielderr.Error that
// names it as the front ends' Configs do (Store, KeyPrefix, Timeout, ...,
// or a rule's field under its index, such as "Rules[1].Name"); [ErrorFields]
// gives what a front end's ConfigError reports of it.
func New(l Library) (Front, error) {
	now := time.Now
	if l.Clock != nil {
		now = l.Clock.Now
	}
	opts := l.Options
	opts.Now = now
	engine, err := decide.New(l.Store, opts)
	switch {
	case err != nil:
		return Front{}, err
	case len(l.Rules) == 0:
		return Front{}, fmt.Errorf("frontend: %w", &fielderr.Error{Field: "Rules", Value: "[]", Reason: "must hold at least one rule"})
	}
	if err := checkTimeout(l.Store, l.Options.Timeout); err != nil {
		return Front{}, err
	}
	if reason := rulecheck.KeyPrefix(l.KeyPrefix); reason != "" {
		return Front{}, fmt.Errorf("frontend: %w", &fielderr.Error{Field: "KeyPrefix", Value: strconv.Quote(l.KeyPrefix), Reason: reason})
	}
	front := Front{Engine: engine, Now: now, Rules: make([]RuleCheck, 0, len(l.Rules))}
	seen := make(map[string]bool, len(l.Rules))
	for i, r := range l.Rules {
		bad := func(fe fielderr.Error) error {
			fe.Field = fmt.Sprintf("Rules[%d].%s", i, fe.Field)
			return fmt.Errorf("frontend: %w", &fe)
		}
		if reason := rulecheck.RuleName(r.Name); reason != "" {
			return Front{}, bad(fielderr.Error{Field: "Name", Value: strconv.Quote(r.Name), Reason: reason})
		}
		if errs := rulecheck.Rule(r.Limit, r.Failure, r.LocalShare); len(errs) > 0 {
			return Front{}, bad(errs[0])
		}
		if fe := rulecheck.Lease(r.Limit, r.Lease); fe != nil {
			return Front{}, bad(*fe)
		}
		if seen[r.Name] {
			return Front{}, bad(fielderr.Error{Field: "Name", Value: strconv.Quote(r.Name), Reason: "is used by an earlier rule"})
		}
		seen[r.Name] = true
		policy, err := ratelimitheader.ForLimit(r.Name, r.Limit)
		if err != nil {
			return Front{}, bad(fielderr.Error{Field: "Name", Value: strconv.Quote(r.Name), Reason: "cannot be serialized", Err: err})
		}
		front.Rules = append(front.Rules, RuleCheck{
			Policy: policy,
			Check: decide.Check{Rule: r.Name, Limit: r.Limit, Cost: r.Cost, Failure: r.Failure, LocalShare: r.LocalShare,
				NoCache: r.NoCache, Shadow: r.Shadow, Lease: r.Lease},
			Keys: storekey.NewSpace(l.KeyPrefix, r.Name),
		})
	}
	return front, nil
}

// timeoutStore is a store that bounds each call by a timeout of its own
// and says which: redisstore's, remotestore's and splitstore's.
type timeoutStore interface {
	Timeout() time.Duration
}

// checkTimeout refuses a front end's Timeout at or above its store's own
// per-call timeout: the store would end every call first, so the front
// end's would never apply. A store that does not say its timeout is not
// checked.
func checkTimeout(store floodgate.Store, timeout time.Duration) error {
	ts, ok := store.(timeoutStore)
	if !ok || timeout <= 0 {
		return nil
	}
	if own := ts.Timeout(); own > 0 && timeout >= own {
		return fmt.Errorf("frontend: %w", &fielderr.Error{Field: "Timeout", Value: timeout.String(),
			Reason: fmt.Sprintf("must be below the store's own per-call timeout, %s (the Timeout of its %T), which would end every call first: set it below %s, or to 0 to let the store bound each call", own, store, own)})
	}
	return nil
}

// ErrorFields returns what a front end's ConfigError reports of err, an
// error of [New]: the field, value and reason of the *fielderr.Error it
// wraps (or, failing one, the Store, which "cannot be used"), and that
// *fielderr.Error as its Err.
func ErrorFields(err error) (field, value, reason string, fieldErr error) {
	fe := (*fielderr.Error)(nil)
	if !errors.As(err, &fe) {
		fe = &fielderr.Error{Field: "Store", Reason: "cannot be used", Err: err}
	}
	return fe.Field, fe.Value, fe.Reason, fe
}

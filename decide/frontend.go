package decide

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Library is what the library front ends (httplimit's middleware,
// grpclimit's interceptors) hold under the same names in their Configs:
// the store, the clock, the rules' common parts, the key prefix and the
// engine's options. [NewLibrary] checks them, once for both.
type Library struct {
	// Store decides the limits; required.
	Store floodgate.Store
	// Clock tells the engine's time (Options.Now). Nil: the system clock.
	Clock floodgate.Clock
	// Rules are the Config's rules, in its order: at least one.
	Rules []LibraryRule
	// KeyPrefix begins the store keys ([CheckKeyPrefix]).
	KeyPrefix string
	// Options are the engine's; their Now is Clock's.
	Options Options
}

// LibraryRule is what a library front end's rule holds under the same
// names in every such front end: what becomes its [Check]. How the rule
// matches a request and finds its key is the front end's own.
type LibraryRule struct {
	// Name names the rule: required, printable ASCII ([CheckRuleName]),
	// unique within the Config.
	Name string
	// Limit is the rule's limit; it must be valid.
	Limit floodgate.Limit
	// Cost is the cost of each request under the rule; 0 means 1.
	Cost int64
	// Failure, LocalShare, NoCache and Shadow are the Check's.
	Failure    FailureMode
	LocalShare float64
	NoCache    bool
	Shadow     bool
}

// LibraryFront is a [Library] checked by [NewLibrary]: its engine, the
// time it tells by, and each rule's check.
type LibraryFront struct {
	// Engine decides the front end's requests.
	Engine *Engine
	// Now is the Clock's Now, or time.Now.
	Now func() time.Time
	// Rules holds each rule's check, in the Library's order.
	Rules []RuleCheck
}

// RuleCheck is one rule of a library front end, checked and ready to
// decide: the engine's Check for it, but for the Key, and its store keys.
type RuleCheck struct {
	// Check is the rule's check; its Key is set per request by For.
	Check Check
	// Keys are the rule's store keys: StoreKey(KeyPrefix, rule name, key).
	Keys KeySpace
}

// For returns the rule's check of a request for which the rule's key
// function returned key and err, and false when the rule does not apply
// to the request (an empty key and no error). A key function's error,
// wrapped in errKey (the front end's ErrKey), becomes the check's Err: the
// store is not asked, and the rule's failure mode applies, as for an
// outage.
func (rc *RuleCheck) For(key string, err, errKey error) (Check, bool) {
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

// NewLibrary checks l and returns its engine, the time it tells by and
// its rules' checks. An unusable setting is an error wrapping a
// *FieldError that names it as the front ends' Configs do: Store, Rules,
// KeyPrefix, Timeout, UnavailableRetryAfter, LogInterval,
// OverLimitCache.MaxEntries, OverLimitCache.MaxBytes, or a rule's field
// under its index, such as "Rules[1].Name" ([CheckRuleName], or a name an
// earlier rule has) or "Rules[0].Limit" ([CheckRule]: Limit, Failure,
// LocalShare). [LibraryError] turns it into a front end's ConfigError.
func NewLibrary(l Library) (LibraryFront, error) {
	now := time.Now
	if l.Clock != nil {
		now = l.Clock.Now
	}
	opts := l.Options
	opts.Now = now
	engine, err := New(l.Store, opts)
	switch {
	case err != nil:
		return LibraryFront{}, err
	case len(l.Rules) == 0:
		return LibraryFront{}, fmt.Errorf("decide: %w", &FieldError{Field: "Rules", Value: "[]", Reason: "must hold at least one rule"})
	}
	if reason := CheckKeyPrefix(l.KeyPrefix); reason != "" {
		return LibraryFront{}, fmt.Errorf("decide: %w", &FieldError{Field: "KeyPrefix", Value: strconv.Quote(l.KeyPrefix), Reason: reason})
	}
	front := LibraryFront{Engine: engine, Now: now, Rules: make([]RuleCheck, 0, len(l.Rules))}
	seen := make(map[string]bool, len(l.Rules))
	for i, r := range l.Rules {
		bad := func(fe FieldError) error {
			fe.Field = fmt.Sprintf("Rules[%d].%s", i, fe.Field)
			return fmt.Errorf("decide: %w", &fe)
		}
		if reason := CheckRuleName(r.Name); reason != "" {
			return LibraryFront{}, bad(FieldError{Field: "Name", Value: strconv.Quote(r.Name), Reason: reason})
		}
		if errs := CheckRule(r.Limit, r.Failure, r.LocalShare); len(errs) > 0 {
			return LibraryFront{}, bad(errs[0])
		}
		if seen[r.Name] {
			return LibraryFront{}, bad(FieldError{Field: "Name", Value: strconv.Quote(r.Name), Reason: "is used by an earlier rule"})
		}
		seen[r.Name] = true
		front.Rules = append(front.Rules, RuleCheck{
			Check: Check{Rule: r.Name, Limit: r.Limit, Cost: r.Cost, Failure: r.Failure, LocalShare: r.LocalShare,
				NoCache: r.NoCache, Shadow: r.Shadow},
			Keys: NewKeySpace(l.KeyPrefix, r.Name),
		})
	}
	return front, nil
}

// FrontEnd names a front end (httplimit, grpclimit, server) in its
// [ConfigError]s: its Name, such as "httplimit", begins their messages.
// Each front end implements it with an unexported type of its own, so that
// its ConfigError is a type of its own too.
type FrontEnd interface {
	// Name returns the front end's package name.
	Name() string
}

// ConfigError is a front end's error for a bad field of its Config (or the
// server's Policy): the field as the front end names it, its value and
// why. Each front end re-exports its own instance under its own name
// (httplimit.ConfigError is ConfigError of httplimit's FrontEnd), so the
// type is defined once and errors.As tells the front ends apart.
type ConfigError[F FrontEnd] struct {
	Field  string // such as "Rules[1].Name"
	Value  string // the bad value, formatted
	Reason string
	// Err is the underlying error, if any: for a field NewLibrary checks,
	// its *FieldError (which wraps, for a limit, the limit's error).
	Err error
}

// Error returns the front end's name, the field, its value and the reason.
func (e *ConfigError[F]) Error() string {
	var f F
	return f.Name() + ": " + e.Field + " " + e.Value + " " + e.Reason
}

// Unwrap returns Err.
func (e *ConfigError[F]) Unwrap() error { return e.Err }

// LibraryError returns err, an error of [NewLibrary], as front end F's
// ConfigError: the field, value and reason of the *FieldError it wraps (all
// of them wrap one; for an error that wraps none, the Store, which "cannot
// be used"), with that *FieldError as its Err.
func LibraryError[F FrontEnd](err error) *ConfigError[F] {
	fe := (*FieldError)(nil)
	if !errors.As(err, &fe) {
		fe = &FieldError{Field: "Store", Reason: "cannot be used", Err: err}
	}
	return &ConfigError[F]{Field: fe.Field, Value: fe.Value, Reason: fe.Reason, Err: fe}
}

package decide

import (
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Library is what the library front ends (httplimit's middleware,
// grpclimit's interceptors) hold under the same names in their Configs:
// the store, the clock, how many rules there are, the key prefix and the
// engine's options. [NewLibrary] checks them, once for both.
type Library struct {
	// Store decides the limits; required.
	Store floodgate.Store
	// Clock tells the engine's time (Options.Now). Nil: the system clock.
	Clock floodgate.Clock
	// Rules is how many rules the Config holds: at least one.
	Rules int
	// KeyPrefix begins the store keys ([CheckKeyPrefix]).
	KeyPrefix string
	// Options are the engine's; their Now is Clock's.
	Options Options
}

// NewLibrary checks l and returns its engine and the time it tells by (the
// Clock's Now, or time.Now). An unusable setting is an error wrapping a
// *FieldError that names it as the front ends' Configs do: Store, Rules, KeyPrefix, Timeout,
// UnavailableRetryAfter, LogInterval, OverLimitCache.MaxEntries or
// OverLimitCache.MaxBytes.
func NewLibrary(l Library) (*Engine, func() time.Time, error) {
	now := time.Now
	if l.Clock != nil {
		now = l.Clock.Now
	}
	opts := l.Options
	opts.Now = now
	engine, err := New(l.Store, opts)
	switch {
	case err != nil:
		return nil, nil, err
	case l.Rules == 0:
		return nil, nil, fmt.Errorf("decide: %w", &FieldError{Field: "Rules", Value: "[]", Reason: "must hold at least one rule"})
	}
	if reason := CheckKeyPrefix(l.KeyPrefix); reason != "" {
		return nil, nil, fmt.Errorf("decide: %w", &FieldError{Field: "KeyPrefix", Value: strconv.Quote(l.KeyPrefix), Reason: reason})
	}
	return engine, now, nil
}

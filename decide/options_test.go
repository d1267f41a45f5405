package decide_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestCacheOptionsValidate: the over-limit cache's bounds are checked by
// CacheOptions.Validate alone, which New calls; the error is a *FieldError
// naming the bound and its value, so that config and the Envoy environment
// report the same check under their own names.
func TestCacheOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       decide.CacheOptions
		field, val string // "" when valid
	}{
		{"zero", decide.CacheOptions{}, "", ""},
		{"bounds", decide.CacheOptions{MaxEntries: 10, MaxBytes: 1 << 20}, "", ""},
		{"disabled", decide.CacheOptions{Disabled: true}, "", ""},
		{"negative entries", decide.CacheOptions{MaxEntries: -1}, "MaxEntries", "-1"},
		{"negative bytes", decide.CacheOptions{MaxBytes: -5}, "MaxBytes", "-5"},
		{"negative, though disabled", decide.CacheOptions{Disabled: true, MaxBytes: -5}, "MaxBytes", "-5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			_, newErr := decide.New(memory.New(), decide.Options{OverLimitCache: tc.opts})
			if tc.field == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate() = %v, New = %v; want nil", err, newErr)
				}
				return
			}
			var fe *decide.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Value != tc.val || fe.Reason != "must not be negative" {
				t.Fatalf("Validate() = %#v, want a *FieldError for %s %s", err, tc.field, tc.val)
			}
			if !errors.As(newErr, &fe) || fe.Field != "OverLimitCache."+tc.field || fe.Value != tc.val {
				t.Fatalf("New = %v, want a *FieldError for OverLimitCache.%s", newErr, tc.field)
			}
			if want := "decide: OverLimitCache." + tc.field + " " + tc.val + " must not be negative"; newErr.Error() != want {
				t.Errorf("New = %q, want %q", newErr, want)
			}
		})
	}
}

// TestNewOptionErrors: New names each unusable option as Options does, the
// names the front ends' options share.
func TestNewOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  decide.Options
		field string
	}{
		{"negative timeout", decide.Options{Timeout: -time.Millisecond}, "Timeout"},
		{"negative retry after", decide.Options{UnavailableRetryAfter: -time.Second}, "UnavailableRetryAfter"},
		{"negative log interval", decide.Options{LogInterval: -time.Second}, "LogInterval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decide.New(memory.New(), tc.opts)
			var fe *decide.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.HasPrefix(fe.Value, "-") || !strings.HasPrefix(fe.Reason, "must not be negative (0: ") {
				t.Fatalf("New = %v, want a *FieldError for %s", err, tc.field)
			}
		})
	}
	var fe *decide.FieldError
	if _, err := decide.New(nil, decide.Options{}); !errors.As(err, &fe) || fe.Field != "Store" {
		t.Errorf("New(nil) = %v, want a *FieldError for Store", err)
	}
}

// TestNewLibrary: the settings the middleware and the gRPC interceptors
// share are checked once, by NewLibrary, and named as their Configs name
// them; the engine tells the time by the Clock.
func TestNewLibrary(t *testing.T) {
	ok := floodgate.PerMinute(10)
	one := []decide.LibraryRule{{Name: "a", Limit: ok}}
	for _, tc := range []struct {
		name       string
		lib        decide.Library
		field, val string
	}{
		{"no store", decide.Library{Rules: one}, "Store", "<nil>"},
		{"no rules", decide.Library{Store: memory.New()}, "Rules", "[]"},
		{"hash tag in the prefix", decide.Library{Store: memory.New(), Rules: one, KeyPrefix: "a{b}"}, "KeyPrefix", `"a{b}"`},
		{"negative timeout", decide.Library{Store: memory.New(), Rules: one, Options: decide.Options{Timeout: -time.Millisecond}}, "Timeout", "-1ms"},
		{"negative cache bound", decide.Library{Store: memory.New(), Rules: one, Options: decide.Options{OverLimitCache: decide.CacheOptions{MaxBytes: -1}}}, "OverLimitCache.MaxBytes", "-1"},
		{"no rule name", decide.Library{Store: memory.New(), Rules: []decide.LibraryRule{{Limit: ok}}}, "Rules[0].Name", `""`},
		{"rule name not ASCII", decide.Library{Store: memory.New(), Rules: []decide.LibraryRule{one[0], {Name: "é", Limit: ok}}}, "Rules[1].Name", `"é"`},
		{"rule name twice", decide.Library{Store: memory.New(), Rules: []decide.LibraryRule{one[0], one[0]}}, "Rules[1].Name", `"a"`},
		{"bad limit", decide.Library{Store: memory.New(), Rules: []decide.LibraryRule{one[0], {Name: "b"}}}, "Rules[1].Limit", floodgate.Limit{}.String()},
		{"share without FailLocal", decide.Library{Store: memory.New(), Rules: []decide.LibraryRule{{Name: "a", Limit: ok, LocalShare: 0.5}}}, "Rules[0].LocalShare", "0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decide.NewLibrary(tc.lib)
			var fe *decide.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Value != tc.val {
				t.Fatalf("NewLibrary = %v, want a *FieldError for %s %s", err, tc.field, tc.val)
			}
		})
	}
	clock := clocktest.NewManual(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rules := []decide.LibraryRule{{Name: "a", Limit: ok, Cost: 2, Failure: decide.FailLocal, LocalShare: 0.5, NoCache: true}, {Name: "b|c", Limit: ok, Shadow: true}}
	front, err := decide.NewLibrary(decide.Library{Store: memory.New(), Rules: rules, Clock: clock, KeyPrefix: "app:"})
	if err != nil || front.Engine == nil {
		t.Fatalf("NewLibrary = %v, %v", front.Engine, err)
	}
	if got := front.Now(); !got.Equal(clock.Now()) {
		t.Errorf("now() = %v, want the clock's %v", got, clock.Now())
	}
	if len(front.Rules) != len(rules) {
		t.Fatalf("NewLibrary made %d rule checks, want %d", len(front.Rules), len(rules))
	}
	for i, r := range rules {
		want := decide.Check{Rule: r.Name, Limit: r.Limit, Cost: r.Cost, Failure: r.Failure, LocalShare: r.LocalShare, NoCache: r.NoCache, Shadow: r.Shadow}
		if got := front.Rules[i].Check; !reflect.DeepEqual(got, want) {
			t.Errorf("Rules[%d].Check = %+v, want %+v", i, got, want)
		}
		if got, want := front.Rules[i].Keys.Key("k"), decide.StoreKey("app:", r.Name, "k"); got != want {
			t.Errorf("Rules[%d].Keys.Key(k) = %q, want StoreKey's %q", i, got, want)
		}
	}
}

// TestRuleCheckFor: a rule's check of a request carries the key's store
// key; no key leaves the rule out, and a key function's error becomes the
// check's Err, marked with the front end's sentinel.
func TestRuleCheckFor(t *testing.T) {
	front, err := decide.NewLibrary(decide.Library{Store: memory.New(), Rules: []decide.LibraryRule{{Name: "r", Limit: floodgate.PerMinute(1)}}, KeyPrefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	errKey, errFn := errors.New("no key"), errors.New("no header")
	rc := &front.Rules[0]
	for _, tc := range []struct {
		name    string
		key     string
		err     error
		applies bool
		wantKey string
	}{
		{"key", "1.2.3.4", nil, true, decide.StoreKey("p:", "r", "1.2.3.4")},
		{"no key", "", nil, false, ""},
		{"key error", "", errFn, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, applies := rc.For(tc.key, tc.err, errKey)
			if applies != tc.applies || applies && c.Key != tc.wantKey {
				t.Fatalf("For(%q, %v) = key %q, %v; want %q, %v", tc.key, tc.err, c.Key, applies, tc.wantKey, tc.applies)
			}
			if got := c.Err != nil; got != (tc.err != nil) || tc.err != nil && (!errors.Is(c.Err, errKey) || !errors.Is(c.Err, errFn)) {
				t.Errorf("For(%q, %v).Err = %v, want one wrapping both %v and %v", tc.key, tc.err, c.Err, errKey, tc.err)
			}
		})
	}
	if rc.Check.Key != "" || rc.Check.Err != nil {
		t.Errorf("For changed the rule's own check: %+v", rc.Check)
	}
}

// TestLibraryError: every error of NewLibrary carries a *FieldError, which
// a front end's ConfigError reports as it is; another error is the
// Store's. The message begins with the front end's name.
func TestLibraryError(t *testing.T) {
	_, err := decide.NewLibrary(decide.Library{Store: memory.New()})
	ce := decide.LibraryError[testFront](err)
	var fe *decide.FieldError
	if ce.Field != "Rules" || ce.Value != "[]" || !errors.As(ce, &fe) || fe.Field != "Rules" {
		t.Errorf("LibraryError(%v) = %+v, want the ConfigError of its *FieldError for Rules", err, ce)
	}
	if got, want := ce.Error(), "testfront: Rules [] must hold at least one rule"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	other := errors.New("boom")
	if ce := decide.LibraryError[testFront](other); ce.Field != "Store" || !errors.Is(ce, other) {
		t.Errorf("LibraryError(%v) = %+v, want a ConfigError for Store wrapping it", other, ce)
	}
}

type testFront struct{}

func (testFront) Name() string { return "testfront" }

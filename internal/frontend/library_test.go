package frontend_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/storekey"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/splitstore"
)

// TestNew: the settings the middleware and the gRPC interceptors
// share are checked once, by New, and named as their Configs name
// them; the engine tells the time by the Clock.
func TestNew(t *testing.T) {
	ok := floodgate.PerMinute(10)
	one := []frontend.Rule{{Name: "a", Limit: ok}}
	for _, tc := range []struct {
		name       string
		lib        frontend.Library
		field, val string
	}{
		{"no store", frontend.Library{Rules: one}, "Store", "<nil>"},
		{"no rules", frontend.Library{Store: memory.New()}, "Rules", "[]"},
		{"hash tag in the prefix", frontend.Library{Store: memory.New(), Rules: one, KeyPrefix: "a{b}"}, "KeyPrefix", `"a{b}"`},
		{"negative timeout", frontend.Library{Store: memory.New(), Rules: one, Options: decide.Options{Timeout: -time.Millisecond}}, "Timeout", "-1ms"},
		{"negative cache bound", frontend.Library{Store: memory.New(), Rules: one, Options: decide.Options{OverLimitCache: decide.CacheOptions{MaxBytes: -1}}}, "OverLimitCache.MaxBytes", "-1"},
		{"no rule name", frontend.Library{Store: memory.New(), Rules: []frontend.Rule{{Limit: ok}}}, "Rules[0].Name", `""`},
		{"rule name not ASCII", frontend.Library{Store: memory.New(), Rules: []frontend.Rule{one[0], {Name: "é", Limit: ok}}}, "Rules[1].Name", `"é"`},
		{"rule name twice", frontend.Library{Store: memory.New(), Rules: []frontend.Rule{one[0], one[0]}}, "Rules[1].Name", `"a"`},
		{"bad limit", frontend.Library{Store: memory.New(), Rules: []frontend.Rule{one[0], {Name: "b"}}}, "Rules[1].Limit", floodgate.Limit{}.String()},
		{"share without FailLocal", frontend.Library{Store: memory.New(), Rules: []frontend.Rule{{Name: "a", Limit: ok, LocalShare: 0.5}}}, "Rules[0].LocalShare", "0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := frontend.New(tc.lib)
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Value != tc.val {
				t.Fatalf("New = %v, want a *FieldError for %s %s", err, tc.field, tc.val)
			}
		})
	}
	clock := clocktest.NewManual(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rules := []frontend.Rule{{Name: "a", Limit: ok, Cost: 2, Failure: decide.FailLocal, LocalShare: 0.5, NoCache: true}, {Name: "b.c", Limit: ok, Shadow: true}}
	front, err := frontend.New(frontend.Library{Store: memory.New(), Rules: rules, Clock: clock, KeyPrefix: "app:"})
	if err != nil || front.Engine == nil {
		t.Fatalf("New = %v, %v", front.Engine, err)
	}
	if got := front.Now(); !got.Equal(clock.Now()) {
		t.Errorf("now() = %v, want the clock's %v", got, clock.Now())
	}
	if len(front.Rules) != len(rules) {
		t.Fatalf("New made %d rule checks, want %d", len(front.Rules), len(rules))
	}
	for i, r := range rules {
		want := decide.Check{Rule: r.Name, Limit: r.Limit, Cost: r.Cost, Failure: r.Failure, LocalShare: r.LocalShare, NoCache: r.NoCache, Shadow: r.Shadow}
		if got := front.Rules[i].Check; !reflect.DeepEqual(got, want) {
			t.Errorf("Rules[%d].Check = %+v, want %+v", i, got, want)
		}
		if got, want := front.Rules[i].Keys.Key("k"), storekey.Of("app:", r.Name, "k"); got != want {
			t.Errorf("Rules[%d].Keys.Key(k) = %q, want storekey.Of's %q", i, got, want)
		}
	}
}

// TestRuleCheckFor: a rule's check of a request carries the key's store
// key; no key leaves the rule out, and a key function's error becomes the
// check's Err, marked with the front end's sentinel.
func TestRuleCheckFor(t *testing.T) {
	front, err := frontend.New(frontend.Library{Store: memory.New(), Rules: []frontend.Rule{{Name: "r", Limit: floodgate.PerMinute(1)}}, KeyPrefix: "p:"})
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
		{"key", "1.2.3.4", nil, true, storekey.Of("p:", "r", "1.2.3.4")},
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

// TestErrorFields: every error of New carries a *fielderr.Error,
// whose field, value and reason a front end's ConfigError reports as they
// are; another error is the Store's.
func TestErrorFields(t *testing.T) {
	_, err := frontend.New(frontend.Library{Store: memory.New()})
	field, value, reason, fieldErr := frontend.ErrorFields(err)
	var fe *fielderr.Error
	if field != "Rules" || value != "[]" || reason != "must hold at least one rule" || !errors.As(fieldErr, &fe) || fe.Field != "Rules" {
		t.Errorf("ErrorFields(%v) = %q, %q, %q, %v; want those of its *FieldError for Rules", err, field, value, reason, fieldErr)
	}
	other := errors.New("boom")
	if field, _, reason, fieldErr := frontend.ErrorFields(other); field != "Store" || reason != "cannot be used" || !errors.Is(fieldErr, other) {
		t.Errorf("ErrorFields(%v) = %q, %q, %v; want the Store, wrapping it", other, field, reason, fieldErr)
	}
}

// TestTimeoutBelowStore: a front end's Timeout at or above its store's own
// per-call timeout is an error naming both, for every store that says its
// timeout; a store that does not (the memory store) is not checked.
func TestTimeoutBelowStore(t *testing.T) {
	redis := func(timeout time.Duration) floodgate.BatchStore {
		// LazyConnect: a real store that needs no server to be made.
		s, err := redisstore.New(redisstore.Config{Addrs: []string{"127.0.0.1:1"}, Mode: redisstore.ModeStandalone, LazyConnect: true, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	remote, err := remotestore.New(remotestore.Config{URL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	split, err := splitstore.New(remote, redis(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		store   floodgate.Store
		timeout time.Duration
		want    string // the reason; "" accepted
	}{
		{"redis default, equal", redis(0), 50 * time.Millisecond, "must be below the store's own per-call timeout, 50ms (the Timeout of its *redisstore.Store), which would end every call first: set it below 50ms, or to 0 to let the store bound each call"},
		{"redis default, above", redis(0), time.Second, "must be below the store's own per-call timeout, 50ms (the Timeout of its *redisstore.Store), which would end every call first: set it below 50ms, or to 0 to let the store bound each call"},
		{"redis default, below", redis(0), 49 * time.Millisecond, ""},
		{"redis default, none", redis(0), 0, ""},
		{"redis 2s, below", redis(2 * time.Second), time.Second, ""},
		{"remote default, equal", remote, 100 * time.Millisecond, "must be below the store's own per-call timeout, 100ms (the Timeout of its *remotestore.Store), which would end every call first: set it below 100ms, or to 0 to let the store bound each call"},
		{"remote default, below", remote, 99 * time.Millisecond, ""},
		{"split, above the shorter", split, 60 * time.Millisecond, "must be below the store's own per-call timeout, 50ms (the Timeout of its *splitstore.Store), which would end every call first: set it below 50ms, or to 0 to let the store bound each call"},
		{"memory: no timeout of its own", memory.New(), time.Hour, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := frontend.New(frontend.Library{Store: tc.store, Rules: []frontend.Rule{{Name: "a", Limit: floodgate.PerMinute(1)}},
				Options: decide.Options{Timeout: tc.timeout}})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New = %v, want no error", err)
				}
				return
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != "Timeout" || fe.Value != tc.timeout.String() || fe.Reason != tc.want {
				t.Fatalf("New = %v\nwant Timeout %s %s", err, tc.timeout, tc.want)
			}
		})
	}
}

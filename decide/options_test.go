package decide_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/splitstore"
)

// TestCacheOptionsValidate: the over-limit cache's bounds are checked by
// CacheOptions.Validate alone, which New calls; the error is a *fielderr.Error
// naming the bound and its value, so that config and the Envoy environment
// report the same check under their own names.
func TestCacheOptionsValidate(t *testing.T) {
	const neg = "must not be negative"
	for _, tc := range []struct {
		name       string
		opts       decide.CacheOptions
		field, val string // "" when valid
		reason     string
	}{
		{"zero", decide.CacheOptions{}, "", "", ""},
		{"bounds", decide.CacheOptions{MaxEntries: 10, MaxBytes: 1 << 20}, "", "", ""},
		{"disabled", decide.CacheOptions{Disabled: true}, "", "", ""},
		{"enabled", decide.CacheOptions{Enabled: true}, "", "", ""},
		{"negative entries", decide.CacheOptions{MaxEntries: -1}, "MaxEntries", "-1", neg},
		{"negative bytes", decide.CacheOptions{MaxBytes: -5}, "MaxBytes", "-5", neg},
		{"negative, though disabled", decide.CacheOptions{Disabled: true, MaxBytes: -5}, "MaxBytes", "-5", neg},
		{"enabled and disabled", decide.CacheOptions{Enabled: true, Disabled: true}, "Enabled", "true", "excludes Disabled: set one of them"},
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
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Value != tc.val || fe.Reason != tc.reason {
				t.Fatalf("Validate() = %#v, want a *fielderr.Error for %s %s", err, tc.field, tc.val)
			}
			if !errors.As(newErr, &fe) || fe.Field != "OverLimitCache."+tc.field || fe.Value != tc.val {
				t.Fatalf("New = %v, want a *fielderr.Error for OverLimitCache.%s", newErr, tc.field)
			}
			if want := "decide: OverLimitCache." + tc.field + " " + tc.val + " " + tc.reason; newErr.Error() != want {
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
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.HasPrefix(fe.Value, "-") || !strings.HasPrefix(fe.Reason, "must not be negative (0: ") {
				t.Fatalf("New = %v, want a *fielderr.Error for %s", err, tc.field)
			}
		})
	}
	var fe *fielderr.Error
	if _, err := decide.New(nil, decide.Options{}); !errors.As(err, &fe) || fe.Field != "Store" {
		t.Errorf("New(nil) = %v, want a *fielderr.Error for Store", err)
	}
}

// inProcessWrapper wraps a store and says, as the memory store does, that
// it decides in this process.
type inProcessWrapper struct{ floodgate.Store }

func (inProcessWrapper) InProcess() bool { return true }

// remoteWrapper wraps a store and hides its InProcess method, as a store
// that decides elsewhere has none.
type remoteWrapper struct{ floodgate.Store }

// TestCacheChoice: the over-limit cache is on by default for a store that
// decides elsewhere and off for one that says it decides in this process
// (the memory store, a wrapper that says so, two memory stores split);
// the options turn it on or off whatever the store.
func TestCacheChoice(t *testing.T) {
	split, err := splitstore.New(memory.New(), memory.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		opts  decide.CacheOptions
		on    bool
	}{
		{"memory", memory.New(), decide.CacheOptions{}, false},
		{"memory, enabled", memory.New(), decide.CacheOptions{Enabled: true}, true},
		{"wrapped memory that says so", inProcessWrapper{memory.New()}, decide.CacheOptions{}, false},
		{"split memory stores", split, decide.CacheOptions{}, false},
		{"a store deciding elsewhere", remoteWrapper{memory.New()}, decide.CacheOptions{}, true},
		{"a store deciding elsewhere, disabled", remoteWrapper{memory.New()}, decide.CacheOptions{Disabled: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := decide.New(tc.store, decide.Options{OverLimitCache: tc.opts})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			check := []decide.Check{{Rule: "r", Key: "k", Limit: floodgate.PerMinute(1)}}
			var cached bool
			for range 3 {
				cached = e.Decide(ctx, check).Outcomes[0].Cached
			}
			if cached != tc.on || (e.CacheStats().Hits > 0) != tc.on {
				t.Errorf("third request cached %v (hits %d), want the cache on: %v", cached, e.CacheStats().Hits, tc.on)
			}
		})
	}
}

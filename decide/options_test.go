package decide_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestCacheOptionsValidate: the over-limit cache's bounds are checked by
// CacheOptions.Validate alone, which New calls; the error is a *fielderr.Error
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
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Value != tc.val || fe.Reason != "must not be negative" {
				t.Fatalf("Validate() = %#v, want a *fielderr.Error for %s %s", err, tc.field, tc.val)
			}
			if !errors.As(newErr, &fe) || fe.Field != "OverLimitCache."+tc.field || fe.Value != tc.val {
				t.Fatalf("New = %v, want a *fielderr.Error for OverLimitCache.%s", newErr, tc.field)
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

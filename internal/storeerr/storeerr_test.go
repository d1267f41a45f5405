package storeerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name            string
		err             error
		invalid, outage bool
	}{
		{"nil", nil, false, false},
		{"invalid limit", floodgate.ErrInvalidLimit, true, false},
		{"a LimitError", &floodgate.LimitError{Field: "Quota"}, true, false},
		{"invalid cost, wrapped", fmt.Errorf("rule %q: %w", "r", floodgate.ErrInvalidCost), true, false},
		{"cost above the quota", floodgate.ErrCostExceedsLimit, true, false},
		{"unavailable, wrapped", fmt.Errorf("redisstore: %w: i/o timeout", floodgate.ErrStoreUnavailable), false, true},
		{"deadline", context.DeadlineExceeded, false, true},
		{"deadline, wrapped", fmt.Errorf("call: %w", context.DeadlineExceeded), false, true},
		{"canceled", context.Canceled, false, true},
		{"a script error", errors.New("ERR user_script:1: bad"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Invalid(tc.err); got != tc.invalid {
				t.Errorf("Invalid(%v) = %v, want %v", tc.err, got, tc.invalid)
			}
			if got := Outage(tc.err); got != tc.outage {
				t.Errorf("Outage(%v) = %v, want %v", tc.err, got, tc.outage)
			}
		})
	}
}

package rulecheck_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/rulecheck"
)

func TestRule(t *testing.T) {
	ok := floodgate.PerMinute(10)
	bad := floodgate.Limit{Algorithm: floodgate.SlidingWindowLog, Quota: 0, Window: time.Minute}
	for _, tc := range []struct {
		name    string
		limit   floodgate.Limit
		failure decide.FailureMode
		share   float64
		want    []string // "Field: reason prefix"
	}{
		{"usable", ok, decide.FailLocal, 0.5, nil},
		{"no share", ok, decide.FailClosed, 0, nil},
		{"bad limit", bad, decide.FailOpen, 0, []string{"Limit: is invalid: "}},
		{"bad mode", ok, decide.FailureMode(9), 0, []string{"Failure: must be FailOpen, FailClosed or FailLocal"}},
		{"Envoy's error mode", ok, decide.FailError, 0, []string{"Failure: must be FailOpen, FailClosed or FailLocal"}},
		{"bad share", ok, decide.FailLocal, 1.5, []string{"LocalShare: is not a usable share of the limit: "}},
		{"a share is not checked against a bad limit", bad, decide.FailLocal, 1.5, []string{"Limit: is invalid: "}},
		{"a share without FailLocal", ok, decide.FailOpen, 0.5, []string{"LocalShare: applies to FailLocal only (the failure mode is open)"}},
		{"all reported", bad, decide.FailureMode(9), 0, []string{"Limit: ", "Failure: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rulecheck.Rule(tc.limit, tc.failure, tc.share)
			if len(got) != len(tc.want) {
				t.Fatalf("Rule = %+v, want %d errors", got, len(tc.want))
			}
			for i, w := range tc.want {
				field, reason, _ := strings.Cut(w, ": ")
				if got[i].Field != field || !strings.HasPrefix(got[i].Reason, reason) || got[i].Value == "" {
					t.Errorf("error %d = %+v, want field %s, reason %q...", i, got[i], field, reason)
				}
			}
		})
	}
}

func TestRuleNameAndKeyPrefix(t *testing.T) {
	const shape = "must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
	for name, want := range map[string]string{
		"per-ip": "", "api.v1_login": "", "9": "", strings.Repeat("a", 64): "",
		"": "is required", "a b": shape, "a/b": shape, "-x": shape, ".x": shape, "tab\there": shape, "é": shape,
		strings.Repeat("a", 65): shape + " (it has 65 bytes)",
	} {
		if got := rulecheck.RuleName(name); got != want {
			t.Errorf("RuleName(%q) = %q, want %q", name, got, want)
		}
	}
	for prefix, ok := range map[string]bool{"": true, "app:": true, "a{b": false, "}": false} {
		if got := rulecheck.KeyPrefix(prefix); (got == "") != ok {
			t.Errorf("KeyPrefix(%q) = %q", prefix, got)
		}
	}
}

// TestShareOf: a rule file's local_share and instances, read once for both
// YAML dialects.
func TestShareOf(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name       string
		failure    decide.FailureMode
		failureBad bool // a failure mode written but unreadable
		share      *float64
		instances  *int64
		want       float64
		field      string // of the *FieldError; "" for none
	}{
		{"a share", decide.FailLocal, false, f(0.25), nil, 0.25, ""},
		{"the whole limit", decide.FailLocal, false, f(1), nil, 1, ""},
		{"instances", decide.FailLocal, false, nil, i(4), 0.25, ""},
		{"one instance", decide.FailLocal, false, nil, i(1), 1, ""},
		{"neither, open", decide.FailOpen, false, nil, nil, 0, ""},
		{"local with neither", decide.FailLocal, false, nil, nil, 0, "Failure"},
		{"both", decide.FailLocal, false, f(0.5), i(2), 0, "Instances"},
		{"negative instances", decide.FailLocal, false, nil, i(-2), 0, "Instances"},
		{"0 instances written", decide.FailLocal, false, nil, i(0), 0, "Instances"},
		{"0 instances written, open", decide.FailOpen, false, nil, i(0), 0, "Instances"},
		{"share above 1", decide.FailLocal, false, f(1.5), nil, 0, "LocalShare"},
		{"negative share", decide.FailLocal, false, f(-0.5), nil, 0, "LocalShare"},
		{"share 0 written", decide.FailLocal, false, f(0), nil, 0, "LocalShare"},
		{"share -0 written", decide.FailLocal, false, f(math.Copysign(0, -1)), nil, 0, "LocalShare"},
		{"NaN share", decide.FailLocal, false, f(math.NaN()), nil, 0, "LocalShare"},
		{"infinite share", decide.FailLocal, false, f(math.Inf(1)), nil, 0, "LocalShare"},
		{"share, closed", decide.FailClosed, false, f(0.5), nil, 0, "LocalShare"},
		{"instances, open", decide.FailOpen, false, nil, i(3), 0, "Instances"},
		{"bad mode, neither", decide.FailOpen, true, nil, nil, 0, ""},
		{"bad mode, a share", decide.FailOpen, true, f(0.5), nil, 0.5, ""},
		{"bad mode, instances", decide.FailClosed, true, nil, i(4), 0.25, ""},
		{"bad mode, share above 1", decide.FailOpen, true, f(1.5), nil, 0, "LocalShare"},
		{"bad mode, 0 instances", decide.FailOpen, true, nil, i(0), 0, "Instances"},
		{"bad mode, both", decide.FailOpen, true, f(0.5), i(2), 0, "Instances"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rulecheck.ShareOf(tc.failure, tc.failureBad, tc.share, tc.instances)
			var fe *fielderr.Error
			if errors.As(err, &fe) != (tc.field != "") || fe != nil && fe.Field != tc.field {
				t.Fatalf("ShareOf = %v, %v; want a FieldError on %q", got, err, tc.field)
			}
			if err == nil && got != tc.want {
				t.Errorf("ShareOf = %v, want %v", got, tc.want)
			}
		})
	}
}

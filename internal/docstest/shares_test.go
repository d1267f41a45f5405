package docstest

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// fieldErrors returns the *yamlfield.Errors in err, a tree of joined and
// wrapped errors.
func fieldErrors(err error) []*yamlfield.Error {
	var fe *yamlfield.Error
	if errors.As(err, &fe) && errors.Unwrap(err) == nil {
		return []*yamlfield.Error{fe}
	}
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		var out []*yamlfield.Error
		for _, err := range e.Unwrap() {
			out = append(out, fieldErrors(err)...)
		}
		return out
	case interface{ Unwrap() error }:
		return fieldErrors(e.Unwrap())
	}
	if fe != nil {
		return []*yamlfield.Error{fe}
	}
	return nil
}

// TestShareMistakesBothDialects: floodgate's config and Envoy's rule files
// give the same mistake in local_share or instances the same reason (and
// fix), and only that one error.
func TestShareMistakesBothDialects(t *testing.T) {
	for _, tc := range []struct {
		name, key, value string
		reason           string // the error's, in both
	}{
		{"share above 1", "local_share", "1.5", "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"},
		{"negative share", "local_share", "-3", "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"},
		{"share 0", "local_share", "0", "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"},
		{"share -0.0", "local_share", "-0.0", "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"},
		{"infinite share", "local_share", ".inf", "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"},
		{"NaN share", "local_share", ".nan", "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"},
		{"quoted share", "local_share", `"0.5"`, "is not a number"},
		{"percent share", "local_share", "25%", "is not a number"},
		{"0 instances", "instances", "0", "must be at least 1"},
		{"negative instances", "instances", "-2", "must be at least 1"},
		{"too many instances", "instances", "99999999999999999999", "is too large"},
		{"fractional instances", "instances", "2.5", "is not a whole number"},
		{"quoted instances", "instances", `"4"`, "is not a whole number"},
		{"octal instances", "instances", "010", "must be written in decimal digits, without a leading 0, + or _ (YAML reads 010 as 8)"},
		{"0o instances", "instances", "0o10", "must be written in decimal digits, without a leading 0, + or _ (YAML reads 0o10 as 8)"},
		{"hex instances", "instances", "0x10", "must be written in decimal digits, without a leading 0, + or _ (YAML reads 0x10 as 16)"},
		{"binary instances", "instances", "0b10", "must be written in decimal digits, without a leading 0, + or _ (YAML reads 0b10 as 2)"},
		{"signed instances", "instances", "+4", "must be written in decimal digits, without a leading 0, + or _ (YAML reads +4 as 4)"},
		{"instances with _", "instances", "1_0", "must be written in decimal digits, without a leading 0, + or _ (YAML reads 1_0 as 10)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			floodgate := "rules:\n  - name: r\n    algorithm: fixed_window\n    limit: 8\n    window: 1m\n    failure_mode: local\n    " + tc.key + ": " + tc.value + "\n"
			_, err := config.Parse([]byte(floodgate), "f.yaml")
			cfg := fieldErrors(err)
			rules := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 8, failure_mode: local, " + tc.key + ": " + tc.value + "}\n"
			_, err = envoy.Parse(envoy.Source{Name: "r.yaml", Data: []byte(rules)})
			env := fieldErrors(err)
			if len(cfg) != 1 || len(env) != 1 {
				t.Fatalf("errors: config %v, envoy %v; want one each", cfg, env)
			}
			if cfg[0].Reason != tc.reason || env[0].Reason != tc.reason {
				t.Errorf("reasons:\nconfig %q\nenvoy  %q\nwant   %q", cfg[0].Reason, env[0].Reason, tc.reason)
			}
			if cfg[0].Fix != env[0].Fix {
				t.Errorf("fixes: config %q, envoy %q", cfg[0].Fix, env[0].Fix)
			}
			if !strings.HasSuffix(cfg[0].Path, "."+tc.key) || !strings.HasSuffix(env[0].Path, "."+tc.key) {
				t.Errorf("paths: config %s, envoy %s; want the %s key", cfg[0].Path, env[0].Path, tc.key)
			}
		})
	}
}

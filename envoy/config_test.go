package envoy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // the whole error, or a substring when it starts with "..."
	}{
		{"empty file", "", "f.yaml: the file is empty: want a domain and its descriptors"},
		{"comments only", "# nothing\n", "f.yaml: the file is empty: want a domain and its descriptors"},
		{"not yaml", "domain: [", "...f.yaml:1: is not valid YAML: "},
		{"tab indentation", "domain: d\ndescriptors:\n  - key: a\n\t  value: b\n", "f.yaml:4: is not valid YAML: found a tab character that violates indentation; YAML indents with spaces, not tabs: replace the tabs at the start of line 4 with spaces"},
		{"not UTF-8", "domain: caf\xe9\n", "f.yaml:1: byte 12 of the line (offset 11 in the file, 0xE9) is not UTF-8; save the file as UTF-8 (it may be Latin-1 or another 8-bit encoding)"},
		{"no-break space", "domain: d\ndescriptors:\n\u00a0 - key: a\n", "f.yaml:3: has a no-break space (U+00A0) in its indentation, at byte 1 of the line; indent with plain spaces (an editor or a copy from a web page put it there)"},
		{"two documents", "domain: a\n---\ndomain: b\n", "f.yaml:3: holds more than one YAML document; want one domain per file"},
		{"not a mapping", "- a\n", `f.yaml:1: a list is not a mapping`},
		{"missing domain", "descriptors: []\n", `f.yaml:1: domain: "" is required: name the domain Envoy's rate-limit filter sends`},
		{"unknown root key", "domain: d\nfoo: 1\n", `f.yaml:2: foo: unknown key "foo"; known keys here: domain, descriptors, algorithm, failure_mode, local_share, instances, response_headers`},
		{"key set twice", "domain: d\ndomain: e\n", "f.yaml:2: domain: is already set on line 1; keep one of the two"},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", "f.yaml:2: descriptors: a mapping is not a list of descriptors"},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: a\n    valeu: b\n",
			`f.yaml:4: descriptors[0].valeu: unknown key "valeu"; did you mean "value"?`},
		{"lease on a sliding log", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_window_log, lease: {}}\n",
			"...f.yaml:4: descriptors[0].rate_limit.lease: on sliding_window_log cannot be leased"},
		{"lease share above 1", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      lease: {max_share: 3}\n",
			"...f.yaml:7: descriptors[0].rate_limit.lease.max_share: 3 must be above 0 and at most 1"},
		{"lease unknown key", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      lease: {ttll: 1s}\n",
			`...descriptors[0].rate_limit.lease.ttll: unknown key "ttll"; did you mean "ttl"?`},
		{"descriptor without key", "domain: d\ndescriptors:\n  - value: b\n", `f.yaml:3: descriptors[0].key: "" is required: every descriptor has a key`},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n",
			`f.yaml:5: descriptors[1]: "d.a_b" is a duplicate descriptor (same key and value as line 3)`},
		{"duplicate nested descriptor", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: x\n      - key: x\n",
			`f.yaml:6: descriptors[0].descriptors[1]: "d.a.x" is a duplicate descriptor (same key and value as line 5)`},
		{"unknown rate_limit key", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 3\n",
			`f.yaml:7: descriptors[0].rate_limit.burst: unknown key "burst"; known keys here: unit, requests_per_unit, unlimited, name, replaces, algorithm, capacity, failure_mode, local_share, instances, lease`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			`f.yaml:4: descriptors[0].rate_limit.unit: "fortnight" is not one of second, minute, hour, day, week, month, year`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n",
			`f.yaml:4: descriptors[0].rate_limit.unit: "" is not one of second, minute, hour, day, week, month, year`},
		{"unit with unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			`f.yaml:6: descriptors[0].rate_limit.unit: "second" must not be set when unlimited is true`},
		{"algorithm with unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      algorithm: token_bucket\n",
			`f.yaml:6: descriptors[0].rate_limit.algorithm: "token_bucket" does not apply when unlimited is true`},
		{"missing requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n",
			"f.yaml:4: descriptors[0].rate_limit.requests_per_unit: is required (0 denies every request; unlimited: true admits every request)"},
		{"negative requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: "-1" is not a whole number between 0 and 4294967295`},
		{"requests_per_unit too big", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
			`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: "4294967296" is not a whole number between 0 and 4294967295`},
		{"requests_per_unit not a number", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: lots}\n",
			`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: "lots" is not a whole number between 0 and 4294967295`},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n",
			`f.yaml:4: descriptors[0].rate_limit.algorithm: "gcra" is not one of sliding_window_log, token_bucket, sliding_window_counter, fixed_window`},
		{"unknown domain algorithm", "domain: d\nalgorithm: leaky\n", `f.yaml:2: algorithm: "leaky" is not one of sliding_window_log, token_bucket, sliding_window_counter, fixed_window`},
		{"capacity without a bucket", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, capacity: 5}\n",
			"f.yaml:4: descriptors[0].rate_limit.capacity: 5 applies to algorithm token_bucket only (this rule's algorithm is fixed_window)"},
		{"capacity 0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, capacity: 0}\n",
			"f.yaml:4: descriptors[0].rate_limit.capacity: 0 must be at least 1 (algorithm token_bucket, unit second)"},
		{"log quota too large", "domain: d\nalgorithm: sliding_window_log\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 5000000\n",
			"f.yaml:7: descriptors[0].rate_limit.requests_per_unit: 5000000 must be at most 1048576 for sliding_window_log (one entry per request) (algorithm sliding_window_log, unit day)"},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n",
			`f.yaml:8: descriptors[0].rate_limit.replaces[0].name: "" is required: name the rate_limit this one replaces`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: x}]\n",
			`f.yaml:8: descriptors[0].rate_limit.replaces: "x" is this rule's own name: a rule cannot replace itself`},
		{"replaces not a list", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: x}\n",
			`f.yaml:4: descriptors[0].rate_limit.replaces: "x" is not a list of {name: ...}`},
		{"shadow_mode not a bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n",
			`f.yaml:4: descriptors[0].shadow_mode: "maybe" is not true or false`},
		{"quoted requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n",
			`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: "5" is not a whole number between 0 and 4294967295; write it without quotes`},
		{"quoted yes", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: \"yes\"\n", `f.yaml:4: descriptors[0].shadow_mode: "yes" is a quoted string, not a boolean; write true or false without quotes`},
		{"quoted boolean", "domain: d\nresponse_headers: 'true'\n", `f.yaml:2: response_headers: "true" is a quoted string, not a boolean; write true or false without quotes`},
		{"misspelt unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: secnd, requests_per_unit: 1}\n",
			`f.yaml:4: descriptors[0].rate_limit.unit: "secnd" is not one of second, minute, hour, day, week, month, year; did you mean "second"?`},
		{"misspelt algorithm", "domain: d\nalgorithm: token-bucket\n",
			`f.yaml:2: algorithm: "token-bucket" is not one of sliding_window_log, token_bucket, sliding_window_counter, fixed_window; did you mean "token_bucket"?`},
		{"misspelt failure_mode", "domain: d\nfailure_mode: opne\n", `f.yaml:2: failure_mode: "opne" is not error, open, closed or local; did you mean "open"?`},
		{"empty descriptor", "domain: d\ndescriptors:\n  -\n", "f.yaml:3: descriptors[0]: nothing is not a mapping"},
		{"local without a share", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, failure_mode: local}\n",
			`f.yaml:4: descriptors[0].rate_limit.failure_mode: local needs local_share (such as 0.25) or instances (such as 4): the share of the limit each instance enforces alone while the store is unavailable; set one beside it, or on the domain`},
		{"domain local without a share", "domain: d\nfailure_mode: local\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4}\n" +
			"  - key: b\n    rate_limit: {unit: second, requests_per_unit: 4, local_share: 0.5}\n  - key: c\n    rate_limit: {unlimited: true}\n",
			`f.yaml:5: descriptors[0].rate_limit: has failure_mode local from its domain (line 2) and needs local_share (such as 0.25) or instances (such as 4): the share of the limit each instance enforces alone while the store is unavailable; set one here, or on the domain`},
		{"share without local", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, failure_mode: open, local_share: 0.5}\n",
			`f.yaml:4: descriptors[0].rate_limit.local_share: 0.5 applies to failure_mode: local only (this one's failure_mode is open)`},
		{"instances without local, by default", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, instances: 3}\n",
			`f.yaml:4: descriptors[0].rate_limit.instances: 3 applies to failure_mode: local only (failure_mode is not set here or on the domain)`},
		{"domain share without local", "domain: d\nlocal_share: 0.5\n",
			`f.yaml:2: local_share: 0.5 applies to failure_mode: local only (the domain's failure_mode is not set)`},
		{"domain share, domain open", "domain: d\nfailure_mode: open\ninstances: 2\n",
			`f.yaml:3: instances: 2 applies to failure_mode: local only (the domain's failure_mode is open)`},
		{"share and instances", "domain: d\nfailure_mode: local\nlocal_share: 0.5\ninstances: 2\n",
			`f.yaml:4: instances: 2 cannot be used together with local_share; set one of them`},
		{"share above 1", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, failure_mode: local, local_share: 1.5}\n",
			`f.yaml:4: descriptors[0].rate_limit.local_share: 1.5 must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)`},
		// 0 is not written, as in floodgate's own config (rulecheck.ShareOf).
		// Written, 0 is a mistake: a share above 0, or no local_share at all.
		{"share 0", "domain: d\nfailure_mode: local\nlocal_share: 0\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4}\n",
			`f.yaml:3: local_share: 0 must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)`},
		{"share -0.0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, failure_mode: local, local_share: -0.0}\n",
			`f.yaml:4: descriptors[0].rate_limit.local_share: -0.0 must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)`},
		{"instances 0", "domain: d\nfailure_mode: local\ninstances: 0\n",
			`f.yaml:3: instances: 0 must be at least 1`},
		{"negative share", "domain: d\nfailure_mode: local\nlocal_share: -0.5\n",
			`f.yaml:3: local_share: -0.5 must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)`},
		{"quoted share", "domain: d\nfailure_mode: local\nlocal_share: \"0.5\"\n",
			`f.yaml:3: local_share: "0.5" is not a number; write it without quotes`},
		{"share not a number", "domain: d\nfailure_mode: local\nlocal_share: half\n",
			`f.yaml:3: local_share: "half" is not a number`},
		{"negative instances", "domain: d\nfailure_mode: local\ninstances: -1\n",
			`f.yaml:3: instances: -1 must be at least 1`},
		{"instances not whole", "domain: d\nfailure_mode: local\ninstances: 2.5\n",
			`...f.yaml:3: instances: "2.5" is not a whole number`},
		{"instances too large", "domain: d\nfailure_mode: local\ninstances: 99999999999999999999\n",
			`f.yaml:3: instances: "99999999999999999999" is too large`},
		{"instances octal", "domain: d\nfailure_mode: local\ninstances: 010\n",
			`f.yaml:3: instances: "010" must be written in decimal digits, without a leading 0, + or _ (YAML reads 010 as 8); write 10, or 8 if you mean what YAML reads`},
		{"instances hex", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, failure_mode: local, instances: 0x10}\n",
			`f.yaml:4: descriptors[0].rate_limit.instances: "0x10" must be written in decimal digits, without a leading 0, + or _ (YAML reads 0x10 as 16); write 16`},
		{"instances 0o", "domain: d\nfailure_mode: local\ninstances: 0o10\n",
			`...instances: "0o10" must be written in decimal digits`},
		{"instances +", "domain: d\nfailure_mode: local\ninstances: +4\n",
			`...instances: "+4" must be written in decimal digits`},
		{"instances _", "domain: d\nfailure_mode: local\ninstances: 1_0\n",
			`...instances: "1_0" must be written in decimal digits`},
		{"requests_per_unit octal", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 010}\n",
			`...requests_per_unit: "010" must be written in decimal digits`},
		{"share .inf", "domain: d\nfailure_mode: local\nlocal_share: .inf\n",
			`f.yaml:3: local_share: .inf must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)`},
		{"share .nan", "domain: d\nfailure_mode: local\nlocal_share: .nan\n",
			`f.yaml:3: local_share: .nan must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)`},
		// A domain share that is written but wrong is reported once, not
		// again on each rule that would take it (they would fill the error
		// budget); nor a misspelt failure_mode's share as "not local".
		{"wrong domain share, rules below", "domain: d\nfailure_mode: local\nlocal_share: 25%\ndescriptors:\n" + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 4}\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 4}\n",
			`f.yaml:3: local_share: "25%" is not a number`},
		{"empty domain share, rules below", "domain: d\nfailure_mode: local\nlocal_share: ~\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4}\n",
			`f.yaml:3: local_share: ~ must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)`},
		{"misspelt domain mode with instances", "domain: d\nfailure_mode: Local\ninstances: 2\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, local_share: 0.5}\n",
			`f.yaml:2: failure_mode: "Local" is not error, open, closed or local; did you mean "local"?`},
		{"misspelt domain mode, its share still checked", "domain: d\nfailure_mode: Local\ninstances: -2\n",
			`f.yaml:2: failure_mode: "Local" is not error, open, closed or local; did you mean "local"?` + "\n" + `f.yaml:3: instances: -2 must be at least 1`},
		{"misspelt rule mode with share", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4, failure_mode: lcoal, local_share: 0.5}\n",
			`f.yaml:4: descriptors[0].rate_limit.failure_mode: "lcoal" is not error, open, closed or local; did you mean "local"?`},
		{"share too small for the limit", "domain: d\nfailure_mode: local\ninstances: 4294967295\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1, algorithm: token_bucket}\n",
			`f.yaml:3: instances: 4294967295 is not a usable share of the limit of descriptors[0].rate_limit (line 6): local share 2.3283064370807974e-10 of capacity 1, 1 per 8760h0m0s (token_bucket) would refill 1 tokens per more than 2562047h47m16.854775807s; use a larger share`},
		{"own share too small for the limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1, algorithm: token_bucket, failure_mode: local, instances: 4294967295}\n",
			`...f.yaml:4: descriptors[0].rate_limit.instances: 4294967295 is not a usable share of the limit: local share 2.3283064370807974e-10 of capacity 1`},
		{"bad failure_mode", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, failure_mode: ajar}\n",
			`f.yaml:4: descriptors[0].rate_limit.failure_mode: "ajar" is not error, open, closed or local`},
		// Decode refuses an explicitly tagged string, as yaml.v2 does for the reference.
		{"tagged string requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: !!str 5}\n",
			`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: "5" is not a whole number between 0 and 4294967295`},
		{"empty requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: ~\n",
			`f.yaml:6: descriptors[0].rate_limit.requests_per_unit: nothing is not a whole number between 0 and 4294967295`},
		// A value that does not decode is reported once, not again as missing.
		{"key not a string", "domain: d\ndescriptors:\n  - key: [a]\n", `f.yaml:3: descriptors[0].key: a list is not a string`},
		// An aliased value's error is on the line where it is written.
		{"bad unit through an alias", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: &u fortnight, requests_per_unit: 1}\n  - key: b\n    rate_limit:\n      unit: *u\n      requests_per_unit: 1\n",
			`f.yaml:4: descriptors[0].rate_limit.unit: "fortnight" is not one of second, minute, hour, day, week, month, year` + "\n" +
				`f.yaml:4: descriptors[1].rate_limit.unit: "fortnight" is not one of second, minute, hour, day, week, month, year`},
		// Errors come by line, whichever pass finds them.
		{"errors by line", "domain: d\nfailure_mode: ajar\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n    rate_limit: {unit: eon, requests_per_unit: 1}\nbogus: 1\n",
			`f.yaml:2: failure_mode: "ajar" is not error, open, closed or local` + "\n" + `f.yaml:5: descriptors[0].shadow_mode: "maybe" is not true or false` + "\n" +
				`f.yaml:6: descriptors[0].rate_limit.unit: "eon" is not one of second, minute, hour, day, week, month, year` + "\n" +
				`f.yaml:7: bogus: unknown key "bogus"; known keys here: domain, descriptors, algorithm, failure_mode, local_share, instances, response_headers`},
		{"two errors", "domain: d\nbar: 1\ndescriptors:\n  - key: a\n    rate_limit: {unit: eon, requests_per_unit: 1}\n",
			`f.yaml:2: bar: unknown key "bar"; known keys here: domain, descriptors, algorithm, failure_mode, local_share, instances, response_headers` + "\n" +
				`f.yaml:5: descriptors[0].rate_limit.unit: "eon" is not one of second, minute, hour, day, week, month, year`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(Source{Name: "f.yaml", Data: []byte(tt.yaml)})
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			got := err.Error()
			if sub, ok := strings.CutPrefix(tt.want, "..."); ok {
				if !strings.Contains(got, sub) {
					t.Errorf("error %q, want it to contain %q", got, sub)
				}
			} else if got != tt.want {
				t.Errorf("error\n%s\nwant\n%s", got, tt.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "f.yaml" {
				t.Errorf("error %v is not a *ConfigError naming the file", err)
			}
		})
	}
}

func TestParseDuplicateDomain(t *testing.T) {
	_, err := Parse(Source{Name: "a.yaml", Data: []byte("domain: d\n")}, Source{Name: "b.yaml", Data: []byte("\ndomain: d\n")})
	if err == nil || err.Error() != "b.yaml:2: domain: d is already the domain of a.yaml; merge the two files, set MERGE_DOMAIN_CONFIG=true, or, for a mounted ConfigMap, skip its dot-folders (RUNTIME_IGNOREDOTFILES=true)" {
		t.Fatalf("error %v", err)
	}
}

// TestConfigErrorFields checks a rule file's errors carry their pieces,
// and that a broken file is not reported line by line.
func TestConfigErrorFields(t *testing.T) {
	_, err := Parse(Source{Name: "f.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: eon, requests_per_unit: 1}\n")})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != "f.yaml" || ce.Line != 4 || ce.Path != "descriptors[0].rate_limit.unit" || ce.Value != `"eon"` ||
		ce.Reason != "is not one of second, minute, hour, day, week, month, year" {
		t.Errorf("error %#v", ce)
	}
	var b strings.Builder
	b.WriteString("domain: d\n")
	for i := range 2 * maxErrors {
		fmt.Fprintf(&b, "bogus%d: 1\n", i)
	}
	_, err = Parse(Source{Name: "f.yaml", Data: []byte(b.String())})
	if n := strings.Count(err.Error(), "\n") + 1; n != maxErrors {
		t.Errorf("%d errors reported, want %d", n, maxErrors)
	}
}

// TestParseAccepts checks what the reference accepts loads here too.
func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name, yaml string
	}{
		{"domain only", "domain: d\n"},
		{"null descriptors and rate_limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n  - key: b\n    descriptors:\n"},
		{"yaml 1.1 booleans", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes\n    detailed_metric: on\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
		{"numeric values", "domain: d\ndescriptors:\n  - key: port\n    value: 8080\n    rate_limit: {unit: SECOND, requests_per_unit: 1}\n"},
		{"requests_per_unit with unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n"},
		{"replaces unknown name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, replaces: [{name: elsewhere}]}\n"},
		{"big fixed window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 4000000000}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse(Source{Name: "f.yaml", Data: []byte(tt.yaml)}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLoadDir(t *testing.T) {
	rules, err := LoadDir("testdata/rules")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"algorithms", "depth", "detailed", "edge_proxy_per_ip", "internal", "messaging", "mongo_cps", "replaces", "shadow", "units", "wildcard"}
	if got := strings.Join(rules.Domains(), " "); got != strings.Join(want, " ") {
		t.Errorf("domains %s, want %s", got, strings.Join(want, " "))
	}
	if got := len(rules.Sources()); got != 11 {
		t.Errorf("%d sources, want 11", got)
	}

	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "no rule files in") {
		t.Errorf("empty folder: %v", err)
	}
	// The reference's runtime loader: every file, any extension, in
	// subfolders too.
	write("a.yaml", "domain: a\n")
	write("b.yml", "domain: b\n")
	write("c.conf", "domain: c\n")
	write("sub/deeper/d", "domain: d\n")
	write(".hidden.yaml", "not: [valid")
	write(".dotdir/e.yaml", "domain: e\n")
	rules, err = LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rules.Domains(), " "); got != "a b c d" {
		t.Errorf("domains %q, want \"a b c d\"", got)
	}
	if got, want := strings.Join(rules.Skipped(), ","), filepath.Join(dir, ".dotdir")+","+filepath.Join(dir, ".hidden.yaml"); got != want {
		t.Errorf("skipped %q, want %q", got, want)
	}
	// With dot-files, as the reference loads them by default.
	if _, err := Load(dir, LoadOptions{DotFiles: true}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, ".hidden.yaml")+":1: is not valid YAML") {
		t.Errorf("dot-files: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, ".hidden.yaml")); err != nil {
		t.Fatal(err)
	}
	if rules, err := Load(dir, LoadOptions{DotFiles: true}); err != nil || strings.Join(rules.Domains(), " ") != "a b c d e" {
		t.Errorf("dot-files: %v, %v", rules.Domains(), err)
	}
	write("notes.txt", "not: [valid")
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "notes.txt")+":1: is not valid YAML") {
		t.Errorf("a file that is not a rule file: %v, want an error naming it", err)
	}
	if err := os.Remove(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	write("z.yaml", "domain: c\ndescriptors:\n  - key: x\n    rate_limit: {unit: eon, requests_per_unit: 1}\n")
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "z.yaml")+":4: descriptors[0].rate_limit.unit") {
		t.Errorf("bad file: %v", err)
	}
	if _, err := LoadDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing folder: no error")
	}
}

// TestLoadConfigMap loads a folder laid out as Kubernetes mounts a
// ConfigMap: each file a link into ..data, itself a link to a dot-folder
// holding the files; the swap of ..data is an update.
func TestLoadConfigMap(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "..2026_01_01_00_00_00.1"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "..2026_01_01_00_00_00.1", "rules.yaml"), []byte("domain: cm\n"), 0o600))
	must(os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")))
	must(os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml")))
	rules, err := LoadDir(dir)
	if err != nil || strings.Join(rules.Domains(), " ") != "cm" || len(rules.Sources()) != 1 {
		t.Fatalf("ConfigMap folder: %v, %v", rules.Sources(), err)
	}
	// The reference's default (dot-files loaded) reads every file twice,
	// and says how to fix it.
	if _, err := Load(dir, LoadOptions{DotFiles: true}); err == nil || !strings.Contains(err.Error(), "RUNTIME_IGNOREDOTFILES=true") {
		t.Errorf("ConfigMap folder with dot-files: %v", err)
	}
}

// TestMergeDomains: MERGE_DOMAIN_CONFIG merges files of one domain; a
// descriptor both define is still an error naming both files.
func TestMergeDomains(t *testing.T) {
	a := Source{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	b := Source{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")}
	if _, err := Parse(a, b); err == nil {
		t.Fatal("two files of one domain without merging: no error")
	}
	rules, err := ParseWith(LoadOptions{MergeDomains: true}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2"} {
		if r := rules.Match("d", []Entry{{Key: k, Value: "x"}}); r == nil || r.Key != "d."+k {
			t.Errorf("merged %s: %+v", k, r)
		}
	}
	_, err = ParseWith(LoadOptions{MergeDomains: true}, a, b, Source{Name: "c.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k1\n")})
	if err == nil || err.Error() != `c.yaml:3: descriptors: "d.k1" is a duplicate descriptor: a.yaml defines it for the same domain` {
		t.Errorf("duplicate across merged files: %v", err)
	}
}

// TestPeerRuleKeys: quota_mode, value_to_metric and share_threshold load
// with the reference's meaning; share_threshold needs a wildcard.
func TestPeerRuleKeys(t *testing.T) {
	src := Source{Name: "f.yaml", Data: []byte(`domain: d
descriptors:
  - key: files
    value: "top/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
`)}
	rules, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if r := rules.Match("d", []Entry{{"files", "top/a"}}); r == nil || !r.shared || r.levels[0].share != "top/*" {
		t.Errorf("share_threshold: %+v", r)
	}
	if r := rules.Match("d", []Entry{{"q", "x"}}); r == nil || !r.QuotaMode {
		t.Errorf("quota_mode: %+v", r)
	}
	if r := rules.Match("d", []Entry{{"route", "/a"}, {"user", "u"}}); r == nil || !r.toMetric || !r.levels[0].toMetric {
		t.Errorf("value_to_metric: %+v", r)
	}
	_, err = Parse(Source{Name: "f.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n")})
	if err == nil || err.Error() != `f.yaml:5: descriptors[0].share_threshold: true applies to wildcard values only (a value ending in '*'), but "d.a_b" has none` {
		t.Errorf("share_threshold without a wildcard: %v", err)
	}
}

// TestMatch checks the lookup against the reference's documented examples
// (testdata/rules).
func TestMatch(t *testing.T) {
	rules, err := LoadDir("testdata/rules")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		domain  string
		entries []string
		want    string // the matched rule's key, "" for none
	}{
		{"mongo_cps", []string{"database=users"}, "mongo_cps.database_users"},
		{"mongo_cps", []string{"database=default"}, "mongo_cps.database_default"},
		{"mongo_cps", []string{"database=other"}, ""},
		{"mongo_cps", []string{"database"}, ""},
		{"messaging", []string{"message_type=marketing", "to_number=2061111111"}, "messaging.message_type_marketing.to_number"},
		{"messaging", []string{"to_number=2061111111"}, "messaging.to_number"},
		{"messaging", []string{"message_type=marketing"}, ""},
		{"messaging", []string{"message_type=transactional", "to_number=2061111111"}, ""},
		{"edge_proxy_per_ip", []string{"remote_address=50.0.0.1"}, "edge_proxy_per_ip.remote_address"},
		{"edge_proxy_per_ip", []string{"remote_address=50.0.0.5"}, "edge_proxy_per_ip.remote_address_50.0.0.5"},
		{"depth", []string{"key=value"}, "depth.key_value"},
		{"depth", []string{"key=value", "subkey=subvalue"}, "depth.key_value.subkey"},
		{"depth", []string{"key=value", "other=x"}, ""},
		{"depth", []string{"key=other", "subkey=subvalue"}, ""},
		{"depth", []string{"key=value", "subkey=subvalue", "third=x"}, ""},
		{"internal", []string{"ldap=x"}, "internal.ldap"},
		{"shadow", []string{"service=auth", "user=user-a"}, "shadow.service.user_user-a"},
		{"shadow", []string{"service=auth", "user=user-c"}, ""},
		{"replaces", []string{"group_1=one", "user=alice"}, "replaces.group_1_one.user_alice"},
		{"wildcard", []string{"path=/api/users"}, "wildcard.path_/api/*"},
		{"wildcard", []string{"path=/api/"}, "wildcard.path_/api/*"},
		{"wildcard", []string{"path=/api"}, ""},
		{"wildcard", []string{"path=/api/admin/users"}, "wildcard.path_/api/admin/*"},
		{"wildcard", []string{"path=/api/health"}, "wildcard.path_/api/health"},
		{"units", []string{"whitelisted=x"}, ""},
		{"nope", []string{"database=users"}, ""},
	}
	for _, tt := range tests {
		var entries []Entry
		for _, e := range tt.entries {
			k, v, _ := strings.Cut(e, "=")
			entries = append(entries, Entry{k, v})
		}
		got := ""
		if r := rules.Match(tt.domain, entries); r != nil {
			got = r.Key
		}
		if got != tt.want {
			t.Errorf("%s %v: matched %q, want %q", tt.domain, tt.entries, got, tt.want)
		}
	}
}

// TestRuleFields checks how rate_limit blocks compile: units, algorithms,
// defaults and floodgate's additions.
func TestRuleFields(t *testing.T) {
	rules, err := LoadDir("testdata/rules")
	if err != nil {
		t.Fatal(err)
	}
	m := func(domain string, entries ...string) *Rule {
		var es []Entry
		for _, e := range entries {
			k, v, _ := strings.Cut(e, "=")
			es = append(es, Entry{k, v})
		}
		r := rules.Match(domain, es)
		if r == nil {
			t.Fatalf("%s %v: no rule", domain, entries)
		}
		return r
	}
	for _, u := range []struct {
		value string
		unit  rlsv3.RateLimitResponse_RateLimit_Unit
		d     time.Duration
	}{
		{"second", rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
		{"minute", rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
		{"hour", rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
		{"day", rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
		{"week", rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
		{"month", rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
		{"year", rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
	} {
		r := m("units", "per="+u.value)
		want := floodgate.NewLimit(floodgate.FixedWindow, 1, u.d)
		if r.Unit != u.unit || r.Limit != want {
			t.Errorf("unit %s: %s %v, want %s %v", u.value, r.Unit, r.Limit, u.unit, want)
		}
	}
	// failure is the failure mode as the file names it; "" for none (the
	// default, error, until the Service's Options.FailureMode applies).
	failure := func(r *Rule) string {
		switch {
		case !r.failureSet && r.FailureMode != decide.FailError:
			return "invalid: not the default"
		case !r.failureSet:
			return ""
		}
		return r.FailureMode.String()
	}
	tests := []struct {
		rule    *Rule
		limit   floodgate.Limit
		failure string
	}{
		{m("algorithms", "log=x"), floodgate.NewLimit(floodgate.SlidingWindowLog, 2, time.Minute), "open"},
		{m("algorithms", "counter=x"), floodgate.NewLimit(floodgate.SlidingWindowCounter, 2, time.Minute), "open"},
		{m("algorithms", "fixed=x"), floodgate.NewLimit(floodgate.FixedWindow, 2, time.Minute), "closed"},
		{m("algorithms", "bucket=x"), floodgate.NewTokenBucket(3, 60, time.Minute), "error"},
		{m("mongo_cps", "database=users"), floodgate.NewLimit(floodgate.FixedWindow, 5, time.Second), ""},
	}
	for _, tt := range tests {
		if got := failure(tt.rule); tt.rule.Limit != tt.limit || got != tt.failure {
			t.Errorf("%s: %v %q, want %v %q", tt.rule.Key, tt.rule.Limit, got, tt.limit, tt.failure)
		}
	}
	if r := m("edge_proxy_per_ip", "remote_address=50.0.0.5"); !r.blocked() || r.Limit != (floodgate.Limit{}) {
		t.Errorf("requests_per_unit 0: blocked %v, limit %v", r.blocked(), r.Limit)
	}
	if r := m("internal", "ldap=x"); !r.Unlimited || r.Source != "testdata/rules/05-unlimited.yaml:6" {
		t.Errorf("unlimited: %v, source %q", r.Unlimited, r.Source)
	}
	r := m("replaces", "group_2=two", "user=alice")
	if strings.Join(r.Replaces, ",") != "specific_limit" {
		t.Errorf("replaces %v", r.Replaces)
	}
	if r := m("shadow", "service=s", "user=user-a"); !r.ShadowMode {
		t.Error("shadow_mode not set")
	}
	if r := m("detailed", "key1=x"); !r.DetailedMetric {
		t.Error("detailed_metric not set")
	}
}

// FuzzParse checks that no input makes Parse panic, and that whatever it
// accepts can be matched against.
func FuzzParse(f *testing.F) {
	ents, err := os.ReadDir("testdata/rules")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join("testdata/rules", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	for _, seed := range []string{"---", "~", "null", "domain:", "domain: d\ndescriptors: [1]", "domain: d\ndescriptors: [{key: [a]}]",
		"domain: d\ndescriptors: [{key: a, rate_limit: 5}]", "domain: d\ndescriptors: [{key: a, rate_limit: {replaces: [a]}}]",
		"domain: d\ndescriptors: [{key: a, value: '*', rate_limit: {unit: second, requests_per_unit: 1}}]",
		"domain: &x d\nalgorithm: *x", "domain: d\ndescriptors:\n  - key: a\n    descriptors: [{key: b, descriptors: [{key: c}]}]"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		r, err := Parse(Source{Name: "f.yaml", Data: []byte(data)})
		if err != nil {
			return
		}
		for _, d := range r.Domains() {
			r.Match(d, []Entry{{"a", "b"}, {"c", "d"}})
			r.Match(d, []Entry{{"key", ""}})
		}
	})
}

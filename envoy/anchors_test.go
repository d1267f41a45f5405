package envoy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// anchoredRules uses an anchor for a rate_limit, an alias of it, merge keys
// that override (own keys after the <<) and a merged list of maps.
const anchoredRules = `domain: anchors
descriptors:
  - key: per_minute
    rate_limit: &minute {unit: minute, requests_per_unit: 10}
  - key: same
    rate_limit: *minute
  - key: bigger
    rate_limit:
      <<: *minute
      requests_per_unit: 20
  - &user
    key: user
    shadow_mode: true
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 5, name: path_limit}
  - <<: [{key: merged, rate_limit: {unit: second, requests_per_unit: 1}}, *user]
`

// expandedRules is anchoredRules written out.
const expandedRules = `domain: anchors
descriptors:
  - key: per_minute
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: same
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: bigger
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: user
    shadow_mode: true
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 5, name: path_limit}
  - key: merged
    rate_limit: {unit: second, requests_per_unit: 1}
    shadow_mode: true
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 5, name: path_limit}
`

// TestLoadAnchors: a rule file with anchors, aliases and merge keys loads
// (as envoyproxy/ratelimit's yaml.v2 reads it) into the rules of its
// expanded form.
func TestLoadAnchors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(anchoredRules), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse(Source{Name: filepath.Join(dir, "rules.yaml"), Data: []byte(expandedRules)})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := strings.Join(got.Domains(), ","), strings.Join(want.Domains(), ","); g != w {
		t.Fatalf("domains %s, want %s", g, w)
	}
	for _, entries := range [][]Entry{
		{{"per_minute", "a"}}, {{"same", "a"}}, {{"bigger", "a"}}, {{"user", "u"}}, {{"user", "u"}, {"path", "/x"}},
		{{"merged", "m"}}, {{"merged", "m"}, {"path", "/x"}}, {{"missing", "a"}},
	} {
		g, w := got.Match("anchors", entries), want.Match("anchors", entries)
		if g != nil && w != nil { // the lines differ: each rule's is where its values are written
			gc, wc := *g, *w
			gc.Source, wc.Source = "", ""
			g, w = &gc, &wc
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%v: rule %+v, want %+v", entries, g, w)
		}
	}
	if r := got.Match("anchors", []Entry{{"merged", "m"}}); r == nil || r.Limit.Quota != 1 || !r.ShadowMode {
		t.Errorf("merged: %+v, want 1 per second in shadow mode", r)
	}
}

// TestParseAnchorErrors: an error in an aliased value is reported at the
// line where it is written, under the path of each use; aliases that
// cannot be resolved are errors.
func TestParseAnchorErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"a bad unit in an anchor", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: fortnight, requests_per_unit: 1}\n  - key: b\n    rate_limit: *r\n",
			`f.yaml:4: descriptors[1].rate_limit.unit: "fortnight" is not`},
		{"an unknown key merged in", "domain: d\ndescriptors:\n  - &a {key: a, rate_limt: {unit: second, requests_per_unit: 1}}\n  - <<: *a\n    key: b\n",
			`f.yaml:3: descriptors[1].rate_limt: unknown key "rate_limt"`},
		{"a merged scalar", "domain: d\ndescriptors:\n  - <<: x\n    key: a\n", `f.yaml:3: descriptors[0].<<: "x" is not a mapping or a list of mappings`},
		{"a cycle", "domain: d\ndescriptors: &d\n  - key: a\n    descriptors: *d\n", "f.yaml:4: descriptors[0].descriptors: *d refers to the value that holds it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(Source{Name: "f.yaml", Data: []byte(c.src)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

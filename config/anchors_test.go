package config

import (
	"strings"
	"testing"
	"time"
)

// TestParseAnchors: floodgate's configuration takes anchors, aliases and
// merge keys, and errors in merged values name the line they are written on.
func TestParseAnchors(t *testing.T) {
	c, err := Parse([]byte(`rules:
  - &base
    name: a
    algorithm: fixed_window
    limit: 10
    window: 1m
  - <<: *base
    name: b
    limit: 20
`), "anchors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 2 || c.Rules[1].Name != "b" || c.Rules[1].Limit != 20 || c.Rules[1].Window != time.Minute || c.Rules[1].Algorithm != c.Rules[0].Algorithm {
		t.Fatalf("rules %+v", c.Rules)
	}
	cases := []struct{ name, yaml, want string }{
		{"a bad value merged in", "rules:\n  - &base\n    name: a\n    algorithm: fixed_window\n    limit: 10\n    window: soon\n  - <<: *base\n    name: b\n",
			"line 6: rules[1].window"},
		{"an alias bomb", "rules:\n  - &a [x, x, x, x, x, x, x, x, x, x]\n  - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n  - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"  - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n  - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n  - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n  - &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
			"an alias bomb?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "anchors.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestParseOneDocument: a second document is refused, not ignored.
func TestParseOneDocument(t *testing.T) {
	_, err := Parse([]byte("listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n"), "two.yaml")
	if err == nil || err.Error() != "two.yaml: line 3: holds more than one YAML document; keep one configuration per file" {
		t.Errorf("error %v", err)
	}
	if _, err := Parse([]byte("listen: 127.0.0.1:1\n---\n"), "trailing.yaml"); err == nil {
		t.Error("an empty second document: no error")
	}
}

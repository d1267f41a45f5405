package yamlfield_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// TestParseSyntaxErrors: what the parser refuses, or would misread, is an
// Error with the line and a hint of the fix, not the parser's bare words.
func TestParseSyntaxErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      string // the Error's text, without a file
	}{
		{"tab indentation", "store:\n\ttype: memory\n",
			"line 2: is not valid YAML: found character that cannot start any token; YAML indents with spaces, not tabs: replace the tabs at the start of line 2 with spaces"},
		{"tab after spaces", "store:\n  type: memory\n  \ttimeout: 1s\n", "YAML indents with spaces, not tabs: replace the tabs at the start of line 3"},
		{"key indented too far", "store:\n  type: memory\n   x: 1\n",
			"line 3: is not valid YAML: mapping values are not allowed in this context; a key is indented more than the keys beside it"},
		{"key indented too little", "rules:\n  - name: a\n    limit: 1\n   window: 1s\n", "line 4: is not valid YAML: "},
		{"Latin-1 byte", "# caf\xe9\nlisten: x\n",
			"line 1: byte 6 of the line (offset 5 in the file, 0xE9) is not UTF-8; save the file as UTF-8"},
		{"Latin-1 on a later line", "listen: x\nname: na\xefve\n", "line 2: byte 9 of the line (offset 18 in the file, 0xEF) is not UTF-8"},
		{"no-break space indentation", "store:\n\u00a0\u00a0type: memory\n",
			"line 2: has a no-break space (U+00A0) in its indentation, at byte 1 of the line; indent with plain spaces"},
		{"no-break space after spaces", "rules:\n  -\u00a0name: a\n", "line 2: has a no-break space (U+00A0) in its indentation, at byte 4 of the line"},
		{"unclosed bracket", "addrs: [a, b\n", "is not valid YAML: "},
		{"reserved character", "name: @me\n", "line 1: is not valid YAML: found character that cannot start any token; a value starts with a character YAML reserves"},
		{"bad escape", "name: \"a\\qb\"\n", `write \\ for a backslash`},
		{"control character", "name: a\x01b\n", "line 1: is not valid YAML: control characters are not allowed; remove the control character (0x01) at byte 8 of the line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := yamlfield.Parse([]byte(c.src))
			var e *yamlfield.Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q) = %v, want an *Error", c.src, err)
			}
			if !strings.Contains(e.Error(), c.want) {
				t.Errorf("error %q\nwant one with %q", e, c.want)
			}
			if e.Line == 0 {
				t.Errorf("error %q has no line", e)
			}
		})
	}
	// What is fine stays fine: a no-break space inside a value, a tab
	// inside a value or a literal block, UTF-8, UTF-16 with its mark.
	for _, ok := range []string{
		"name: caf\u00e9\u00a0bar\n", "name: \"a\tb\"\n", "text: |\n  a\tb\n", "- a\n- b\n",
		"\ufeffname: x\n", "\xff\xfen\x00:\x00 \x00x\x00\n\x00",
	} {
		doc, _, err := yamlfield.Parse([]byte(ok))
		if err != nil || doc == nil {
			t.Errorf("Parse(%q) = %v", ok, err)
		}
	}
	if _, _, err := yamlfield.Parse(nil); !errors.Is(err, io.EOF) {
		t.Errorf("Parse(empty) = %v, want io.EOF", err)
	}
}

// TestDecodeBooleansStrictly: floodgate's own files take YAML 1.2's
// booleans only: a quoted value is a string, and so are yes, no, on and
// off, each refused with the fix; a *bool is named as a boolean.
func TestDecodeBooleansStrictly(t *testing.T) {
	type doc struct {
		Flag  bool  `yaml:"flag"`
		Maybe *bool `yaml:"maybe"`
	}
	for _, c := range []struct {
		src  string
		want string // "" : decodes
		val  bool
	}{
		{"flag: true", "", true}, {"flag: False", "", false}, {"flag: TRUE", "", true}, {"flag:", "", false},
		{`flag: "true"`, `line 1: flag: "true" is a quoted string, not a boolean; write true or false without quotes`, false},
		{`flag: "no"`, `line 1: flag: "no" is a quoted string, not a boolean; write true or false without quotes`, false},
		{`flag: 'on'`, `flag: "on" is a quoted string, not a boolean`, false},
		{"flag: yes", `line 1: flag: "yes" is not true or false; write true or false (yes, no, on and off are strings in YAML 1.2`, false},
		{"flag: off", `flag: "off" is not true or false; write true or false (yes, no`, false},
		{"flag: 1", `flag: "1" is not true or false`, false},
		{"flag: [true]", `flag: a list is not true or false`, false},
		{`maybe: "true"`, `line 1: maybe: "true" is a quoted string, not a boolean; write true or false without quotes`, false},
		{"maybe: nope", `maybe: "nope" is not true or false`, false},
	} {
		var root yaml.Node
		if err := yaml.Unmarshal([]byte(c.src), &root); err != nil {
			t.Fatal(err)
		}
		var d doc
		_, err := yamlfield.Decode(&root, &d)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.src, err)
		case c.want == "" && d.Flag != c.val:
			t.Errorf("%s: flag %v", c.src, d.Flag)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v\nwant one with %q", c.src, err, c.want)
		}
	}
}

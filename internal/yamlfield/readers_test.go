package yamlfield_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

func TestListReaders(t *testing.T) {
	l := &yamlfield.List{File: "f.yaml"}
	n := root(t, "name: x\nport: 8080\non: yes\nnmae: y\nname: z\nzzz: 1\nbig: 70000\nquoted: \"12\"\nflag: \"true\"\nlist: [1]\nnull:\n")
	var got []string
	for _, e := range l.Mapping(n, "top", "name", "port", "on", "big", "quoted", "flag", "list", "null") {
		got = append(got, e.Path)
		switch e.Key.Value {
		case "name", "port":
			if s, ok := l.String(e.Value, e.Path); !ok || s == "" {
				t.Errorf("%s: String = %q, %v", e.Path, s, ok)
			}
		case "null":
			if s, ok := l.String(e.Value, e.Path); !ok || s != "" {
				t.Errorf("%s: String = %q, %v", e.Path, s, ok)
			}
		case "on":
			if b, ok := l.Bool(e.Value, e.Path); !ok || !b {
				t.Errorf("%s: Bool = %v, %v", e.Path, b, ok)
			}
		case "big", "quoted":
			l.Uint(e.Value, e.Path, 65535)
		case "flag":
			l.Bool(e.Value, e.Path)
		case "list":
			l.String(e.Value, e.Path)
		}
	}
	if want := "top.name top.port top.on top.big top.quoted top.flag top.list top.null"; strings.Join(got, " ") != want {
		t.Errorf("entries %s, want %s", strings.Join(got, " "), want)
	}
	want := []string{
		`f.yaml:4: top.nmae: unknown key "nmae"; did you mean "name"?`,
		"f.yaml:5: top.name: is already set on line 1; keep one of the two",
		`f.yaml:6: top.zzz: unknown key "zzz"; known keys here: name, port, on, big, quoted, flag, list, null`,
		`f.yaml:7: top.big: "70000" is not a whole number between 0 and 65535`,
		`f.yaml:8: top.quoted: "12" is not a whole number between 0 and 65535; write it without quotes`,
		`f.yaml:9: top.flag: "true" is a quoted string, not a boolean; write true or false without quotes`,
		"f.yaml:10: top.list: a list is not a string",
	}
	if got := l.Err(); got == nil || got.Error() != strings.Join(want, "\n") {
		t.Errorf("errors\n%v\nwant\n%s", got, strings.Join(want, "\n"))
	}
	if l.Len() != len(want) {
		t.Errorf("Len = %d, want %d", l.Len(), len(want))
	}
	l.Mapping(root(t, "- a\n"), "", "a")
	if !strings.HasSuffix(l.Err().Error(), "f.yaml:1: a list is not a mapping") {
		t.Errorf("not a mapping: %v", l.Err())
	}
}

func TestListFloat(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want float64
		err  string
	}{
		{"v: 0.25", 0.25, ""},
		{"v: 1", 1, ""},
		{"v: 1e-3", 0.001, ""},
		{`v: "0.5"`, 0, `f.yaml:1: v: "0.5" is not a number; write it without quotes`},
		{"v: half", 0, `f.yaml:1: v: "half" is not a number`},
		// NaN and the infinities are numbers: the caller checks the value
		// (decide.ShareOf, as for floodgate's config, which yaml decodes).
		{"v: .nan", math.NaN(), ""},
		{"v: -.inf", math.Inf(-1), ""},
		{"v: 010", 8, ""},
		{"v: [1]", 0, `f.yaml:1: v: a list is not a number`},
	} {
		l := &yamlfield.List{File: "f.yaml"}
		for _, e := range l.Mapping(root(t, tc.src), "", "v") {
			v, ok := l.Float(e.Value, e.Path)
			if v != tc.want && !(math.IsNaN(v) && math.IsNaN(tc.want)) || ok != (tc.err == "") {
				t.Errorf("%s: Float = %v, %v; want %v", tc.src, v, ok, tc.want)
			}
		}
		if got := fmt.Sprint(l.Err()); tc.err != "" && got != tc.err || tc.err == "" && l.Err() != nil {
			t.Errorf("%s: error %s, want %q", tc.src, got, tc.err)
		}
	}
}


package yamlfield_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

type mode int

func (m *mode) UnmarshalText(b []byte) error {
	if string(b) != "on" {
		return errors.New("want on")
	}
	*m = 1
	return nil
}

type item struct {
	Name   string        `yaml:"name"`
	Window time.Duration `yaml:"window"`
	Mode   mode          `yaml:"mode"`
	Count  int           `yaml:"count"`
}

type doc struct {
	Listen string   `yaml:"listen"`
	Items  []item   `yaml:"items"`
	Addrs  []string `yaml:"addrs"`
	Extra  *item    `yaml:"extra"`
	Skip   string   `yaml:"-"`
}

func decode(t *testing.T, src string) (*doc, yamlfield.Lines, error) {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	var d doc
	lines, err := yamlfield.Decode(&n, &d)
	return &d, lines, err
}

func TestDecode(t *testing.T) {
	d, lines, err := decode(t, "listen: x\nitems:\n  - name: a\n    window: 1m\n    mode: on\naddrs: [a, b]\n")
	if err != nil {
		t.Fatal(err)
	}
	if d.Listen != "x" || len(d.Items) != 1 || d.Items[0].Window != time.Minute || d.Items[0].Mode != 1 || len(d.Addrs) != 2 || d.Extra != nil {
		t.Fatalf("decoded %+v", d)
	}
	// An optional section (a pointer to a struct) is walked when present.
	d, lines, err = decode(t, "extra:\n  name: b\n  count: 3\n")
	if err != nil || d.Extra == nil || d.Extra.Name != "b" || d.Extra.Count != 3 || lines.Line("extra.count") != 3 {
		t.Fatalf("decoded %+v (%v), extra %+v", d, err, d.Extra)
	}
	if d, _, err = decode(t, "extra:\n"); err != nil || d.Extra != nil {
		t.Fatalf("an empty optional section: %+v %v", d.Extra, err)
	}
	d, lines, err = decode(t, "listen: x\nitems:\n  - name: a\n    window: 1m\n    mode: on\naddrs: [a, b]\n")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"listen": 1, "items[0]": 3, "items[0].window": 4, "addrs[1]": 6, "items[0].nothing": 3, "nothing": 1} {
		if got := lines.Line(path); got != want {
			t.Errorf("Line(%q) = %d, want %d", path, got, want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"listn: x\n", `line 1: listn: unknown key "listn"; did you mean "listen"?`},
		{"Listen: x\n", `did you mean "listen"?`},
		{"skip: x\n", `unknown key "skip"`},
		{"items:\n  - name: a\n    window: soon\n", `line 3: items[0].window: "soon" is not a duration`},
		{"items:\n  - name: a\n    mode: off\n", `line 3: items[0].mode: "off" is invalid: want on`},
		{"items:\n  - just-a-string\n", `line 2: items[0]: "just-a-string" is not a mapping`},
		{"items: 3\n", `line 1: items: "3" is not a list`},
		{"listen: a\nlisten: b\n", "line 2: listen: is already set on line 1; keep one of the two"},
		{"bogus: x\n", `line 1: bogus: unknown key "bogus"; known keys here: listen, items, addrs, extra`},
		{"extra:\n  windw: 1m\n", `line 2: extra.windw: unknown key "windw"; did you mean "window"?`},
		{"extra:\n  window: soon\n", `line 2: extra.window: "soon" is not a duration`},
		{"items:\n  - name: a\n    count: \"5\"\n", `line 3: items[0].count: "5" is not a whole number; write it without quotes`},
		{"items:\n  - name: a\n    count: five\n", `line 3: items[0].count: "five" is not a whole number`},
		{"items:\n  - name: [x]\n", "line 2: items[0].name: a list is not a string"},
		{"items:\n  - count: 3.5\n", `line 2: items[0].count: "3.5" is not a whole number`},
		{"items:\n  - count: 1e3\n", `line 2: items[0].count: "1e3" is not a whole number`},
		{"items:\n  - count: 3.0\n", `line 2: items[0].count: "3.0" is not a whole number`},
		{"items:\n  - window: 60\n", `line 2: items[0].window: "60" is not a duration; write a duration such as 60s or 1m`},
		{"items:\n  - window: 90\n", `"90" is not a duration; write a duration such as 90s or 90000ms`},
		{"items:\n  - window: 0.5\n", `"0.5" is not a duration; write a duration such as 0.5s or 500ms`},
		{"items:\n  - window: 1d\n", `line 2: items[0].window: "1d" is not a duration; write 24h (a duration has no unit for days)`},
		{"items:\n  - window: 2w\n", `"2w" is not a duration; write 336h (a duration has no unit for weeks)`},
		{"items:\n  - window: 1 minute\n", `"1 minute" is not a duration such as 500ms, 1m or 1h`},
	}
	for _, c := range cases {
		_, _, err := decode(t, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.src, err, c.want)
		}
		var e *yamlfield.Error
		if !errors.As(err, &e) {
			t.Errorf("%q: %T is not an *Error", c.src, err)
		}
	}
	// Every error is reported.
	_, _, err := decode(t, "items:\n  - window: x\n  - window: y\nbad: 1\n")
	for _, want := range []string{"items[0].window", "items[1].window", `unknown key "bad"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    yamlfield.Error
		want string
	}{
		{yamlfield.Error{File: "f.yaml", Line: 4, Path: "a.b", Value: `"x"`, Reason: "is bad", Fix: "try y"}, `f.yaml:4: a.b: "x" is bad; try y`},
		{yamlfield.Error{File: "f.yaml", Reason: "is empty"}, "f.yaml: is empty"},
		{yamlfield.Error{Line: 4, Path: "a", Reason: "is bad"}, "line 4: a: is bad"},
		{yamlfield.Error{Reason: "is bad"}, "is bad"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}

// root parses src and returns its top node.
func root(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	return n.Content[0]
}

// TestMapping: List.Mapping, which Decode walks each mapping with, keeps
// the known keys in order and reports the others, and keys set twice.
func TestMapping(t *testing.T) {
	l := &yamlfield.List{File: "f.yaml"}
	n := root(t, "name: x\nport: 8080\nnmae: y\nname: z\nzzz: 1\nlist: [1]\n")
	var got []string
	for _, e := range l.Mapping(n, "top", "name", "port", "list") {
		got = append(got, e.Path)
	}
	if want := "top.name top.port top.list"; strings.Join(got, " ") != want {
		t.Errorf("entries %s, want %s", strings.Join(got, " "), want)
	}
	want := []string{
		`f.yaml:3: top.nmae: unknown key "nmae"; did you mean "name"?`,
		"f.yaml:4: top.name: is already set on line 1; keep one of the two",
		`f.yaml:5: top.zzz: unknown key "zzz"; known keys here: name, port, list`,
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

// TestDecodeFloat: a float field takes numbers written plainly, NaN and
// the infinities among them (the caller checks the value, as
// rulecheck.ShareOf does).
func TestDecodeFloat(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want float64
		err  string
	}{
		{"v: 0.25", 0.25, ""},
		{"v: 1", 1, ""},
		{"v: 1e-3", 0.001, ""},
		{`v: "0.5"`, 0, `line 1: v: "0.5" is not a number; write it without quotes`},
		{"v: half", 0, `line 1: v: "half" is not a number`},
		{"v: .nan", math.NaN(), ""},
		{"v: -.inf", math.Inf(-1), ""},
		{"v: 010", 8, ""},
		{"v: [1]", 0, `line 1: v: a list is not a number`},
	} {
		var into struct {
			V float64 `yaml:"v"`
		}
		_, err := yamlfield.Decode(root(t, tc.src), &into)
		if got := fmt.Sprint(err); tc.err != "" && got != tc.err || tc.err == "" && err != nil {
			t.Errorf("%s: error %s, want %q", tc.src, got, tc.err)
		}
		if tc.err == "" && into.V != tc.want && !(math.IsNaN(into.V) && math.IsNaN(tc.want)) {
			t.Errorf("%s: %v, want %v", tc.src, into.V, tc.want)
		}
	}
}

// TestWholeNumbers: Decode reads whole numbers in decimal digits only;
// yaml would read 010 as 8 and 0x10 as 16.
func TestWholeNumbers(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int64
		err  string // "" for none; the reason and fix, after the value
	}{
		{"v: 10", 10, ""},
		{"v: 0", 0, ""},
		{"v: -3", -3, ""},
		{"v: 9223372036854775807", math.MaxInt64, ""},
		{"v: 010", 0, `"010" must be written in decimal digits, without a leading 0, + or _ (YAML reads 010 as 8); write 10, or 8 if you mean what YAML reads`},
		{"v: 00", 0, `"00" must be written in decimal digits, without a leading 0, + or _ (YAML reads 00 as 0); write 0`},
		{"v: 0x10", 0, `"0x10" must be written in decimal digits, without a leading 0, + or _ (YAML reads 0x10 as 16); write 16`},
		{"v: 0o10", 0, `"0o10" must be written in decimal digits, without a leading 0, + or _ (YAML reads 0o10 as 8); write 8`},
		{"v: 0b11", 0, `"0b11" must be written in decimal digits, without a leading 0, + or _ (YAML reads 0b11 as 3); write 3`},
		{"v: +4", 0, `"+4" must be written in decimal digits, without a leading 0, + or _ (YAML reads +4 as 4); write 4`},
		{"v: 1_000", 0, `"1_000" must be written in decimal digits, without a leading 0, + or _ (YAML reads 1_000 as 1000); write 1000`},
		{"v: 99999999999999999999", 0, `"99999999999999999999" is too large`},
		{"v: -99999999999999999999", 0, `"-99999999999999999999" is too small`},
		{"v: 2.5", 0, `"2.5" is not a whole number`},
		{`v: "4"`, 0, `"4" is not a whole number; write it without quotes`},
		{"v: four", 0, `"four" is not a whole number`},
	} {
		var into struct {
			V int64 `yaml:"v"`
		}
		_, err := yamlfield.Decode(root(t, tc.src), &into)
		if got, want := fmt.Sprint(err), "line 1: v: "+tc.err; tc.err != "" && got != want || tc.err == "" && (err != nil || into.V != tc.want) {
			t.Errorf("%s: Decode = %d, %v; want %q", tc.src, into.V, err, want)
		}
	}
}

func TestListMax(t *testing.T) {
	l := &yamlfield.List{File: "f.yaml", Max: 2}
	for i := range 5 {
		l.Report(i+1, "a", "", "is bad")
	}
	l.Add(nil)
	if l.Len() != 2 {
		t.Errorf("Len = %d, want 2", l.Len())
	}
	var e *yamlfield.Error
	if !errors.As(l.Err(), &e) || e.File != "f.yaml" || e.Line != 1 {
		t.Errorf("first error %+v", e)
	}
	if (&yamlfield.List{}).Err() != nil {
		t.Error("an empty List has an error")
	}
}

func TestDescribe(t *testing.T) {
	for src, want := range map[string]string{"a: 1\n": "a mapping", "[1]\n": "a list", "~\n": "nothing", "\"\"\n": `""`, "a list\n": `"a list"`} {
		if got := yamlfield.Describe(root(t, src)); got != want {
			t.Errorf("Describe(%q) = %s, want %s", src, got, want)
		}
	}
	if got := yamlfield.DidYouMean("secnd", []string{"second", "minute"}); got != `did you mean "second"?` {
		t.Errorf("DidYouMean = %q", got)
	}
	if got := yamlfield.DidYouMean("fortnight", []string{"second", "minute"}); got != "" {
		t.Errorf("DidYouMean far off = %q", got)
	}
	if yamlfield.Index(yamlfield.Join("", "rules"), 2) != "rules[2]" || yamlfield.Join("rules[2]", "name") != "rules[2].name" {
		t.Error("Join or Index")
	}
}

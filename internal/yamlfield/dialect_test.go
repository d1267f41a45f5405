package yamlfield_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// TestBool11: a Bool11 takes YAML 1.1's words as yaml.v2 does, written
// plainly; a quoted value, a tagged or block scalar, and anything else
// are refused with the reason.
func TestBool11(t *testing.T) {
	for _, c := range []struct {
		src  string
		want bool
		err  string // "" : decodes
	}{
		{"v: true", true, ""}, {"v: False", false, ""}, {"v: yes", true, ""}, {"v: Y", true, ""}, {"v: on", true, ""},
		{"v: NO", false, ""}, {"v: off", false, ""}, {"v: n", false, ""}, {"v:", false, ""},
		{`v: "true"`, false, `line 1: v: "true" is a quoted string, not a boolean; write true or false without quotes`},
		{`v: 'yes'`, false, `line 1: v: "yes" is a quoted string, not a boolean; write true or false without quotes`},
		{"v: !!str true", false, `line 1: v: "true" is a quoted string, not a boolean; write true or false without quotes`},
		{"v: maybe", false, `line 1: v: "maybe" is not true or false`},
		{"v: yES", false, `line 1: v: "yES" is not true or false`},
		{"v: 1", false, `line 1: v: "1" is not true or false`},
		{"v: [true]", false, `line 1: v: a list is not true or false`},
	} {
		var into struct {
			V yamlfield.Bool11 `yaml:"v"`
		}
		_, err := yamlfield.Decode(root(t, c.src), &into)
		if got := fmt.Sprint(err); c.err != "" && got != c.err || c.err == "" && (err != nil || bool(into.V) != c.want) {
			t.Errorf("%s: %v, %v; want %v, %q", c.src, into.V, err, c.want, c.err)
		}
	}
}

// TestScalar: a Scalar decodes its Value as the plain type would, and
// keeps the text and whether the key is written, even empty.
func TestScalar(t *testing.T) {
	type doc struct {
		F yamlfield.Scalar[float64] `yaml:"f"`
		N yamlfield.Scalar[int64]   `yaml:"n"`
	}
	for _, c := range []struct {
		src     string
		f       float64
		text    string
		set     bool
		err     string
		nothing bool // N left out
	}{
		{"f: -0.0", 0, "-0.0", true, "", true},
		{"f: .inf\nn: 2", 0, ".inf", true, "", false},
		{"f: ~", 0, "~", true, "", true},
		{"f:", 0, "", true, "", true},
		{"n: 1", 0, "", false, "", false},
		{`f: "0.5"`, 0, "0.5", true, `line 1: f: "0.5" is not a number; write it without quotes`, true},
		{"n: 010", 0, "", false, `line 1: n: "010" must be written in decimal digits`, false},
	} {
		var d doc
		_, err := yamlfield.Decode(root(t, c.src), &d)
		if c.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.src, err, c.err)
			}
			continue
		}
		if err != nil || d.F.Text != c.text || d.F.Set != c.set || d.N.Set == c.nothing || c.text != ".inf" && d.F.Value != c.f {
			t.Errorf("%s: %+v, %v", c.src, d, err)
		}
	}
}

// TestScalarLine: a Scalar's Line is where its value is written, for an
// alias its anchor's.
func TestScalarLine(t *testing.T) {
	var d struct {
		A yamlfield.Scalar[string] `yaml:"a"`
		B yamlfield.Scalar[string] `yaml:"b"`
		C yamlfield.Scalar[string] `yaml:"c"`
	}
	if _, err := yamlfield.Decode(root(t, "a: &x one\nb:\n  two\nc: *x\n"), &d); err != nil {
		t.Fatal(err)
	}
	if d.A.Line != 1 || d.B.Line != 3 || d.C.Line != 1 || d.C.Value != "one" || d.C.Text != "one" {
		t.Errorf("lines %d %d %d, c %+v", d.A.Line, d.B.Line, d.C.Line, d.C)
	}
}

// descriptors is a list that names itself in errors.
type descriptors []*struct {
	Key string `yaml:"key"`
}

func (descriptors) Name() string { return "a list of descriptors" }

// TestDialectShapes: a Named list, notnull keys, and sized integers,
// whose reasons give their range.
func TestDialectShapes(t *testing.T) {
	type doc struct {
		List  descriptors              `yaml:"list"`
		Limit *uint32                  `yaml:"limit,notnull"`
		Small int8                     `yaml:"small"`
		Count yamlfield.Scalar[uint32] `yaml:"count,notnull"`
	}
	for _, c := range []struct{ src, err string }{
		{"list: {key: a}", `line 1: list: a mapping is not a list of descriptors`},
		{"list: [{key: a}, ~]", ""},
		{"limit: ~", `line 1: limit: nothing is not a whole number between 0 and 4294967295`},
		{"count:", `line 1: count: nothing is not a whole number between 0 and 4294967295`},
		{"limit: -1", `line 1: limit: "-1" is not a whole number between 0 and 4294967295`},
		{"limit: 4294967296", `line 1: limit: "4294967296" is not a whole number between 0 and 4294967295`},
		{"limit: 99999999999999999999", `line 1: limit: "99999999999999999999" is not a whole number between 0 and 4294967295`},
		{`limit: "5"`, `line 1: limit: "5" is not a whole number between 0 and 4294967295; write it without quotes`},
		{"limit: 010", `line 1: limit: "010" must be written in decimal digits, without a leading 0, + or _ (YAML reads 010 as 8); write 10, or 8 if you mean what YAML reads`},
		{"limit: 2.5", `line 1: limit: "2.5" is not a whole number between 0 and 4294967295`},
		{"small: 200", `line 1: small: "200" is not a whole number between -128 and 127`},
		{"limit: 7\nsmall: -5\ncount: 3", ""},
	} {
		var d doc
		_, err := yamlfield.Decode(root(t, c.src), &d)
		if got := fmt.Sprint(err); c.err != "" && got != c.err || c.err == "" && err != nil {
			t.Errorf("%s: error %v, want %q", c.src, err, c.err)
		}
		if c.src == "list: [{key: a}, ~]" && (len(d.List) != 2 || d.List[1] != nil) {
			t.Errorf("%s: an empty item is not nil: %+v", c.src, d.List)
		}
	}
}

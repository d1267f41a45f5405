package yamlfield_test

import (
	"errors"
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
}

type doc struct {
	Listen string   `yaml:"listen"`
	Items  []item   `yaml:"items"`
	Addrs  []string `yaml:"addrs"`
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
	if d.Listen != "x" || len(d.Items) != 1 || d.Items[0].Window != time.Minute || d.Items[0].Mode != 1 || len(d.Addrs) != 2 {
		t.Fatalf("decoded %+v", d)
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
		{"items:\n  - name: a\n    window: soon\n", "line 3: items[0].window: soon is not a duration"},
		{"items:\n  - name: a\n    mode: off\n", "line 3: items[0].mode: off is invalid: want on"},
		{"items:\n  - just-a-string\n", `line 2: items[0]: "just-a-string" is not a mapping`},
		{"items: 3\n", `line 1: items: "3" is not a list`},
		{"listen: a\nlisten: b\n", "line 2: listen: is already set on line 1"},
		{"items:\n  - name: [x]\n", "line 2: items[0].name: a list is not a string"},
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

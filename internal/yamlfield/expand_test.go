package yamlfield_test

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDecodeAliases: anchors, aliases and merge keys decode as in yaml.v2
// and yaml.v3, and the lines of merged values are where they are written.
func TestDecodeAliases(t *testing.T) {
	cases := []struct {
		name  string
		src   string
		check func(d *doc) bool
		lines map[string]int
	}{
		{"an alias repeats a value", "items:\n  - &one {name: a, count: 1}\n  - *one\nlisten: &l x\naddrs: [*l, y]\n",
			func(d *doc) bool {
				return len(d.Items) == 2 && d.Items[1] == d.Items[0] && d.Items[1].Name == "a" && d.Listen == "x" && strings.Join(d.Addrs, ",") == "x,y"
			},
			map[string]int{"items[1]": 2, "items[1].count": 2, "addrs[0]": 4}},
		{"a merged map", "items:\n  - &a {name: a, count: 1}\nextra:\n  <<: *a\n",
			func(d *doc) bool { return d.Extra != nil && *d.Extra == item{Name: "a", Count: 1} },
			map[string]int{"extra": 3, "extra.count": 2}},
		{"the mapping's own keys override merged ones", "items:\n  - &a {name: a, count: 1}\nextra:\n  <<: *a\n  count: 2\n",
			func(d *doc) bool { return d.Extra != nil && *d.Extra == item{Name: "a", Count: 2} },
			map[string]int{"extra.count": 5, "extra.name": 2}},
		{"an inline merged map", "extra:\n  <<: {name: merged, count: 3}\n  name: own\n",
			func(d *doc) bool { return d.Extra != nil && *d.Extra == item{Name: "own", Count: 3} }, nil},
		{"a list of maps: earlier ones override later ones", "items:\n  - &a {name: a, count: 1}\n  - &b {name: b, count: 2, window: 1m}\nextra:\n  <<: [*a, *b]\n",
			func(d *doc) bool { return d.Extra != nil && *d.Extra == item{Name: "a", Count: 1, Window: time.Minute} },
			map[string]int{"extra.window": 3, "extra.name": 2}},
		{"a merged map that merges itself", "items:\n  - &a {name: a, count: 1}\n  - &b\n    <<: *a\n    count: 2\nextra:\n  <<: *b\n  window: 1s\n",
			func(d *doc) bool {
				return d.Extra != nil && *d.Extra == item{Name: "a", Count: 2, Window: time.Second} && d.Items[1] == item{Name: "a", Count: 2}
			}, nil},
		{"an empty list merges nothing", "extra:\n  <<: []\n  name: n\n",
			func(d *doc) bool { return d.Extra != nil && *d.Extra == item{Name: "n"} }, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, lines, err := decode(t, c.src)
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(d) {
				t.Errorf("decoded %+v, extra %+v", d, d.Extra)
			}
			for path, want := range c.lines {
				if got := lines.Line(path); got != want {
					t.Errorf("Line(%q) = %d, want %d", path, got, want)
				}
			}
		})
	}
}

// TestDecodeAliasErrors: what aliases and merge keys cannot mean is
// reported at the line where it is written; errors in aliased or merged
// values name the path of each use and the line of the value.
func TestDecodeAliasErrors(t *testing.T) {
	bomb := "addrs:\n  - &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		prev := string(rune('a' + i))
		bomb += "  - &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
	}
	// Each map merges the one before and lists it twice: three times its size.
	mergeBomb := "items:\n  - &m0 {name: a}\n"
	for i := 1; i < 16; i++ {
		prev := "*m" + strconv.Itoa(i-1)
		mergeBomb += "  - &m" + strconv.Itoa(i) + " {<<: " + prev + ", k" + strconv.Itoa(i) + ": [" + prev + ", " + prev + "]}\n"
	}
	cases := []struct{ name, src, want string }{
		{"an error in an aliased value, at each use", "items:\n  - &a {name: a, count: five}\nextra: *a\n",
			`line 2: items[0].count: "five" is not a whole number` + "\n" + `line 2: extra.count: "five" is not a whole number`},
		{"an unknown key in a merged map", "items:\n  - &a {nme: a}\nextra:\n  <<: *a\n  count: 1\n",
			`line 2: items[0].nme: unknown key "nme"; did you mean "name"?` + "\n" + `line 2: extra.nme: unknown key "nme"; did you mean "name"?`},
		{"a merged scalar", "extra:\n  <<: 5\n", `line 2: extra.<<: "5" is not a mapping or a list of mappings, which a merge key (<<) takes`},
		{"a merged list of scalars", "extra:\n  <<: [{name: a}, 5]\n", `line 2: extra.<<: a list is not a mapping or a list of mappings`},
		{"two merge keys", "extra:\n  <<: {name: a}\n  <<: {count: 1}\n", "line 3: extra.<<: is already set on line 2; merge several maps with one list: <<: [*a, *b]"},
		{"an own key before the merge key", "extra:\n  name: own\n  <<: {name: merged, count: 3}\n",
			"line 2: extra.name: is set before the merge key (<<) on line 3, which sets it too (from line 3): yaml.v2, which envoyproxy/ratelimit uses, takes the merged value, yaml.v3 this one; write the key after the << line"},
		{"an alias inside its own anchor", "extra: &x\n  name: *x\n", "line 2: extra.name: *x refers to the value that holds it (anchored on line 1)"},
		{"a quoted << is a key like any other", "extra:\n  \"<<\": {name: a}\n", `line 2: extra.<<: unknown key "<<"`},
		{"a duplicate key stays refused", "extra:\n  <<: {name: a}\n  count: 1\n  count: 2\n", "line 4: extra.count: is already set on line 3"},
		{"billion laughs", bomb, "aliases expand the document to more than 1048576 values (it is written with"},
		{"merge bomb", mergeBomb, "expand the document to more than 1048576 values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := decode(t, c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
			if err != nil && strings.Count(err.Error(), "alias bomb") > 1 {
				t.Errorf("the bomb is reported more than once: %v", err)
			}
		})
	}
}

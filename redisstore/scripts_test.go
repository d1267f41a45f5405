package redisstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestScriptsContract: one script per algorithm, each with its contract in
// its header, and the shared helpers identical in all of them.
func TestScriptsContract(t *testing.T) {
	all := Scripts()
	if len(all) != len(floodgate.Algorithms()) {
		t.Fatalf("Scripts() has %d entries, want one per algorithm", len(all))
	}
	var common string
	for _, a := range floodgate.Algorithms() {
		name := a.String() + ".lua"
		src, ok := all[name]
		if !ok {
			t.Fatalf("Scripts() lacks %s", name)
		}
		for _, want := range []string{"KEYS[1]", "ARGV[1]", "ARGV[5]", "Reply to \"allow\"", "Reply to \"refund\"", "PEXPIRE"} {
			if !strings.Contains(src, want) {
				t.Errorf("%s: header does not mention %s", name, want)
			}
		}
		start, end := strings.Index(src, "-- BEGIN common"), strings.Index(src, "-- END common")
		if start < 0 || end < start {
			t.Fatalf("%s: no common block", name)
		}
		// Numbers are written with int(): tostring keeps only 14
		// significant digits. The common block uses it in error messages.
		if strings.Contains(src[end:], "tostring(") {
			t.Errorf("%s: tostring used after the common block; format numbers with int()", name)
		}
		block := src[start:end]
		if common == "" {
			common = block
		} else if block != common {
			t.Errorf("%s: the common block differs from the other scripts'; keep them identical", name)
		}
	}
	all["token_bucket.lua"] = "changed"
	if Scripts()["token_bucket.lua"] == "changed" {
		t.Error("Scripts() returned the package's own map")
	}
}

// TestScriptArguments: the scripts reject bad arguments with an error reply
// naming the argument, which the store reports as ErrScript.
func TestScriptArguments(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	key := uniquePrefix(t) + "{=x}:args"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"take", "10", "1000", "1"}, `ARGV[1] must be "allow" or "refund"`},
		{[]string{"allow", "0", "1000", "1"}, "ARGV[2] (quota)"},
		{[]string{"allow", "1.5", "1000", "1"}, "ARGV[2] (quota)"},
		{[]string{"allow", "nan", "1000", "1"}, "ARGV[2] (quota)"},
		{[]string{"allow", "10", "", "1"}, "ARGV[3] (window_us)"},
		{[]string{"allow", "10", "1000", "0"}, "ARGV[4] (cost)"},
		{[]string{"allow", "10", "1000", "11"}, "ARGV[4] (cost) 11 is more than the quota 10"},
		{[]string{"refund", "10", "1000", "1", "-5"}, "ARGV[5] (now_us)"},
		{[]string{"allow", "10", "1000", "1", "99999999999999999"}, "ARGV[5] (now_us)"},
	}
	for name, src := range Scripts() {
		for _, c := range cases {
			err := client.Do(t.Context(), client.B().Eval().Script(src).Numkeys(1).Key(key).Arg(c.args...).Build()).Error()
			// rueidis drops the "ERR " in front of the reply.
			if err == nil || !strings.Contains(err.Error(), "floodgate: "+c.want) {
				t.Errorf("%s %q: error %v, want one containing %q", name, c.args, err, c.want)
			}
			if got := classify(t.Context(), name, err); !errors.Is(got, ErrScript) {
				t.Errorf("%s %q: classified as %v, want ErrScript", name, c.args, got)
			}
		}
	}
	if n, _ := do(t, client, "EXISTS", key).AsInt64(); n != 0 {
		t.Error("a rejected call wrote state")
	}
}

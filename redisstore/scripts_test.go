package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestScriptsContract: one script per algorithm, each whole and
// stand-alone: its contract in its header, then the prelude, verbatim, then
// the algorithm's code; and each replies in the shapes its contract gives.
// Redis computes the SHA1 that the store and floodgate scripts --list use.
func TestScriptsContract(t *testing.T) {
	all := Scripts()
	if len(all) != len(floodgate.Algorithms()) {
		t.Fatalf("Scripts() has %d entries, want one per algorithm", len(all))
	}
	prelude := readScript("prelude.lua")
	if !strings.HasPrefix(prelude, "-- BEGIN prelude") || !strings.HasSuffix(prelude, "-- END prelude\n") {
		t.Fatal("prelude.lua does not start with -- BEGIN prelude and end with -- END prelude")
	}
	client := newClient(t, redistest.StandaloneAddr(t))
	prefix := uniquePrefix(t)
	for _, a := range floodgate.Algorithms() {
		name := a.String() + ".lua"
		src, ok := all[name]
		if !ok {
			t.Fatalf("Scripts() lacks %s", name)
		}
		header, rest, ok := strings.Cut(src, "\n"+prelude+"\n")
		if !ok || strings.Contains(rest, "-- BEGIN prelude") || !strings.HasPrefix(header, "-- floodgate ") {
			t.Fatalf("%s is not its contract, a blank line, the prelude, a blank line and its code", name)
		}
		for _, want := range []string{"KEYS[1]", "ARGV[1]", "ARGV[5]", "Reply to \"allow\"", "Reply to \"refund\"", "PEXPIRE"} {
			if !strings.Contains(header, want) {
				t.Errorf("%s: header does not mention %s", name, want)
			}
		}
		// Numbers are written with int(): tostring keeps only 14
		// significant digits. The prelude uses it in error messages.
		if strings.Contains(rest, "tostring(") {
			t.Errorf("%s: tostring used after the prelude; format numbers with int()", name)
		}
		sum := sha1.Sum([]byte(src))
		if sha, err := do(t, client, "SCRIPT", "LOAD", src).ToString(); err != nil || sha != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SCRIPT LOAD = %q, %v; want the SHA1 of Scripts()'s source, %x", name, sha, err, sum)
		}
		// The replies: "allow" as decode accepts it, admitted then denied;
		// "refund" 1 with state and 0 without.
		key := Key(prefix, "contract", a)
		run := func(op string) rueidis.RedisMessage {
			t.Helper()
			reply, err := client.Do(t.Context(), client.B().Eval().Script(src).Numkeys(1).Key(key).Arg(op, "1", "60000000", "1", "1700000000000000").Build()).ToMessage()
			if err != nil {
				t.Fatalf("%s %s: %v", name, op, err)
			}
			return reply
		}
		limit := floodgate.NewLimit(a, 1, time.Minute)
		for i, want := range []bool{true, false} {
			if d, err := decode(limit, run("allow")); err != nil || d.Allowed != want {
				t.Errorf("%s: allow %d = %+v, %v; want Allowed %v", name, i+1, d, err, want)
			}
		}
		for _, want := range []int64{1, 0} {
			reply := run("refund")
			if n, err := reply.AsInt64(); err != nil || n != want {
				t.Errorf("%s: refund = %d, %v; want %d", name, n, err, want)
			}
			doKey(t, client, "DEL", key)
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

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
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestScriptsContract: one script per algorithm, each whole and
// stand-alone: its contract in its header, then the prelude, verbatim, then
// the algorithm's code; and each replies in the shapes its contract gives.
// The batch script holds every algorithm's code, verbatim. Redis computes
// the SHA1 that the store and floodgate scripts --list use.
func TestScriptsContract(t *testing.T) {
	all := Scripts()
	if len(all) != len(algorithmlist.All())+1 {
		t.Fatalf("Scripts() has %d entries, want one per algorithm and the batch", len(all))
	}
	prelude := readScript("prelude.lua")
	if !strings.HasPrefix(prelude, "-- BEGIN prelude") || !strings.HasSuffix(prelude, "-- END prelude\n") {
		t.Fatal("prelude.lua does not start with -- BEGIN prelude and end with -- END prelude")
	}
	client := newClient(t, redistest.StandaloneAddr(t))
	prefix := uniquePrefix(t)
	for _, a := range algorithmlist.All() {
		name := a.String() + ".lua"
		src, ok := all[name]
		if !ok {
			t.Fatalf("Scripts() lacks %s", name)
		}
		header, rest, ok := strings.Cut(src, "\n"+prelude+"\n")
		if !ok || strings.Contains(rest, "-- BEGIN prelude") || !strings.HasPrefix(header, shebang+"-- floodgate ") {
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
	// The batch: its contract, then each algorithm's prelude and code as a
	// function, then its own code.
	src := all["batch.lua"]
	header, _, _ := strings.Cut(src, "\n\n")
	for _, want := range []string{"KEYS[k]", "ARGV[1]", "ARGV[5k-3]", "ARGV[5k+1]", "Reply:", "PTTL", "maxmemory"} {
		if !strings.Contains(header, want) {
			t.Errorf("batch.lua: header does not mention %s", want)
		}
	}
	for _, a := range algorithmlist.All() {
		fn := "\nlocal function " + a.String() + "(KEYS, ARGV, redis)\n" + prelude + "\n"
		if i := strings.Index(src, fn); i < 0 || !strings.Contains(src[i:], fn[len(prelude):]+scripts[a].code[len(prelude)+1:]+"end\n") {
			t.Errorf("batch.lua does not hold %s's prelude and code as the function %s", a, a)
		}
	}
	if !strings.HasSuffix(src, "\n"+batch.code) || strings.Contains(batch.code, "tostring(") {
		t.Error("batch.lua does not end with its own code, or that code uses tostring")
	}
	sum := sha1.Sum([]byte(src))
	if sha, err := do(t, client, "SCRIPT", "LOAD", src).ToString(); err != nil || sha != hex.EncodeToString(sum[:]) || sha != batch.sha {
		t.Errorf("batch.lua: SCRIPT LOAD = %q, %v; want the SHA1 of Scripts()'s source, %x", sha, err, sum)
	}
	// A bucket of 2 and a window of 1: the bucket fits twice, the window
	// once, and its denial undoes the bucket's second take, so a third
	// batch sees the bucket as the second did.
	keys := []string{Key(prefix, "contract", floodgate.TokenBucket), Key(prefix, "contract", floodgate.FixedWindow)}
	tb, fw := floodgate.NewLimit(floodgate.TokenBucket, 2, time.Minute), floodgate.NewLimit(floodgate.FixedWindow, 1, time.Minute)
	for i, want := range []struct {
		remaining int64
		allowed   bool
	}{{1, true}, {0, false}, {0, false}} {
		reply, err := client.Do(t.Context(), client.B().Eval().Script(src).Numkeys(2).Key(keys...).Arg("1700000000000000", "tb", "2", "60000000", "1", "", "fw", "1", "60000000", "1", "").Build()).ToMessage()
		vals, _ := reply.ToArray()
		if err != nil || len(vals) != 8 {
			t.Fatalf("batch %d = %v, %v; want an array of 2 x 4 entries", i+1, reply, err)
		}
		if d, err := decodeValues(tb, vals[:4], reply); err != nil || !d.Allowed || d.Remaining != want.remaining {
			t.Errorf("batch %d: bucket = %+v, %v; want allowed with %d remaining", i+1, d, err, want.remaining)
		}
		if d, err := decodeValues(fw, vals[4:], reply); err != nil || d.Allowed != want.allowed {
			t.Errorf("batch %d: window = %+v, %v; want allowed %v", i+1, d, err, want.allowed)
		}
	}
	for _, k := range keys {
		doKey(t, client, "DEL", k)
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
		{[]string{"allow", "10", "1000", "-1"}, "ARGV[4] (cost)"},
		{[]string{"allow", "10", "1000", "11"}, "ARGV[4] (cost) 11 is more than the quota 10"},
		{[]string{"refund", "10", "1000", "1", "-5"}, "ARGV[5] (now_us)"},
		{[]string{"allow", "10", "1000", "1", "99999999999999999"}, "ARGV[5] (now_us)"},
	}
	for _, a := range algorithmlist.All() {
		name, src := scripts[a].file, scripts[a].source
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
	// The batch fails as a whole for arguments it cannot split into items,
	// and otherwise answers an item's bad arguments with an error in its
	// place, naming the argument of the batch.
	whole := []struct {
		args []string
		want string
	}{
		{[]string{""}, "1 + 5 arguments per key and an optional deadline, got 1 for 1 keys"},
		{[]string{"", "tb", "10", "1000", "1", "", "x", "y"}, "1 + 5 arguments per key and an optional deadline, got 8 for 1 keys"},
		{[]string{"", "tb", "10", "1000", "1", "", "x"}, `ARGV[7] (deadline_us) must be an integer, got "x"`},
		{[]string{"soon", "tb", "10", "1000", "1", ""}, `ARGV[1] (now_us) must be an integer of at least 0, got "soon"`},
	}
	for _, c := range whole {
		err := client.Do(t.Context(), client.B().Eval().Script(batch.source).Numkeys(1).Key(key).Arg(c.args...).Build()).Error()
		if err == nil || !strings.Contains(err.Error(), "floodgate: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("batch.lua %q: error %v, want one containing %q", c.args, err, c.want)
		}
	}
	items := []struct {
		args []string
		want string
	}{
		{[]string{"swl", "0", "1000", "1", ""}, "ARGV[8] (quota)"},
		{[]string{"tb", "10", "1000", "11", ""}, "ARGV[10] (cost) 11 is more than the quota 10"},
		{[]string{"tb", "10", "1000", "1", "x"}, `ARGV[11] (refill) must be an integer of at least 1, got "x"`},
		{[]string{"leaky", "10", "1000", "1", ""}, `ARGV[7] (algorithm) must be one of "swl", "tb", "swc", "fw", got "leaky"`},
	}
	keys := []string{key + "-tb", key}
	for _, c := range items {
		args := append([]string{"1700000000000000", "tb", "10", "1000", "1", ""}, c.args...)
		reply, err := client.Do(t.Context(), client.B().Eval().Script(batch.source).Numkeys(2).Key(keys...).Arg(args...).Build()).ToMessage()
		vals, _ := reply.ToArray()
		if err != nil || len(vals) != 8 {
			t.Fatalf("batch.lua %q = %v, %v; want an array of 2 x 4 entries", args, reply, err)
		}
		if err := vals[4].Error(); err == nil || !strings.Contains(err.Error(), "floodgate: "+c.want) {
			t.Errorf("batch.lua %q: item 2's error %v, want one containing %q", args, err, c.want)
		}
		if d, err := decodeValues(floodgate.NewLimit(floodgate.TokenBucket, 10, time.Millisecond), vals[:4], reply); err != nil || !d.Allowed {
			t.Errorf("batch.lua %q: item 1 = %+v, %v; want allowed", args, d, err)
		}
	}
	// A bad now in range checks is each item's error.
	reply, err := client.Do(t.Context(), client.B().Eval().Script(batch.source).Numkeys(1).Key(key).Arg("-5", "fw", "10", "1000", "1", "").Build()).ToMessage()
	if vals, _ := reply.ToArray(); err != nil || len(vals) != 4 || vals[0].Error() == nil || !strings.Contains(vals[0].Error().Error(), "ARGV[1] (now_us)") {
		t.Errorf("batch.lua with now -5 = %v, %v; want an item error naming ARGV[1] (now_us)", reply, err)
	}
	if n, _ := do(t, client, "EXISTS", key).AsInt64(); n != 0 {
		t.Error("a rejected call wrote state")
	}
	doKey(t, client, "DEL", keys[0])
}

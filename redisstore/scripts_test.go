package redisstore

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
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
		// Numbers are written with str() ('%.0f'): tostring keeps only 14
		// significant digits. The common block uses it in error messages.
		if strings.Contains(src[end:], "tostring(") {
			t.Errorf("%s: tostring used after the common block; format numbers with str()", name)
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

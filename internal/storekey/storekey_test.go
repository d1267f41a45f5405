package storekey_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/storekey"
)

func TestStoreKey(t *testing.T) {
	long := strings.Repeat("x", storekey.MaxLen+1)
	sum := sha256.Sum256([]byte(long))
	tests := []struct{ ns, rule, key, want string }{
		{"", "login", "user-42", "login|user-42"},
		{"fg:", "a|b", "c", `fg:a\|b|c`},
		{"", `a\`, "|b", `a\\||b`},
		{"", "r#", "k", `r\#|k`},
		{"", "a{b}", "k{tag}", `a\(b\)|k{tag}`},
		{"", "r", strings.Repeat("x", storekey.MaxLen), "r|" + strings.Repeat("x", storekey.MaxLen)},
		{"", "r", long, "r#" + hex.EncodeToString(sum[:])},
		// A rule named "rls" would write Envoy's namespace ("rls|").
		{"", "rls", "edge|remote_address=1.1.1.1", `\rls|edge|remote_address=1.1.1.1`},
		{"", `\rls`, "k", `\\rls|k`},
		{"rls|", "rls", "k", "rls|rls|k"},
	}
	for _, tt := range tests {
		got := storekey.Of(tt.ns, tt.rule, tt.key)
		if got != tt.want {
			t.Errorf("StoreKey(%q, %q, %q) = %q, want %q", tt.ns, tt.rule, tt.key, got, tt.want)
		}
	}
	// Distinct pairs never share a key, whatever bytes they hold.
	parts := []string{"", "a", "rls", `\rls`, "|", `\`, "#", "a|b", `a\|b`, "a#b", "{", "}", "(", `\(`, "{x}", long, "a|" + long}
	seen := map[string][2]string{}
	for _, r := range parts {
		for _, k := range parts {
			got := storekey.Of("", r, k)
			if prev, ok := seen[got]; ok {
				t.Errorf("(%q, %q) and (%q, %q) share key %q", prev[0], prev[1], r, k, got)
			}
			seen[got] = [2]string{r, k}
			if name, _, _ := strings.Cut(got, "|"); strings.ContainsAny(name, "{}") && !strings.ContainsAny(k, "|") {
				t.Errorf("StoreKey(%q, %q) = %q: the rule's part holds a brace", r, k, got)
			}
		}
	}
	// Nor does a key of the empty namespace (the server's) meet one of
	// Envoy's namespace, "rls|", whose domain takes the rule's place.
	for _, domain := range parts {
		for _, k := range parts {
			for _, entry := range []string{k, "remote_address=" + k} {
				envoy := storekey.Of("rls|", domain, entry)
				if prev, ok := seen[envoy]; ok {
					t.Errorf("rule %q key %q shares store key %q with Envoy's domain %q entry %q", prev[0], prev[1], envoy, domain, entry)
				}
			}
		}
	}
}

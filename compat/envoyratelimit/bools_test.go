package envoyratelimit

import (
	"fmt"
	"testing"

	peerconfig "github.com/envoyproxy/ratelimit/src/config"

	"github.com/floodgate-rl/floodgate/envoy"
)

// TestBooleansAsThePeerReadsThem: a rule file's booleans are read as
// envoyproxy/ratelimit's YAML library (yaml.v2) reads them: plain true,
// false and YAML 1.1's y, yes, on, n, no, off (in each case yaml.v2
// knows) are booleans, and a quoted value is refused, "true" as much as
// "yes". The peer's own loader decides each spelling here, in process.
func TestBooleansAsThePeerReadsThem(t *testing.T) {
	spellings := []string{
		"true", "True", "TRUE", "false", "False", "FALSE",
		"y", "Y", "yes", "Yes", "YES", "on", "On", "ON",
		"n", "N", "no", "No", "NO", "off", "Off", "OFF",
		`"true"`, `"false"`, `"yes"`, `"on"`, `'no'`, `"off"`, `'y'`,
		"1", "0", "maybe", "tRUE", "yES", "!!str true", "|\n    true",
	}
	for _, s := range spellings {
		t.Run(s, func(t *testing.T) {
			src := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: %s\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n", s)
			peerOK, peerShadow := peerReads(src)
			rules, err := envoy.Parse(envoy.Source{Name: "f.yaml", Data: []byte(src)})
			ok := err == nil
			if ok != peerOK {
				t.Fatalf("shadow_mode: %s: the peer reads it: %v (shadow %v); floodgate: %v", s, peerOK, peerShadow, err)
			}
			if !ok {
				return
			}
			r := rules.Match("d", []envoy.Entry{{Key: "k"}})
			if r == nil {
				t.Fatal("no rule for k")
			}
			if r.ShadowMode != peerShadow {
				t.Errorf("shadow_mode: %s: floodgate reads %v, the peer %v", s, r.ShadowMode, peerShadow)
			}
		})
	}
}

// peerReads loads src with the peer's loader, which panics on a bad file.
func peerReads(src string) (ok, shadow bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	root := peerconfig.ConfigFileContentToYaml("f.yaml", src)
	return true, root.Descriptors[0].ShadowMode
}

package yamlfield

import (
	"slices"

	"go.yaml.in/yaml/v3"
)

// Bool11 is a boolean as YAML 1.1 reads it, for files written for
// yaml.v2 (envoyproxy/ratelimit's rule files): true or false, or y, yes,
// on, n, no and off (any of them capitalised or in capitals), written
// plainly. A quoted value is refused, "true" as much as "yes", as yaml.v2
// refuses it where it wants a boolean. A bool field takes YAML 1.2's true
// and false only.
type Bool11 bool

// plainScalar reports whether n is written plainly: no quotes, no block
// scalar (| or >), no explicit tag.
func plainScalar(n *yaml.Node) bool {
	return n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle|yaml.TaggedStyle) == 0
}

// yaml11Bools are the plain words YAML 1.1 (yaml.v2, and yaml.v3 decoding
// into a bool) reads as booleans besides true and false.
var yaml11Bools = []string{"y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off", "OFF"}

// boolReason says why the scalar n is not a boolean, and how to write
// one; yaml11 says whether yes, no, on and off would be read.
func boolReason(n *yaml.Node, yaml11 bool) (reason, fix string) {
	switch {
	case n.Kind != yaml.ScalarNode || IsNull(n):
		return notBool, ""
	case !plainScalar(n):
		return "is a quoted string, not a boolean", "write true or false without quotes"
	case !yaml11 && slices.Contains(yaml11Bools, n.Value):
		return notBool, "write true or false (yes, no, on and off are strings in YAML 1.2, which this file is read as)"
	}
	return notBool, ""
}

// isBool reports whether the plain scalar n is YAML 1.2's true or false
// (in any of the three cases YAML allows).
func isBool(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && plainScalar(n) && n.ShortTag() == "!!bool"
}

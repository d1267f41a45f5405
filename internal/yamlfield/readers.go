package yamlfield

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// String returns the scalar n's value as written (numbers and booleans
// too), "" for null, and reports any other node.
func (l *List) String(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		l.Add(TypeError(n, path, "a string"))
		return "", false
	}
	if IsNull(n) {
		return "", true
	}
	return n.Value, true
}

// Bool returns the boolean n, written plainly: true or false, or YAML
// 1.1's y, yes, on, n, no and off (any of them capitalised or in capitals),
// which envoyproxy/ratelimit's YAML library (yaml.v2) reads as booleans
// too. It reports any other node, a quoted string ("true", "yes") among
// them: yaml.v2 refuses a quoted value where it wants a boolean, and so
// does Bool.
func (l *List) Bool(n *yaml.Node, path string) (bool, bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || !plainScalar(n) || n.Decode(&b) != nil {
		e := &Error{Line: n.Line, Path: path, Value: Describe(n)}
		e.Reason, e.Fix = boolReason(n, true)
		l.Add(e)
		return false, false
	}
	return b, true
}

// numberReason returns the reason and fix for err, a wholeNumber error;
// notWhole for one that is not a *numberError.
func numberReason(err error) (reason, fix string) {
	var ne *numberError
	if errors.As(err, &ne) {
		return ne.reason, ne.fix
	}
	return notWhole, ""
}

// Int returns the whole number n, written in decimal digits (10, -3, not
// 010, 0x10 or +10), and reports any other node or number: a caller such
// as decide.ShareOf says what is wrong with its value.
func (l *List) Int(n *yaml.Node, path string) (int64, bool) {
	v, err := wholeNumber(n)
	if err != nil {
		reason, fix := numberReason(err)
		if fix == "" {
			fix = unquoteFix(n, func(n *yaml.Node) error { _, err := wholeNumber(n); return err })
		}
		l.Add(&Error{Line: n.Line, Path: path, Value: Describe(n), Reason: reason, Fix: fix})
		return 0, false
	}
	return v, true
}

// Uint returns the whole number n, between 0 and most and written in
// decimal digits, and reports any other node or number.
func (l *List) Uint(n *yaml.Node, path string, most uint64) (uint64, bool) {
	decode := func(n *yaml.Node) error {
		v, err := wholeNumber(n)
		if err == nil && (v < 0 || uint64(v) > most) {
			return errors.New("out of range")
		}
		return err
	}
	if err := decode(n); err != nil {
		reason, fix := numberReason(err)
		var ne *numberError
		if !errors.As(err, &ne) || strings.HasPrefix(reason, "is too") {
			reason = fmt.Sprintf("%s between 0 and %d", notWhole, most)
		}
		if fix == "" {
			fix = unquoteFix(n, decode)
		}
		l.Add(&Error{Line: n.Line, Path: path, Value: Describe(n), Reason: reason, Fix: fix})
		return 0, false
	}
	v, _ := wholeNumber(n)
	return uint64(v), true
}

// Float returns the number n (0.25, 1, 1e-3, also .inf and .nan: a caller
// such as decide.ShareOf says what is wrong with its value), written
// plainly, and reports any other node, a quoted number among them.
func (l *List) Float(n *yaml.Node, path string) (float64, bool) {
	var v float64
	decode := func(n *yaml.Node) error {
		if tag := n.ShortTag(); tag != "!!float" && tag != "!!int" {
			return errors.New("not a number")
		}
		return n.Decode(&v)
	}
	if n.Kind != yaml.ScalarNode || decode(n) != nil {
		l.Add(&Error{Line: n.Line, Path: path, Value: Describe(n), Reason: "is not a number", Fix: unquoteFix(n, decode)})
		return 0, false
	}
	return v, true
}

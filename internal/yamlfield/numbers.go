package yamlfield

import (
	"errors"
	"fmt"
	"math"

	"go.yaml.in/yaml/v3"
)

// Uint returns the whole number n, between 0 and most, and reports any
// other node or number.
func (l *List) Uint(n *yaml.Node, path string, most uint64) (uint64, bool) {
	var v uint64
	decode := func(n *yaml.Node) error {
		if n.ShortTag() != "!!int" {
			return errors.New("not an integer")
		}
		if err := n.Decode(&v); err != nil {
			return err
		}
		if v > most {
			return errors.New("out of range")
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode || decode(n) != nil {
		l.Add(&Error{Line: n.Line, Path: path, Value: Describe(n), Reason: fmt.Sprintf("%s between 0 and %d", notWhole, most),
			Fix: unquoteFix(n, decode)})
		return 0, false
	}
	return v, true
}

// Float returns the number n (0.25, 1, 1e-3), written plainly, and
// reports any other node, a quoted number among them, and NaN or an
// infinity.
func (l *List) Float(n *yaml.Node, path string) (float64, bool) {
	var v float64
	decode := func(n *yaml.Node) error {
		if tag := n.ShortTag(); tag != "!!float" && tag != "!!int" {
			return errors.New("not a number")
		}
		if err := n.Decode(&v); err != nil {
			return err
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("not finite")
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode || decode(n) != nil {
		l.Add(&Error{Line: n.Line, Path: path, Value: Describe(n), Reason: "is not a number", Fix: unquoteFix(n, decode)})
		return 0, false
	}
	return v, true
}

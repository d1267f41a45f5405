package yamlfield

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// numberError is a whole number that is written, but not so that it can be
// read as one: in another form than decimal digits, or out of range. Its
// reason and fix are the Error's.
type numberError struct{ reason, fix string }

func (e *numberError) Error() string { return e.reason }

// wholeNumber returns the plain scalar n as a whole number written in
// decimal digits, with an optional minus sign: 0, 10, -3. yaml reads the
// other forms of YAML 1.1 and 1.2 integers too (010 and 0o10 as 8, 0x10 as
// 16, 0b10 as 2, +5, 1_000), so that instances: 010 would mean 8; they are
// a *numberError saying what yaml would have read, and so is a number too
// large for an int64. Any other node is a plain error.
func wholeNumber(n *yaml.Node) (int64, error) {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		return 0, errors.New("not a plain scalar")
	}
	s := n.Value
	if decimalDigits(strings.TrimPrefix(s, "-")) {
		v, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err == nil:
			return v, nil
		case strings.HasPrefix(s, "-"):
			return 0, &numberError{reason: "is too small"}
		}
		return 0, &numberError{reason: "is too large"}
	}
	if n.ShortTag() != "!!int" {
		return 0, errors.New("not an integer")
	}
	var read int64
	if err := n.Decode(&read); err != nil {
		return 0, &numberError{reason: "is too large"}
	}
	e := &numberError{reason: fmt.Sprintf("must be written in decimal digits, without a leading 0, + or _ (YAML reads %s as %d)", s, read)}
	if plain := strings.TrimLeft(strings.NewReplacer("_", "", "+", "").Replace(s), "0"); decimalDigits(plain) && plain != strconv.FormatInt(read, 10) {
		e.fix = fmt.Sprintf("write %s, or %d if you mean what YAML reads", plain, read)
	} else {
		e.fix = fmt.Sprintf("write %d", read)
	}
	return read, e
}

// decimalDigits reports whether s is "0" or decimal digits not beginning
// with 0.
func decimalDigits(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
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
// as rulecheck.ShareOf says what is wrong with its value.
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
// such as rulecheck.ShareOf says what is wrong with its value), written
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

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

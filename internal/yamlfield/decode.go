package yamlfield

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Decode decodes the document or node n into v, a pointer to a struct,
// strictly, once [List.Expand] has resolved its aliases and merge keys
// (in n itself): a key that names no field (by its yaml tag) or appears
// twice is an error, and so is a value of the wrong shape. Structs and
// slices are walked, so each error names its path; other values decode
// with yaml.Node.Decode (durations, numbers, encoding.TextUnmarshaler
// types). A key written empty (~) keeps the zero value, unless its tag
// says notnull (`yaml:"limit,notnull"`). Decode reports every error it
// finds, each an *Error, joined with errors.Join, and returns the line of
// every path it met.
//
// Dialects other than floodgate's own use the types [Bool11] (YAML 1.1's
// booleans), [Scalar] (a value kept with its text and line) and [Named]
// (a list named in errors).
func Decode(n *yaml.Node, v any) (Lines, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil, fmt.Errorf("yamlfield: Decode needs a non-nil pointer, not %T", v)
	}
	d := &decoder{lines: Lines{}}
	if !d.errs.Expand(n) {
		return d.lines, d.errs.Err()
	}
	if n.Kind == yaml.DocumentNode {
		d.lines[""] = n.Line
		if len(n.Content) == 0 {
			return d.lines, nil
		}
		n = n.Content[0]
	}
	d.value(n, "", rv.Elem())
	return d.lines, d.errs.Err()
}

// Scalar is a value that Decode decodes as it would a T, kept with how
// and where it is written: for checks that quote a value as written
// (.inf, -0.0), tell a key written empty (~) from one left out, or report
// on the value's own line, which for an alias is its anchor's.
type Scalar[T any] struct {
	Value T
	Text  string // as written: "" when left out or written with nothing
	Line  int    // where the value is written; 0 when left out
	Set   bool   // the key is written, even empty
}

// note records how the node n writes s and returns s.Value to decode into.
func (s *Scalar[T]) note(n *yaml.Node) reflect.Value {
	s.Text, s.Line, s.Set = n.Value, n.Line, true
	return reflect.ValueOf(&s.Value).Elem()
}

// noter is a *Scalar of any T.
type noter interface {
	note(*yaml.Node) reflect.Value
}

// Named is implemented by a list type that its errors name by Name: "a
// mapping is not a list of descriptors" rather than "... not a list".
type Named interface{ Name() string }

type decoder struct {
	lines Lines
	errs  List
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	bool11Type    = reflect.TypeFor[Bool11]()
	noterType     = reflect.TypeFor[noter]()
	namedType     = reflect.TypeFor[Named]()
	unmarshalText = reflect.TypeFor[encoding.TextUnmarshaler]()
	unmarshalYAML = reflect.TypeFor[yaml.Unmarshaler]()
)

// walked reports whether Decode walks values of type t itself.
func walked(t reflect.Type) bool {
	if unmarshals(t) {
		return false
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8
}

// unmarshals reports whether a *t decodes itself (UnmarshalText or
// UnmarshalYAML).
func unmarshals(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(unmarshalText) || p.Implements(unmarshalYAML)
}

func (d *decoder) value(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if _, ok := d.lines[path]; !ok {
		d.lines[path] = n.Line
	}
	if v.CanAddr() && v.Addr().Type().Implements(noterType) {
		v = v.Addr().Interface().(noter).note(n)
	}
	if IsNull(n) {
		return // an empty value keeps the zero value
	}
	switch {
	case v.Kind() == reflect.Pointer && walked(v.Type().Elem()):
		// An optional section: present, it is walked as its value would be.
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, path, v.Elem())
	case base(v.Type()).Kind() == reflect.Bool:
		d.boolean(n, path, v)
	case !walked(v.Type()):
		d.scalar(n, path, v)
	case v.Kind() == reflect.Slice:
		d.list(n, path, v)
	default:
		d.mapping(n, path, v)
	}
}

// boolean decodes the boolean n: YAML 1.2's true and false, written
// plainly, or for a Bool11 YAML 1.1's words too. A quoted "true" is a
// string, and so are yes, no, on and off for a bool (yaml.v3 would read
// them, also quoted).
func (d *decoder) boolean(n *yaml.Node, path string, v reflect.Value) {
	yaml11 := base(v.Type()) == bool11Type
	ok := isBool(n)
	if yaml11 {
		var b bool
		ok = n.Kind == yaml.ScalarNode && plainScalar(n) && n.Decode(&b) == nil
	}
	if ok && decodeScalar(n, v) == nil {
		return
	}
	e := &Error{Line: n.Line, Path: path, Value: Describe(n)}
	e.Reason, e.Fix = boolReason(n, yaml11)
	d.errs.Add(e)
}

// scalar decodes the scalar n into v, which Decode does not walk.
func (d *decoder) scalar(n *yaml.Node, path string, v reflect.Value) {
	err := decodeScalar(n, v)
	if err == nil {
		return
	}
	decode := func(n *yaml.Node) error { return decodeScalar(n, reflect.New(v.Type()).Elem()) }
	e := &Error{Line: n.Line, Path: path, Value: Describe(n), Reason: reason(v.Type(), err), Fix: unquoteFix(n, decode)}
	// A number written in another form says so; one too large for an
	// int64 is out of a sized integer's range too.
	var ne *numberError
	switch {
	case !errors.As(err, &ne):
	case intRange(v.Type()) != "" && strings.HasPrefix(ne.reason, "is too"):
		e.Reason = notWhole + intRange(v.Type())
	default:
		e.Reason, e.Fix = ne.reason, ne.fix
	}
	if e.Fix == "" && v.Type() == durationType {
		if fix := DurationFix(n); fix != "" {
			e.Reason, e.Fix = "is not a duration", fix
		}
	}
	d.errs.Add(e)
}

// list decodes the list n into the slice v.
func (d *decoder) list(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		want := "a list"
		if v.Type().Implements(namedType) {
			want = v.Interface().(Named).Name()
		}
		d.errs.Add(TypeError(n, path, want))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.value(item, Index(path, i), s.Index(i))
	}
	v.Set(s)
}

// mapping decodes the mapping n into the struct v.
func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	names, fields := fieldsOf(v.Type())
	for _, e := range d.errs.Mapping(n, path, names...) {
		d.lines[e.Path] = e.Key.Line
		f := fields[e.Key.Value]
		if f.notNull && IsNull(resolved(e.Value)) {
			d.errs.Add(&Error{Line: e.Value.Line, Path: e.Path, Value: Describe(e.Value), Reason: reason(v.Field(f.index).Type(), errNull)})
			continue
		}
		d.value(e.Value, e.Path, v.Field(f.index))
	}
}

// resolved is n, or for an alias the value it names.
func resolved(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// Reasons Decode gives.
const (
	notBool     = "is not true or false"
	notWhole    = "is not a whole number"
	notDuration = "is not a duration such as 500ms, 1m or 1h"
)

// unquoteFix returns a Fix for a quoted scalar that decode rejects but
// would accept written plainly, such as "5" for a number; "" otherwise.
func unquoteFix(n *yaml.Node, decode func(*yaml.Node) error) string {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		return ""
	}
	plain := *n
	plain.Style, plain.Tag = 0, ""
	if plain.ShortTag() == "!!str" || decode(&plain) != nil {
		return ""
	}
	return "write it without quotes"
}

// errNotWhole is a number with a fraction (or an exponent) where a whole
// number is wanted: yaml would truncate 3.5 to 3 without a word.
var errNotWhole = &yaml.TypeError{Errors: []string{"not a whole number"}}

// errNull is a key written empty whose tag says notnull.
var errNull = &yaml.TypeError{Errors: []string{"written empty"}}

// decodeScalar decodes n into v as yaml does, but for integers, which must
// be written as integers in decimal digits: 3.5 and 1e3 are errors, not 3
// and 1000, and so are 010 and 0x10, not 8 and 16 (a *numberError). v
// may be a pointer to one.
func decodeScalar(n *yaml.Node, v reflect.Value) error {
	t := base(v.Type())
	if k := t.Kind(); k >= reflect.Int && k <= reflect.Uint64 && t != durationType && n.Kind == yaml.ScalarNode {
		if _, err := wholeNumber(n); err != nil {
			if errors.As(err, new(*numberError)) {
				return err
			}
			if n.ShortTag() == "!!float" {
				return errNotWhole
			}
		}
	}
	return n.Decode(v.Addr().Interface())
}

// DurationFix returns the Fix for a scalar that is not a duration but
// looks like one in other terms: a bare number ("60": "write a duration
// such as 60s or 1m") or days and weeks, which durations lack ("1d":
// "write 24h"); "" otherwise.
func DurationFix(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return ""
	}
	v := strings.TrimSpace(n.Value)
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if f == float64(int64(f)) && int64(f)%60 == 0 {
			return fmt.Sprintf("write a duration such as %ss or %dm", s, int64(f)/60)
		}
		return fmt.Sprintf("write a duration such as %ss or %sms", s, strconv.FormatFloat(f*1000, 'f', -1, 64))
	}
	for _, u := range []struct {
		suffix string
		hours  float64
		name   string
	}{{"d", 24, "days"}, {"w", 24 * 7, "weeks"}} {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(num, 64); err == nil && f > 0 {
			return fmt.Sprintf("write %sh (a duration has no unit for %s)", strconv.FormatFloat(f*u.hours, 'f', -1, 64), u.name)
		}
	}
	return ""
}

// base is t without its pointers and Scalar wrappers: bool for *bool,
// float64 for Scalar[float64].
func base(t reflect.Type) reflect.Type {
	for {
		switch {
		case t.Kind() == reflect.Pointer:
			t = t.Elem()
		case t.Kind() == reflect.Struct && reflect.PointerTo(t).Implements(noterType):
			t = t.Field(0).Type
		default:
			return t
		}
	}
}

// reason says why a value did not decode into a t (or a pointer to one).
func reason(t reflect.Type, err error) string {
	t = base(t)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return "is invalid: " + strings.TrimPrefix(err.Error(), "yaml: ")
	}
	switch {
	case t == durationType:
		return notDuration
	case t.Kind() == reflect.Bool:
		return notBool
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return notWhole + intRange(t)
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "is not a number"
	case t.Kind() == reflect.String:
		return "is not a string"
	case t.Kind() == reflect.Map:
		return "is not a mapping"
	}
	return "cannot be read as " + t.String()
}

// intRange returns " between min and max" for a sized integer type,
// narrower than an int64 or unsigned, that does not decode itself; ""
// otherwise.
func intRange(t reflect.Type) string {
	t = base(t)
	k := t.Kind()
	if k < reflect.Int || k > reflect.Uint64 || unmarshals(t) {
		return ""
	}
	bits := t.Bits()
	switch {
	case k >= reflect.Uint:
		return fmt.Sprintf(" between 0 and %d", uint64(math.MaxUint64)>>(64-bits))
	case bits < 64:
		return fmt.Sprintf(" between %d and %d", -int64(1)<<(bits-1), int64(1)<<(bits-1)-1)
	}
	return ""
}

// field is one key of a struct: its field's index, and whether its tag
// says notnull.
type field struct {
	index   int
	notNull bool
}

// fieldsOf returns a struct's YAML keys in field order, and their fields:
// the yaml tag's name, or the field's name in lower case; "-" and
// unexported fields are left out.
func fieldsOf(t reflect.Type) ([]string, map[string]field) {
	names := make([]string, 0, t.NumField())
	fields := make(map[string]field, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		names = append(names, name)
		fields[name] = field{index: i, notNull: strings.Contains(","+opts+",", ",notnull,")}
	}
	return names, fields
}

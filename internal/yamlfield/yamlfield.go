// Package yamlfield decodes YAML into Go structs strictly, with errors that
// name the field's path, its line and its value, and a fix where one is
// obvious:
//
//	line 5: rules[0].window: "soon" is not a duration such as 500ms, 1m or 1h
//	line 3: store.timout: unknown key "timout"; did you mean "timeout"?
//	rules/edge.yaml:4: descriptors[0].shadow_mode: "maybe" is not true or false
//
// It serves every YAML dialect floodgate reads. [Parse] reads a document,
// turning the parser's complaints into Errors with the line and a hint.
// [Decode] walks a struct's yaml tags; a hand-written parser over yaml.Node
// collects its errors in a [List], whose readers ([List.Mapping],
// [List.String], [List.Bool], [List.Uint]) check a node and report what is
// wrong with it, and builds its own with [TypeError], [Describe] and
// [DidYouMean]. Anchors, aliases and merge keys ("<<") are resolved first
// by [List.Expand], which Decode calls and a hand-written parser calls
// itself.
package yamlfield

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is a bad value in a YAML document.
type Error struct {
	File   string // the document's name, such as rules/edge.yaml; empty: not shown
	Line   int    // 1-based; 0 when unknown
	Path   string // such as rules[1].window
	Value  string // the value as written, or formatted; empty: none shown
	Reason string // such as "must be at least 1ms"
	Fix    string // a suggested fix, if one is obvious
}

// Error implements error: "file:line: path: value reason; fix", or
// "line N: path: value reason; fix" without a File, leaving out what is
// empty.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "":
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	case e.Line > 0:
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Value != "" {
		b.WriteString(e.Value)
		b.WriteByte(' ')
	}
	b.WriteString(e.Reason)
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// TypeError returns the Error of node n at path not being want, such as
// "a mapping" or "a list of descriptors": the value shows what n is (see
// [Describe]).
func TypeError(n *yaml.Node, path, want string) *Error {
	return &Error{Line: n.Line, Path: path, Value: Describe(n), Reason: "is not " + want}
}

// Describe names what n is, for messages such as "a list is not a
// mapping": "a mapping", "a list", "an alias", "nothing" (null), or a
// scalar's value quoted, so that a scalar cannot pass for one of the
// others.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if IsNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an empty document"
}

// IsNull reports whether n is a null scalar: ~, null, or no value at all.
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// Join returns the path of key under path: "store.timeout", or "timeout"
// at the top.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index returns the path of item i of the list at path: "rules[1]".
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// DidYouMean returns the Fix for value, which is none of known: "did you
// mean "x"?" naming the known value it is most likely a typo of (the same
// but for case, or at most two edits away), or "" if none is that close.
func DidYouMean(value string, known []string) string {
	if s := suggest(value, known); s != "" {
		return fmt.Sprintf("did you mean %q?", s)
	}
	return ""
}

// Reasons that Decode and the scalar readers of [List] share.
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

// List collects the Errors found in one document, for a parser that walks
// yaml.Nodes itself: the readers below report to it, and Err returns them
// all.
type List struct {
	// File names the document in every Error added without one.
	File string
	// Max bounds the errors kept, so that a broken file is not reported
	// line by line; 0 keeps every error.
	Max  int
	errs []error
}

// Add records each error that is not nil, setting its File if it has none.
func (l *List) Add(errs ...*Error) {
	for _, e := range errs {
		if e == nil || l.Max > 0 && len(l.errs) >= l.Max {
			continue
		}
		if e.File == "" {
			e.File = l.File
		}
		l.errs = append(l.errs, e)
	}
}

// Report adds an Error at line about the value at path.
func (l *List) Report(line int, path, value, reason string) {
	l.Add(&Error{Line: line, Path: path, Value: value, Reason: reason})
}

// Len returns the number of errors recorded.
func (l *List) Len() int { return len(l.errs) }

// Err returns the errors recorded, joined with errors.Join; nil if none.
func (l *List) Err() error { return errors.Join(l.errs...) }

// Entry is one key and value of a mapping.
type Entry struct {
	Key, Value *yaml.Node
	Path       string // the key's path: Join(the mapping's path, key)
}

// Mapping returns the entries of the mapping n at path, in order, whose
// keys are among known. It reports n not being a mapping, each key outside
// known (with the known key it is most likely a typo of, or else the list
// of known keys) and each key set twice.
func (l *List) Mapping(n *yaml.Node, path string, known ...string) []Entry {
	if n.Kind != yaml.MappingNode {
		l.Add(TypeError(n, path, "a mapping"))
		return nil
	}
	seen := map[string]int{}
	out := make([]Entry, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := Join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			l.Add(&Error{Line: k.Line, Path: p, Reason: fmt.Sprintf("is already set on line %d", line), Fix: "keep one of the two"})
			continue
		}
		seen[k.Value] = k.Line
		if !slices.Contains(known, k.Value) {
			e := &Error{Line: k.Line, Path: p, Reason: fmt.Sprintf("unknown key %q", k.Value), Fix: DidYouMean(k.Value, known)}
			if e.Fix == "" && len(known) > 0 {
				e.Fix = "known keys here: " + strings.Join(known, ", ")
			}
			l.Add(e)
			continue
		}
		out = append(out, Entry{Key: k, Value: v, Path: p})
	}
	return out
}

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
// 1.1's y, yes, on, n, no and off (in any case), which
// envoyproxy/ratelimit's yaml.v2 reads as booleans too. It reports any
// other node, quoted strings ("true") included, as yaml.v2 does.
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

// Lines holds the line of every path a Decode met: "store.timeout",
// "rules[1]", "store.addrs[0]"; "" is the document.
type Lines map[string]int

// Line returns the line of path or, when the path was not in the document
// (a key left out), of its nearest enclosing path; 0 if none.
func (l Lines) Line(path string) int {
	for {
		if n, ok := l[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return l[""]
		}
		path = path[:i]
	}
}

// Error returns an Error at path's line.
func (l Lines) Error(path, value, reason string) *Error {
	return &Error{Line: l.Line(path), Path: path, Value: value, Reason: reason}
}

// Decode decodes the document or node n into v, a pointer to a struct,
// strictly, once [List.Expand] has resolved its aliases and merge keys (in
// n itself): a key that names no field (by its yaml tag) or appears twice
// is an error, and so is a value of the wrong shape. Structs and slices
// are walked, so each error names its path; other values decode with
// yaml.Node.Decode. Decode reports every error it finds, each an *Error,
// joined with errors.Join, and returns the line of every path it met.
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

type decoder struct {
	lines Lines
	errs  List
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	unmarshalText = reflect.TypeFor[encoding.TextUnmarshaler]()
	unmarshalYAML = reflect.TypeFor[yaml.Unmarshaler]()
)

// walked reports whether Decode walks values of type t itself.
func walked(t reflect.Type) bool {
	if p := reflect.PointerTo(t); p.Implements(unmarshalText) || p.Implements(unmarshalYAML) {
		return false
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8
}

func (d *decoder) value(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if _, ok := d.lines[path]; !ok {
		d.lines[path] = n.Line
	}
	if IsNull(n) {
		return // an empty value keeps the zero value
	}
	if v.Kind() == reflect.Pointer && walked(v.Type().Elem()) {
		// An optional section: present, it is walked as its value would be.
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, path, v.Elem())
		return
	}
	if !walked(v.Type()) {
		if base(v.Type()).Kind() == reflect.Bool && !isBool(n) {
			// Strictly YAML 1.2's booleans: neither a quoted "true" nor
			// yaml.v3's YAML 1.1 words (yes, no, on, off, also quoted).
			e := &Error{Line: n.Line, Path: path, Value: Describe(n)}
			e.Reason, e.Fix = boolReason(n, false)
			d.errs.Add(e)
			return
		}
		decode := func(n *yaml.Node) error { return decodeScalar(n, reflect.New(v.Type()).Elem()) }
		if err := decodeScalar(n, v); err != nil {
			e := &Error{Line: n.Line, Path: path, Value: Describe(n), Reason: reason(v.Type(), err), Fix: unquoteFix(n, decode)}
			if ne := (*numberError)(nil); errors.As(err, &ne) {
				e.Reason, e.Fix = ne.reason, ne.fix
			}
			if e.Fix == "" && v.Type() == durationType {
				if fix := DurationFix(n); fix != "" {
					e.Reason, e.Fix = "is not a duration", fix
				}
			}
			d.errs.Add(e)
		}
		return
	}
	if v.Kind() == reflect.Slice {
		if n.Kind != yaml.SequenceNode {
			d.errs.Add(TypeError(n, path, "a list"))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(item, Index(path, i), s.Index(i))
		}
		v.Set(s)
		return
	}
	names, index := fieldsOf(v.Type())
	for _, e := range d.errs.Mapping(n, path, names...) {
		d.lines[e.Path] = e.Key.Line
		d.value(e.Value, e.Path, v.Field(index[e.Key.Value]))
	}
}

// errNotWhole is a number with a fraction (or an exponent) where a whole
// number is wanted: yaml would truncate 3.5 to 3 without a word.
var errNotWhole = &yaml.TypeError{Errors: []string{"not a whole number"}}

// decodeScalar decodes n into v as yaml does, but for integers, which must
// be written as integers in decimal digits: 3.5 and 1e3 are errors, not 3
// and 1000, and so are 010 and 0x10, not 8 and 16 (a *numberError).
func decodeScalar(n *yaml.Node, v reflect.Value) error {
	if k := v.Kind(); k >= reflect.Int && k <= reflect.Uint64 && v.Type() != durationType && n.Kind == yaml.ScalarNode {
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

// base is t without its pointers: bool for *bool.
func base(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
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
		return notWhole
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "is not a number"
	case t.Kind() == reflect.String:
		return "is not a string"
	case t.Kind() == reflect.Map:
		return "is not a mapping"
	}
	return "cannot be read as " + t.String()
}

// fieldsOf returns a struct's YAML keys in field order, and their field
// indexes: the yaml tag's name, or the field's name in lower case; "-" and
// unexported fields are left out.
func fieldsOf(t reflect.Type) ([]string, map[string]int) {
	names := make([]string, 0, t.NumField())
	index := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		names = append(names, name)
		index[name] = i
	}
	return names, index
}

// suggest returns the known key closest to key, if it is close enough to
// be a typo: the same but for case, or at most two edits away.
func suggest(key string, known []string) string {
	best, bestDist := "", 3
	for _, name := range known {
		if strings.EqualFold(name, key) {
			return name
		}
		if d := distance(key, name); d < bestDist || d == bestDist && name < best {
			best, bestDist = name, d
		}
	}
	if bestDist > 2 || bestDist >= len(key) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Package yamlfield decodes YAML into Go structs strictly, with errors that
// name the field's path, its line and its value, and a fix where one is
// obvious:
//
//	line 5: rules[0].window: soon is not a duration such as 500ms or 1m
//	line 3: store.timout: unknown key "timout"; did you mean "timeout"?
//
// It serves every YAML dialect floodgate reads. [Decode] walks a struct's
// yaml tags; a hand-written parser over yaml.Node uses [At], [Describe] and
// [Error] directly.
//
// It is a helper room: it imports yaml only.
package yamlfield

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is a bad value in a YAML document.
type Error struct {
	Line   int    // 1-based; 0 when unknown
	Path   string // such as rules[1].window
	Value  string // the value as written, or formatted; empty: none shown
	Reason string // such as "must be at least 1ms"
	Fix    string // a suggested fix, if one is obvious
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
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

// At returns an Error about node n at path: its line, and its value if it
// is a scalar.
func At(n *yaml.Node, path, reason string) *Error {
	e := &Error{Line: n.Line, Path: path, Reason: reason}
	if n.Kind == yaml.ScalarNode {
		e.Value = n.Value
	}
	return e
}

// Describe names what n is, for messages such as "want a mapping, got a
// list": "a mapping", "a list", "nothing", or a scalar's value quoted.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an empty document"
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
// strictly: a key that names no field (by its yaml tag) or appears twice is
// an error, and so is a value of the wrong shape. Structs and slices are
// walked, so each error names its path; other values decode with
// yaml.Node.Decode (durations, numbers, encoding.TextUnmarshaler types).
// Decode reports every error it finds, each an *Error, joined with
// errors.Join, and returns the line of every path it met.
func Decode(n *yaml.Node, v any) (Lines, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil, fmt.Errorf("yamlfield: Decode needs a non-nil pointer, not %T", v)
	}
	d := &decoder{lines: Lines{}}
	if n.Kind == yaml.DocumentNode {
		d.lines[""] = n.Line
		if len(n.Content) == 0 {
			return d.lines, nil
		}
		n = n.Content[0]
	}
	d.value(n, "", rv.Elem())
	return d.lines, errors.Join(d.errs...)
}

type decoder struct {
	lines Lines
	errs  []error
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
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value keeps the zero value
	}
	if !walked(v.Type()) {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.errs = append(d.errs, &Error{Line: n.Line, Path: path, Value: valueOf(n), Reason: reason(v.Type(), err)})
		}
		return
	}
	if v.Kind() == reflect.Slice {
		if n.Kind != yaml.SequenceNode {
			d.errs = append(d.errs, &Error{Line: n.Line, Path: path, Value: Describe(n), Reason: "is not a list"})
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(item, fmt.Sprintf("%s[%d]", path, i), s.Index(i))
		}
		v.Set(s)
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errs = append(d.errs, &Error{Line: n.Line, Path: path, Value: Describe(n), Reason: "is not a mapping"})
		return
	}
	fields := fieldsOf(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.errs = append(d.errs, &Error{Line: k.Line, Path: p, Reason: fmt.Sprintf("is already set on line %d", line), Fix: "keep one of the two"})
			continue
		}
		seen[k.Value] = k.Line
		idx, ok := fields[k.Value]
		if !ok {
			e := &Error{Line: k.Line, Path: p, Reason: fmt.Sprintf("unknown key %q", k.Value)}
			if s := suggest(k.Value, fields); s != "" {
				e.Fix = fmt.Sprintf("did you mean %q?", s)
			}
			d.errs = append(d.errs, e)
			continue
		}
		d.lines[p] = k.Line
		d.value(val, p, v.Field(idx))
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// valueOf is the value an error shows for n.
func valueOf(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.Value == "" {
			return `""`
		}
		return n.Value
	}
	return Describe(n)
}

// reason says why a value did not decode into a t.
func reason(t reflect.Type, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return "is invalid: " + strings.TrimPrefix(err.Error(), "yaml: ")
	}
	switch {
	case t == durationType:
		return "is not a duration such as 500ms, 1m or 1h"
	case t.Kind() == reflect.Bool:
		return "is not true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "is not a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "is not a number"
	case t.Kind() == reflect.String:
		return "is not a string"
	case t.Kind() == reflect.Map:
		return "is not a mapping"
	}
	return "cannot be read as " + t.String()
}

// fieldsOf maps a struct's YAML keys to its field indexes: the yaml tag's
// name, or the field's name in lower case; "-" and unexported fields are
// left out.
func fieldsOf(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
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
		m[name] = i
	}
	return m
}

// suggest returns the known key closest to key, if it is close enough to
// be a typo: the same but for case, or at most two edits away.
func suggest(key string, fields map[string]int) string {
	best, bestDist := "", 3
	for name := range fields {
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

// Package yamlfield decodes YAML into Go structs strictly, with errors that
// name the field's path, its line and its value, and a fix where one is
// obvious:
//
//	line 5: rules[0].window: "soon" is not a duration such as 500ms, 1m or 1h
//	line 3: store.timout: unknown key "timout"; did you mean "timeout"?
//	rules/edge.yaml:4: descriptors[0].shadow_mode: "maybe" is not true or false
//
// It serves every YAML dialect floodgate reads: its own configuration and
// envoyproxy/ratelimit's rule files. [Parse] reads a document, turning the
// parser's complaints into Errors with the line and a hint. [Decode] walks
// a struct's yaml tags, resolving anchors, aliases and merge keys ("<<")
// first ([List.Expand]), and returns the [Lines] of what it met, so that
// the checks of the typed values that follow report where each is
// written; they build their errors with [Lines.Error], [TypeError],
// [Describe] and [DidYouMean], and may collect them in a [List].
package yamlfield

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

// List collects the Errors found in one document: Decode's, and those of
// the checks that follow it. Err returns them all.
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

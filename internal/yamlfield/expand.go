package yamlfield

import (
	"errors"
	"fmt"
	"io"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// maxExpanded bounds the values (nodes) a document may hold once its
// aliases are expanded, unless it is written out larger than half that:
// a few lines of nested aliases ("billion laughs") would otherwise expand
// to billions of values.
const maxExpanded = 1 << 20

// Expand resolves the aliases and merge keys of the document or node n in
// place, as yaml.v2 and yaml.v3 do when they decode into Go values, and
// reports what it cannot resolve; it returns whether n is free of both.
// An alias becomes the (shared) node its anchor names; a merge key ("<<")
// is replaced by the merged keys, the mapping's own winning, then earlier
// maps of a merged list. Merged and aliased values keep their own lines.
//
// Reported are: an alias that refers to the value holding it, a merge
// value that is not a mapping or a list of them, a second merge key in one
// mapping, a key set before "<<" that a merged map sets too (yaml.v2 and
// yaml.v3 read it differently), and a document whose aliases expand it
// past maxExpanded values (or twice its written size when larger).
func (l *List) Expand(n *yaml.Node) bool {
	before := len(l.errs)
	x := &expander{errs: l, done: map[*yaml.Node]int{}, active: map[*yaml.Node]bool{}}
	x.limit = max(maxExpanded, 2*written(n))
	x.node(n, "")
	return len(l.errs) == before && !x.stop
}

// expander is one Expand.
type expander struct {
	errs   *List
	limit  int                // the most values the expanded document may hold
	done   map[*yaml.Node]int // resolved nodes and their expanded sizes
	active map[*yaml.Node]bool
	stop   bool // a fatal error was reported: a cycle or a bomb
}

// written counts the nodes of n as written, each alias as one.
func written(n *yaml.Node) int {
	c := 1
	if n.Kind != yaml.AliasNode {
		for _, k := range n.Content {
			c += written(k)
		}
	}
	return c
}

// node resolves n at path and returns the node to use in its place and
// its expanded size (at most limit+1).
func (x *expander) node(n *yaml.Node, path string) (*yaml.Node, int) {
	if x.stop {
		return n, 1
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			x.fatal(&Error{Line: n.Line, Path: path, Value: "*" + n.Value, Reason: "is an alias of no anchor"})
			return n, 1
		}
		if x.active[n.Alias] {
			x.fatal(&Error{Line: n.Line, Path: path, Value: "*" + n.Value, Reason: fmt.Sprintf("refers to the value that holds it (anchored on line %d)", n.Alias.Line),
				Fix: "an alias can only repeat a value written before it, outside it"})
			return n, 1
		}
		return x.node(n.Alias, path)
	}
	if size, ok := x.done[n]; ok {
		return n, size
	}
	x.active[n] = true
	defer delete(x.active, n)
	size := 1
	for i, c := range n.Content {
		p := path
		switch n.Kind {
		case yaml.SequenceNode:
			p = Index(path, i)
		case yaml.MappingNode:
			if i%2 == 1 {
				p = Join(path, n.Content[i-1].Value)
			}
		}
		r, s := x.node(c, p)
		n.Content[i] = r
		size += s
		if size > x.limit && !x.stop {
			x.fatal(&Error{Line: c.Line, Path: p, Reason: fmt.Sprintf("aliases expand the document to more than %s values (it is written with %s): an alias bomb?",
				strconv.Itoa(x.limit), strconv.Itoa(written(n))), Fix: "write the values out, or repeat them with fewer aliases"})
		}
		if x.stop {
			return n, x.limit + 1
		}
	}
	if n.Kind == yaml.MappingNode {
		if size = x.merge(n, path, size); size > x.limit {
			x.fatal(&Error{Line: n.Line, Path: path, Reason: fmt.Sprintf("merge keys (<<) expand the document to more than %s values: an alias bomb?", strconv.Itoa(x.limit)),
				Fix: "write the values out, or merge fewer times"})
		}
	}
	size = min(size, x.limit+1)
	x.done[n] = size
	return n, size
}

func (x *expander) fatal(e *Error) {
	x.errs.Add(e)
	x.stop = true
}

// isMerge reports whether k is a merge key: "<<" written plainly (quoted,
// it is a string).
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// merge replaces the merge key of the resolved mapping m, whose expanded
// size is size, by the keys it merges, and returns m's new size.
func (x *expander) merge(m *yaml.Node, path string, size int) int {
	at := -1 // the index of the merge key
	own := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		switch {
		case isMerge(k) && at >= 0:
			x.errs.Add(&Error{Line: k.Line, Path: Join(path, "<<"), Reason: fmt.Sprintf("is already set on line %d", m.Content[at].Line),
				Fix: "merge several maps with one list: <<: [*a, *b]"})
		case isMerge(k):
			at = i
		case k.Kind == yaml.ScalarNode:
			if _, dup := own[k.Value]; !dup {
				own[k.Value] = i
			}
		}
	}
	if at < 0 {
		return size
	}
	mk, mv := m.Content[at], m.Content[at+1]
	var maps []*yaml.Node
	switch mv.Kind {
	case yaml.MappingNode:
		maps = []*yaml.Node{mv}
	case yaml.SequenceNode:
		maps = mv.Content
	}
	ok := len(maps) > 0 || mv.Kind == yaml.SequenceNode
	for _, s := range maps {
		ok = ok && s.Kind == yaml.MappingNode
	}
	if !ok {
		x.errs.Add(&Error{Line: mv.Line, Path: Join(path, "<<"), Value: Describe(mv), Reason: "is not a mapping or a list of mappings, which a merge key (<<) takes"})
		return size
	}
	size -= 1 + x.done[mv] // the merge key and its value are replaced by what they merge
	merged := map[string]bool{}
	var keys []*yaml.Node
	for _, s := range maps {
		for j := 0; j+1 < len(s.Content); j += 2 {
			k, v := s.Content[j], s.Content[j+1]
			if k.Kind == yaml.ScalarNode {
				if i, set := own[k.Value]; set {
					if i < at {
						x.errs.Add(&Error{Line: m.Content[i].Line, Path: Join(path, k.Value),
							Reason: fmt.Sprintf("is set before the merge key (<<) on line %d, which sets it too (from line %d): yaml.v2, which envoyproxy/ratelimit uses, takes the merged value, yaml.v3 this one", mk.Line, k.Line),
							Fix:    "write the key after the << line, so that it overrides the merged value in both"})
					}
					continue // the mapping's own key overrides
				}
				if merged[k.Value] {
					continue // an earlier map of the list overrides
				}
				merged[k.Value] = true
			}
			keys = append(keys, k, v)
			size += x.done[k] + x.done[v]
		}
	}
	content := make([]*yaml.Node, 0, len(m.Content)-2+len(keys))
	content = append(content, m.Content[:at]...)
	content = append(content, keys...)
	content = append(content, m.Content[at+2:]...)
	m.Content = content
	return size
}

// NextDocument returns the line where dec's next document starts, for a
// reader that wants one document per file: 0 when there is none (or what
// follows is not YAML, which the caller's first document did not include).
func NextDocument(dec *yaml.Decoder) int {
	var extra yaml.Node
	if err := dec.Decode(&extra); errors.Is(err, io.EOF) {
		return 0
	}
	line := max(extra.Line, 1)
	if len(extra.Content) > 0 {
		line = extra.Content[0].Line
	}
	return line
}

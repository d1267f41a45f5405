package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate"
)

// ConfigError is one problem in a rule file: the file, the line, the field
// path (such as descriptors[0].rate_limit.unit), the value and what is wrong
// with it.
type ConfigError struct {
	File   string
	Line   int
	Field  string
	Value  string
	Reason string
}

// Error implements error: "file:line: field: value reason".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	if e.Value != "" {
		b.WriteString(e.Value + " ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Source is one rule file's name and contents, for [Parse].
type Source struct {
	Name string
	Data []byte
}

// LoadDir reads every rule file in dir: the files whose names end in .yaml
// or .yml, in name order, skipping subfolders and names that start with a
// dot. A folder without rule files is an error, so that a mistyped path is
// not taken for "no limits".
func LoadDir(dir string) (*Rules, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoy rules: %w", err)
	}
	var srcs []Source
	for _, e := range ents {
		name := e.Name()
		ext := filepath.Ext(name)
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, name)
		info, err := os.Stat(path) // follows symlinks, as config folders often hold them
		if err != nil {
			return nil, fmt.Errorf("envoy rules: %w", err)
		}
		if info.IsDir() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("envoy rules: %w", err)
		}
		srcs = append(srcs, Source{Name: path, Data: data})
	}
	if len(srcs) == 0 {
		return nil, fmt.Errorf("envoy rules: no .yaml or .yml files in %s", dir)
	}
	return Parse(srcs...)
}

// Parse compiles rule files, one domain each. It reports every problem it
// finds (joined with errors.Join), each a *ConfigError. Two files with the
// same domain are an error, as in the reference's default.
func Parse(srcs ...Source) (*Rules, error) {
	r := &Rules{domains: map[string]*domain{}}
	var errs []error
	for _, src := range srcs {
		p := &parser{file: src.Name}
		d := p.file1(src.Data)
		if len(p.errs) > 0 {
			errs = append(errs, p.errs...)
			continue
		}
		if prev, dup := r.domains[d.name]; dup {
			errs = append(errs, &ConfigError{File: src.Name, Line: p.domainLine, Field: "domain", Value: d.name,
				Reason: "is already the domain of " + prev.source})
			continue
		}
		r.domains[d.name] = d
		r.sources = append(r.sources, src.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// parser compiles one file, collecting errors.
type parser struct {
	file       string
	errs       []error
	domainLine int
	domain     string
	alg        floodgate.Algorithm
	failure    failure
}

// maxErrors bounds the errors reported per file.
const maxErrors = 20

func (p *parser) bad(line int, field, value, reason string) {
	if len(p.errs) < maxErrors {
		p.errs = append(p.errs, &ConfigError{File: p.file, Line: line, Field: field, Value: value, Reason: reason})
	}
}

// fields returns a mapping node's keys and values in order, reporting keys
// outside allowed.
func (p *parser) fields(n *yaml.Node, path string, allowed ...string) [][2]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		p.bad(n.Line, path, describeNode(n), "is not a mapping")
		return nil
	}
	seen := map[string]bool{}
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := join(path, k.Value)
		switch {
		case !slices.Contains(allowed, k.Value):
			p.bad(k.Line, field, "", "is not a known key (known here: "+strings.Join(allowed, ", ")+")")
		case seen[k.Value]:
			p.bad(k.Line, field, "", "is set twice")
		default:
			seen[k.Value] = true
			out = append(out, [2]*yaml.Node{k, v})
		}
	}
	return out
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// str decodes a scalar string (numbers and booleans are taken as written,
// as the reference's YAML library does).
func (p *parser) str(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.bad(n.Line, field, describeNode(n), "is not a string")
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, field string) (bool, bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.bad(n.Line, field, describeNode(n), "is not true or false")
		return false, false
	}
	return b, true
}

func (p *parser) uint32v(n *yaml.Node, field string) (uint32, bool) {
	var v uint64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v > math.MaxUint32 {
		p.bad(n.Line, field, describeNode(n), fmt.Sprintf("is not a whole number between 0 and %d", uint32(math.MaxUint32)))
		return 0, false
	}
	return uint32(v), true
}

func (p *parser) algorithm(n *yaml.Node, field string) (floodgate.Algorithm, bool) {
	s, ok := p.str(n, field)
	if !ok {
		return 0, false
	}
	alg, err := floodgate.ParseAlgorithm(s)
	if err != nil {
		p.bad(n.Line, field, strconv.Quote(s), "is not one of "+algorithmNames())
		return 0, false
	}
	return alg, true
}

func (p *parser) failureMode(n *yaml.Node, field string) (failure, bool) {
	s, ok := p.str(n, field)
	if !ok {
		return failure{}, false
	}
	m, err := parseFailure(s)
	if err != nil {
		p.bad(n.Line, field, strconv.Quote(s), "is not error, open or closed")
		return failure{}, false
	}
	return m, true
}

// file1 compiles one file's domain.
func (p *parser) file1(data []byte) *domain {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.bad(0, "", "", "the file is empty: want a domain and its descriptors")
		} else {
			p.bad(0, "", "", "is not valid YAML: "+strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		p.bad(line, "", "", "holds more than one YAML document; want one domain per file")
		return nil
	}
	root := doc.Content[0]
	d := &domain{source: p.file, root: keyTable{}}
	var descriptors *yaml.Node
	for _, kv := range p.fields(root, "", "domain", "descriptors", "algorithm", "failure_mode", "response_headers") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "domain":
			d.name, _ = p.str(v, "domain")
			p.domainLine = v.Line
		case "descriptors":
			descriptors = v
		case "algorithm":
			p.alg, _ = p.algorithm(v, "algorithm")
		case "failure_mode":
			p.failure, _ = p.failureMode(v, "failure_mode")
		case "response_headers":
			d.headers, _ = p.boolean(v, "response_headers")
		}
	}
	if root.Kind != yaml.MappingNode {
		return nil
	}
	if d.name == "" {
		p.bad(max(p.domainLine, root.Line), "domain", `""`, "is required: name the domain Envoy's rate-limit filter sends")
	}
	p.domain = d.name
	if p.alg == 0 {
		p.alg = DefaultAlgorithm
	}
	d.alg, d.failure = p.alg, p.failure
	if descriptors != nil {
		p.descriptors(descriptors, "descriptors", d.name, d.root)
	}
	return d
}

// descriptors compiles one list of descriptors into table.
func (p *parser) descriptors(n *yaml.Node, path, parentKey string, table keyTable) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.bad(n.Line, path, describeNode(n), "is not a list of descriptors")
		return
	}
	type seenAt struct{ line int }
	seen := map[string]seenAt{}
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		var (
			key, value          string
			hasValue            bool
			keyLine             int
			rateLimit, children *yaml.Node
			rateLimitLine       int
			shadow, detailed    bool
		)
		for _, kv := range p.fields(item, ipath, "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric") {
			k, v := kv[0], kv[1]
			f := join(ipath, k.Value)
			switch k.Value {
			case "key":
				key, _ = p.str(v, f)
				keyLine = v.Line
			case "value":
				value, _ = p.str(v, f)
				hasValue = value != ""
			case "rate_limit":
				if !isNull(v) {
					rateLimit, rateLimitLine = v, k.Line
				}
			case "descriptors":
				children = v
			case "shadow_mode":
				shadow, _ = p.boolean(v, f)
			case "detailed_metric":
				detailed, _ = p.boolean(v, f)
			}
		}
		if item.Kind != yaml.MappingNode {
			continue
		}
		if key == "" {
			p.bad(max(keyLine, item.Line), join(ipath, "key"), `""`, "is required: every descriptor has a key")
			continue
		}
		composite := key
		if hasValue {
			composite += "_" + value
		}
		fullKey := parentKey + "." + composite
		if prev, dup := seen[composite]; dup {
			p.bad(item.Line, ipath, strconv.Quote(fullKey), fmt.Sprintf("is a duplicate descriptor (same key and value as line %d)", prev.line))
			continue
		}
		seen[composite] = seenAt{item.Line}
		nd := &node{line: item.Line}
		if rateLimit != nil {
			nd.rule = p.rateLimit(rateLimit, rateLimitLine, join(ipath, "rate_limit"), fullKey, shadow, detailed)
			nd.rule.compilePolicy()
		}
		if children != nil {
			nd.children = keyTable{}
			p.descriptors(children, join(ipath, "descriptors"), fullKey, nd.children)
		}
		kn := table[key]
		if kn == nil {
			kn = &keyNode{exact: map[string]*node{}}
			table[key] = kn
		}
		switch {
		case !hasValue:
			kn.any = nd
		case strings.HasSuffix(value, "*"):
			nd.prefix = strings.TrimSuffix(value, "*")
			kn.wildcards = append(kn.wildcards, nd)
			// Longest prefix first: the most specific wildcard wins. The
			// sort is stable, so equal lengths keep file order.
			sort.SliceStable(kn.wildcards, func(a, b int) bool { return len(kn.wildcards[a].prefix) > len(kn.wildcards[b].prefix) })
		default:
			kn.exact[value] = nd
		}
	}
}

// rateLimit compiles one rate_limit block, whose key is on line.
func (p *parser) rateLimit(n *yaml.Node, line int, path, fullKey string, shadow, detailed bool) *Rule {
	r := &Rule{Domain: p.domain, Key: fullKey, ShadowMode: shadow, DetailedMetric: detailed,
		Source: p.file + ":" + strconv.Itoa(line)}
	r.setFailure(p.failure)
	var (
		unitNode, rpuNode, algNode, capNode *yaml.Node
		replacesLine                        int
		unitName                            string
		alg                                 = p.alg
		capacity                            uint32
		ok                                  = true
	)
	errsBefore := len(p.errs)
	for _, kv := range p.fields(n, path, "unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "capacity", "failure_mode") {
		k, v := kv[0], kv[1]
		f := join(path, k.Value)
		switch k.Value {
		case "unit":
			unitNode = v
			unitName, _ = p.str(v, f)
		case "requests_per_unit":
			rpuNode = v
			r.RequestsPerUnit, _ = p.uint32v(v, f)
		case "unlimited":
			r.Unlimited, _ = p.boolean(v, f)
		case "name":
			r.Name, _ = p.str(v, f)
		case "replaces":
			r.Replaces, replacesLine = p.replaces(v, f), k.Line
		case "algorithm":
			algNode = v
			alg, ok = p.algorithm(v, f)
		case "capacity":
			capNode = v
			capacity, _ = p.uint32v(v, f)
		case "failure_mode":
			if m, ok := p.failureMode(v, f); ok {
				r.setFailure(m)
			}
		}
	}
	if n.Kind != yaml.MappingNode || len(p.errs) > errsBefore || !ok {
		return r
	}
	for _, name := range r.Replaces {
		if name == r.Name && name != "" {
			p.bad(replacesLine, join(path, "replaces"), strconv.Quote(name), "is this rule's own name: a rule cannot replace itself")
		}
	}
	unit, window, known := parseUnit(unitName)
	if r.Unlimited {
		switch {
		case known:
			p.bad(unitNode.Line, join(path, "unit"), strconv.Quote(unitName), "must not be set when unlimited is true")
		case algNode != nil:
			p.bad(algNode.Line, join(path, "algorithm"), strconv.Quote(algNode.Value), "does not apply when unlimited is true")
		case capNode != nil:
			p.bad(capNode.Line, join(path, "capacity"), capNode.Value, "does not apply when unlimited is true")
		}
		return r
	}
	if !known {
		if unitNode != nil {
			line = unitNode.Line
		}
		p.bad(line, join(path, "unit"), strconv.Quote(unitName), "is not one of "+unitNames(false))
		return r
	}
	r.Unit = unit
	if rpuNode == nil {
		p.bad(line, join(path, "requests_per_unit"), "", "is required (0 denies every request; unlimited: true admits every request)")
		return r
	}
	if capNode != nil && alg != floodgate.TokenBucket {
		p.bad(capNode.Line, join(path, "capacity"), capNode.Value, "applies to algorithm token_bucket only (this rule's algorithm is "+alg.String()+")")
		return r
	}
	if r.RequestsPerUnit == 0 {
		return r // blocks every request; nothing for the store to decide
	}
	if alg == floodgate.TokenBucket {
		size := int64(r.RequestsPerUnit)
		if capNode != nil {
			size = int64(capacity)
		}
		r.Limit = floodgate.NewTokenBucket(size, int64(r.RequestsPerUnit), window)
	} else {
		r.Limit = floodgate.NewLimit(alg, int64(r.RequestsPerUnit), window)
	}
	if err := r.Limit.Validate(); err != nil {
		field, node := "requests_per_unit", rpuNode
		var le *floodgate.LimitError
		if errors.As(err, &le) && le.Field == "Quota" && capNode != nil {
			field, node = "capacity", capNode
		}
		value := ""
		if node != nil {
			line, value = node.Line, node.Value
		}
		reason := err.Error()
		if le != nil {
			reason = le.Reason
		}
		p.bad(line, join(path, field), value, reason+" (algorithm "+alg.String()+", unit "+unitName+")")
	}
	return r
}

// algorithmNames lists the algorithms for error messages.
func algorithmNames() string {
	var b strings.Builder
	for i, a := range floodgate.Algorithms() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.String())
	}
	return b.String()
}

// replaces compiles a replaces list: mappings with a non-empty name.
func (p *parser) replaces(n *yaml.Node, path string) []string {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.bad(n.Line, path, describeNode(n), "is not a list of {name: ...}")
		return nil
	}
	var out []string
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		name := ""
		for _, kv := range p.fields(item, ipath, "name") {
			name, _ = p.str(kv[1], join(ipath, "name"))
		}
		if item.Kind == yaml.MappingNode && name == "" {
			p.bad(item.Line, join(ipath, "name"), `""`, "is required: name the rate_limit this one replaces")
			continue
		}
		out = append(out, name)
	}
	return out
}

package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// ConfigError is one problem in a rule file: the File, the Line, the field
// Path (such as descriptors[0].rate_limit.unit), the Value, the Reason and
// a Fix when one is obvious. It is the error type of floodgate's server
// config too, and prints as "file:line: path: value reason; fix".
type ConfigError = yamlfield.Error

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
		p := &parser{file: src.Name, errs: yamlfield.List{File: src.Name, Max: maxErrors}}
		d := p.file1(src.Data)
		if err := p.errs.Err(); err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := r.domains[d.name]; dup {
			errs = append(errs, &ConfigError{File: src.Name, Line: p.domainLine, Path: "domain", Value: d.name,
				Reason: "is already the domain of " + prev.source})
			continue
		}
		d.keys = decide.NewKeySpace(keyNamespace, d.name)
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
	errs       yamlfield.List
	domainLine int
	domain     string
	alg        floodgate.Algorithm
	failure    failure
}

// maxErrors bounds the errors reported per file.
const maxErrors = 20

// oneOf reports the string s at path, which is none of known, with the one
// it is most likely a typo of.
func (p *parser) oneOf(line int, path, s string, known []string) {
	p.errs.Add(&ConfigError{Line: line, Path: path, Value: strconv.Quote(s), Reason: "is not one of " + strings.Join(known, ", "),
		Fix: yamlfield.DidYouMean(s, known)})
}

// uint32v reads a whole number between 0 and math.MaxUint32.
func (p *parser) uint32v(n *yaml.Node, path string) uint32 {
	v, _ := p.errs.Uint(n, path, math.MaxUint32)
	return uint32(v)
}

func (p *parser) algorithm(n *yaml.Node, path string) (floodgate.Algorithm, bool) {
	s, ok := p.errs.String(n, path)
	if !ok {
		return 0, false
	}
	alg, err := floodgate.ParseAlgorithm(s)
	if err != nil {
		p.oneOf(n.Line, path, s, floodgate.AlgorithmNames())
		return 0, false
	}
	return alg, true
}

func (p *parser) failureMode(n *yaml.Node, path string) (failure, bool) {
	s, ok := p.errs.String(n, path)
	if !ok {
		return failure{}, false
	}
	m, err := parseFailure(s)
	if err != nil {
		p.errs.Add(&ConfigError{Line: n.Line, Path: path, Value: strconv.Quote(s), Reason: "is not error, open or closed",
			Fix: yamlfield.DidYouMean(s, []string{"error", "open", "closed"})})
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
			p.errs.Report(0, "", "", "the file is empty: want a domain and its descriptors")
		} else {
			p.errs.Report(0, "", "", "is not valid YAML: "+strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		p.errs.Report(line, "", "", "holds more than one YAML document; want one domain per file")
		return nil
	}
	root := doc.Content[0]
	d := &domain{source: p.file, root: keyTable{}}
	var descriptors *yaml.Node
	for _, e := range p.errs.Mapping(root, "", "domain", "descriptors", "algorithm", "failure_mode", "response_headers") {
		v := e.Value
		switch e.Key.Value {
		case "domain":
			d.name, _ = p.errs.String(v, "domain")
			p.domainLine = v.Line
		case "descriptors":
			descriptors = v
		case "algorithm":
			p.alg, _ = p.algorithm(v, "algorithm")
		case "failure_mode":
			p.failure, _ = p.failureMode(v, "failure_mode")
		case "response_headers":
			d.headers, _ = p.errs.Bool(v, "response_headers")
		}
	}
	if root.Kind != yaml.MappingNode {
		return nil
	}
	if d.name == "" {
		p.errs.Report(max(p.domainLine, root.Line), "domain", `""`, "is required: name the domain Envoy's rate-limit filter sends")
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
	if yamlfield.IsNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errs.Add(yamlfield.TypeError(n, path, "a list of descriptors"))
		return
	}
	type seenAt struct{ line int }
	seen := map[string]seenAt{}
	for i, item := range n.Content {
		ipath := yamlfield.Index(path, i)
		var (
			key, value          string
			hasValue            bool
			keyLine             int
			rateLimit, children *yaml.Node
			rateLimitLine       int
			shadow, detailed    bool
		)
		for _, e := range p.errs.Mapping(item, ipath, "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric") {
			v, f := e.Value, e.Path
			switch e.Key.Value {
			case "key":
				key, _ = p.errs.String(v, f)
				keyLine = v.Line
			case "value":
				value, _ = p.errs.String(v, f)
				hasValue = value != ""
			case "rate_limit":
				if !yamlfield.IsNull(v) {
					rateLimit, rateLimitLine = v, e.Key.Line
				}
			case "descriptors":
				children = v
			case "shadow_mode":
				shadow, _ = p.errs.Bool(v, f)
			case "detailed_metric":
				detailed, _ = p.errs.Bool(v, f)
			}
		}
		if item.Kind != yaml.MappingNode {
			continue
		}
		if key == "" {
			p.errs.Report(max(keyLine, item.Line), yamlfield.Join(ipath, "key"), `""`, "is required: every descriptor has a key")
			continue
		}
		composite := key
		if hasValue {
			composite += "_" + value
		}
		fullKey := parentKey + "." + composite
		if prev, dup := seen[composite]; dup {
			p.errs.Report(item.Line, ipath, strconv.Quote(fullKey), fmt.Sprintf("is a duplicate descriptor (same key and value as line %d)", prev.line))
			continue
		}
		seen[composite] = seenAt{item.Line}
		nd := &node{line: item.Line}
		if rateLimit != nil {
			nd.rule = p.rateLimit(rateLimit, rateLimitLine, yamlfield.Join(ipath, "rate_limit"), fullKey, shadow, detailed)
			nd.rule.compilePolicy()
		}
		if children != nil {
			nd.children = keyTable{}
			p.descriptors(children, yamlfield.Join(ipath, "descriptors"), fullKey, nd.children)
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
	errsBefore := p.errs.Len()
	for _, e := range p.errs.Mapping(n, path, "unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "capacity", "failure_mode") {
		v, f := e.Value, e.Path
		switch e.Key.Value {
		case "unit":
			unitNode = v
			unitName, _ = p.errs.String(v, f)
		case "requests_per_unit":
			rpuNode = v
			r.RequestsPerUnit = p.uint32v(v, f)
		case "unlimited":
			r.Unlimited, _ = p.errs.Bool(v, f)
		case "name":
			r.Name, _ = p.errs.String(v, f)
		case "replaces":
			r.Replaces, replacesLine = p.replaces(v, f), e.Key.Line
		case "algorithm":
			algNode = v
			alg, ok = p.algorithm(v, f)
		case "capacity":
			capNode = v
			capacity = p.uint32v(v, f)
		case "failure_mode":
			if m, ok := p.failureMode(v, f); ok {
				r.setFailure(m)
			}
		}
	}
	if n.Kind != yaml.MappingNode || p.errs.Len() > errsBefore || !ok {
		return r
	}
	for _, name := range r.Replaces {
		if name == r.Name && name != "" {
			p.errs.Report(replacesLine, yamlfield.Join(path, "replaces"), strconv.Quote(name), "is this rule's own name: a rule cannot replace itself")
		}
	}
	unit, window, known := parseUnit(unitName)
	if r.Unlimited {
		switch {
		case known:
			p.errs.Report(unitNode.Line, yamlfield.Join(path, "unit"), strconv.Quote(unitName), "must not be set when unlimited is true")
		case algNode != nil:
			p.errs.Report(algNode.Line, yamlfield.Join(path, "algorithm"), strconv.Quote(algNode.Value), "does not apply when unlimited is true")
		case capNode != nil:
			p.errs.Report(capNode.Line, yamlfield.Join(path, "capacity"), capNode.Value, "does not apply when unlimited is true")
		}
		return r
	}
	if !known {
		if unitNode != nil {
			line = unitNode.Line
		}
		p.oneOf(line, yamlfield.Join(path, "unit"), unitName, unitNames(false))
		return r
	}
	r.Unit = unit
	if rpuNode == nil {
		p.errs.Report(line, yamlfield.Join(path, "requests_per_unit"), "", "is required (0 denies every request; unlimited: true admits every request)")
		return r
	}
	if capNode != nil && alg != floodgate.TokenBucket {
		p.errs.Report(capNode.Line, yamlfield.Join(path, "capacity"), capNode.Value, "applies to algorithm token_bucket only (this rule's algorithm is "+alg.String()+")")
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
		p.errs.Report(line, yamlfield.Join(path, field), value, reason+" (algorithm "+alg.String()+", unit "+unitName+")")
	}
	return r
}

// replaces compiles a replaces list: mappings with a non-empty name.
func (p *parser) replaces(n *yaml.Node, path string) []string {
	if yamlfield.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errs.Add(yamlfield.TypeError(n, path, "a list of {name: ...}"))
		return nil
	}
	var out []string
	for i, item := range n.Content {
		ipath := yamlfield.Index(path, i)
		name := ""
		for _, e := range p.errs.Mapping(item, ipath, "name") {
			name, _ = p.errs.String(e.Value, e.Path)
		}
		if item.Kind == yaml.MappingNode && name == "" {
			p.errs.Report(item.Line, yamlfield.Join(ipath, "name"), `""`, "is required: name the rate_limit this one replaces")
			continue
		}
		out = append(out, name)
	}
	return out
}

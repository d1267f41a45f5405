package envoy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
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

// LoadOptions are how [Load] reads a folder. The zero value is
// floodgate's default; envoyproxy/ratelimit's own behaviour is
// LoadOptions{DotFiles: true} (its RUNTIME_IGNOREDOTFILES=false), plus
// MergeDomains when its MERGE_DOMAIN_CONFIG is set.
type LoadOptions struct {
	// DotFiles loads files and folders whose names start with a dot, as
	// envoyproxy/ratelimit does unless RUNTIME_IGNOREDOTFILES is set. Off
	// by default: a mounted Kubernetes ConfigMap holds each file twice,
	// once under a "..<timestamp>" folder, which would define every domain
	// twice. Skipped names are listed by [Rules.Skipped].
	DotFiles bool
	// MergeDomains merges the descriptors of files that share a domain
	// (MERGE_DOMAIN_CONFIG); two top-level descriptors with the same key
	// and value are still an error. Off: a second file for a domain is an
	// error naming both files.
	MergeDomains bool
	// Prefix, when set, reads only the files whose path relative to the
	// folder, with each / turned into a dot, starts with Prefix and a dot:
	// with Prefix "config", config.yaml, config.x.yaml, config/a.yaml and
	// config.d/b.yaml, but not configs.yaml, config or other/a.yaml. It is
	// envoyproxy/ratelimit's RUNTIME_WATCH_ROOT=true (its default), with
	// the folder RUNTIME_ROOT/RUNTIME_SUBDIRECTORY and Prefix its
	// RUNTIME_APPDIRECTORY. Files outside the prefix are listed by
	// [Rules.Skipped], and [Service.Watch] ignores their changes. Empty:
	// every file of the folder is read.
	Prefix string
}

// selected reports whether the file at rel, its path relative to the
// folder, is one opts read (see LoadOptions.Prefix).
func (opts LoadOptions) selected(rel string) bool {
	if opts.Prefix == "" {
		return true
	}
	key := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
	return strings.HasPrefix(key, opts.Prefix+".")
}

// LoadDir is Load(dir, LoadOptions{}).
func LoadDir(dir string) (*Rules, error) { return Load(dir, LoadOptions{}) }

// Load reads every rule file under dir, as envoyproxy/ratelimit's runtime
// loader does: recursively, whatever the file's extension, in lexical path
// order, following symbolic links to files (but not to folders, which the
// reference does not enter either). Names starting with a dot are skipped
// unless opts.DotFiles, and files outside opts.Prefix when it is set. Every file must be a valid rule file: a README or
// a backup copy beside the rules is an error naming it, never ignored. A
// folder without any file is an error, so that a mistyped path is not taken
// for "no limits".
func Load(dir string, opts LoadOptions) (*Rules, error) {
	srcs, skipped, err := readFolder(dir, opts)
	if err != nil {
		return nil, err
	}
	if len(srcs) == 0 {
		if opts.Prefix != "" {
			return nil, fmt.Errorf("envoy rules: no rule files in %s whose path starts with %s. (such as %s.yaml or %s/rules.yaml)", dir, opts.Prefix, opts.Prefix, opts.Prefix)
		}
		return nil, fmt.Errorf("envoy rules: no rule files in %s", dir)
	}
	r, err := ParseWith(opts, srcs...)
	if err != nil {
		return nil, err
	}
	r.skipped, r.hash = skipped, hashSources(srcs, nil)
	return r, nil
}

// readFolder reads the files Load reads, and lists what it skips.
func readFolder(dir string, opts LoadOptions) (srcs []Source, skipped []string, err error) {
	err = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if path != dir && strings.HasPrefix(name, ".") && !opts.DotFiles {
			skipped = append(skipped, path)
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		info, err := os.Stat(path) // follows symlinks, as config folders often hold them
		if err != nil {
			return err
		}
		if info.IsDir() {
			skipped = append(skipped, path) // a link to a folder: not entered, as in the reference
			return nil
		}
		if rel, err := filepath.Rel(dir, path); err != nil || !opts.selected(rel) {
			skipped = append(skipped, path)
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		srcs = append(srcs, Source{Name: path, Data: data})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("envoy rules: %w", err)
	}
	return srcs, skipped, nil
}

// Parse compiles rule files, one domain each. It reports every problem it
// finds (joined with errors.Join), each a *ConfigError. Two files with the
// same domain are an error, as in the reference's default.
func Parse(srcs ...Source) (*Rules, error) { return ParseWith(LoadOptions{}, srcs...) }

// ParseWith is Parse with opts.MergeDomains: files that share a domain are
// merged rather than refused.
func ParseWith(opts LoadOptions, srcs ...Source) (*Rules, error) {
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
			if !opts.MergeDomains {
				errs = append(errs, &ConfigError{File: src.Name, Line: p.domainLine, Path: "domain", Value: d.name,
					Reason: "is already the domain of " + prev.source,
					Fix:    "merge the two files, set MERGE_DOMAIN_CONFIG=true, or, for a mounted ConfigMap, skip its dot-folders (RUNTIME_IGNOREDOTFILES=true)"})
				continue
			}
			if err := prev.merge(d); err != nil {
				errs = append(errs, err)
				continue
			}
			r.sources = append(r.sources, src.Name)
			continue
		}
		d.keys = newKeySpace(d.name)
		r.domains[d.name] = d
		r.sources = append(r.sources, src.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// merge adds next's top-level descriptors to d, as MERGE_DOMAIN_CONFIG does
// in the reference: a key and value both files define is an error.
func (d *domain) merge(next *domain) error {
	var errs []error
	for key, kn := range next.root {
		have := d.root[key]
		if have == nil {
			d.root[key] = kn
			continue
		}
		dup := func(nd *node, value string) {
			composite := key
			if value != "" {
				composite += "_" + value
			}
			errs = append(errs, &ConfigError{File: next.source, Line: nd.line, Path: "descriptors", Value: strconv.Quote(d.name + "." + composite),
				Reason: "is a duplicate descriptor: " + d.source + " defines it for the same domain"})
		}
		for v, nd := range kn.exact {
			if have.exact[v] != nil {
				dup(nd, v)
				continue
			}
			have.exact[v] = nd
		}
		for _, nd := range kn.wildcards {
			if slices.ContainsFunc(have.wildcards, func(o *node) bool { return o.prefix == nd.prefix }) {
				dup(nd, nd.prefix+"*")
				continue
			}
			have.wildcards = append(have.wildcards, nd)
		}
		sort.SliceStable(have.wildcards, func(a, b int) bool { return len(have.wildcards[a].prefix) > len(have.wildcards[b].prefix) })
		if kn.any != nil {
			if have.any != nil {
				dup(kn.any, "")
			} else {
				have.any = kn.any
			}
		}
	}
	d.headers = d.headers || next.headers
	return errors.Join(errs...)
}

// parser compiles one file, collecting errors.
type parser struct {
	file        string
	errs        yamlfield.List
	domainLine  int
	domain      string
	alg         floodgate.Algorithm
	failure     failure   // the domain's failure_mode
	failureLine int       // where it is written
	shares      shareKeys // the domain's local_share and instances
	// The domain's failure_mode, or its share, is written but wrong.
	modeBad, shareBad bool
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
		p.oneOf(n.Line, path, s, algorithmlist.Names())
		return 0, false
	}
	return alg, true
}

// file1 compiles one file's domain.
func (p *parser) file1(data []byte) *domain {
	doc, dec, err := yamlfield.Parse(data)
	if err != nil {
		var ye *yamlfield.Error
		switch {
		case errors.Is(err, io.EOF):
			p.errs.Report(0, "", "", "the file is empty: want a domain and its descriptors")
		case errors.As(err, &ye):
			p.errs.Add(ye)
		default:
			p.errs.Report(0, "", "", "is not valid YAML: "+err.Error())
		}
		return nil
	}
	if line := yamlfield.NextDocument(dec); line > 0 {
		p.errs.Report(line, "", "", "holds more than one YAML document; want one domain per file")
		return nil
	}
	if !p.errs.Expand(doc) {
		return nil
	}
	root := doc.Content[0]
	d := &domain{source: p.file, root: keyTable{}}
	var descriptors *yaml.Node
	var shares shareKeys
	for _, e := range p.errs.Mapping(root, "", "domain", "descriptors", "algorithm", "failure_mode", "local_share", "instances", "response_headers") {
		v := e.Value
		switch e.Key.Value {
		case "local_share":
			shares.share = v
		case "instances":
			shares.instances = v
		case "domain":
			d.name, _ = p.errs.String(v, "domain")
			p.domainLine = v.Line
		case "descriptors":
			descriptors = v
		case "algorithm":
			p.alg, _ = p.algorithm(v, "algorithm")
		case "failure_mode":
			var ok bool
			p.failure, ok = p.failureMode(v, "failure_mode")
			p.failureLine, shares.mode, p.modeBad = v.Line, v, !ok
		case "response_headers":
			d.headers, _ = p.errs.Bool(v, "response_headers")
		}
	}
	if root.Kind != yaml.MappingNode {
		return nil
	}
	p.shares = shares
	p.shareBad = !p.localShare(&p.failure, shares, 0, "", p.modeBad) && (shares.share != nil || shares.instances != nil)
	if d.name == "" {
		p.errs.Report(max(p.domainLine, root.Line), "domain", `""`, "is required: name the domain Envoy's rate-limit filter sends")
	}
	p.domain = d.name
	if p.alg == 0 {
		p.alg = DefaultAlgorithm
	}
	d.alg, d.failure = p.alg, p.failure
	if descriptors != nil {
		p.descriptors(descriptors, "descriptors", d.name, nil, d.root)
	}
	return d
}

// descriptors compiles one list of descriptors into table.
func (p *parser) descriptors(n *yaml.Node, path, parentKey string, chain []level, table keyTable) {
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
			quota, toMetric     bool
			share               bool
			shareLine           int
		)
		for _, e := range p.errs.Mapping(item, ipath, "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
			"quota_mode", "value_to_metric", "share_threshold") {
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
			case "quota_mode":
				quota, _ = p.errs.Bool(v, f)
			case "value_to_metric":
				toMetric, _ = p.errs.Bool(v, f)
			case "share_threshold":
				share, _ = p.errs.Bool(v, f)
				shareLine = v.Line
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
		wildcard := hasValue && strings.HasSuffix(value, "*")
		if share && !wildcard {
			p.errs.Report(shareLine, yamlfield.Join(ipath, "share_threshold"), "true",
				fmt.Sprintf("applies to wildcard values only (a value ending in '*'), but %q has none", fullKey))
			continue
		}
		lv := level{key: key, toMetric: toMetric}
		if hasValue {
			lv.value = value
		}
		if share {
			lv.share = value
		}
		here := append(slices.Clip(chain), lv)
		nd := &node{line: item.Line}
		if rateLimit != nil {
			nd.rule = p.rateLimit(rateLimit, rateLimitLine, yamlfield.Join(ipath, "rate_limit"), fullKey, shadow, detailed)
			nd.rule.QuotaMode = quota
			nd.rule.setLevels(here)
			nd.rule.compilePolicy()
		}
		if children != nil {
			nd.children = keyTable{}
			p.descriptors(children, yamlfield.Join(ipath, "descriptors"), fullKey, here, nd.children)
		}
		kn := table[key]
		if kn == nil {
			kn = &keyNode{exact: map[string]*node{}}
			table[key] = kn
		}
		switch {
		case !hasValue:
			kn.any = nd
		case wildcard:
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
		shares                              shareKeys
		replacesLine                        int
		unitName                            string
		alg                                 = p.alg
		capacity                            uint32
		ok                                  = true
		modeBad                             = p.modeBad // the failure_mode this rule takes is written but wrong
	)
	errsBefore := p.errs.Len()
	for _, e := range p.errs.Mapping(n, path, "unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "capacity", "failure_mode", "local_share", "instances") {
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
			shares.mode = v
			m, ok := p.failureMode(v, f)
			r.setFailure(m) // if !ok the default, in a file refused anyway
			modeBad = !ok
		case "local_share":
			shares.share = v
		case "instances":
			shares.instances = v
		}
	}
	own := failure{mode: r.FailureMode, call: r.FailCall, set: r.failureSet}
	if p.localShare(&own, shares, p.failure.share, path, modeBad) {
		r.LocalShare = own.share
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
		return r
	}
	p.usableShare(r, shares, path, line)
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

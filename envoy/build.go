package envoy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/rulecheck"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// builder checks one decoded rule file and compiles its domain, reporting
// each problem on the line where it is written (from Decode's Lines).
type builder struct {
	file     string
	lines    yamlfield.Lines
	failed   map[string]bool // the paths whose values Decode refused
	within   map[string]bool // the paths holding an error of Decode's
	errs     []*ConfigError
	rootLine int // the line of the file's top mapping
	domain   string
	alg      floodgate.Algorithm
	failure  failure   // the domain's failure_mode
	shares   shareKeys // the domain's failure_mode, local_share and instances
	// The domain's failure_mode, or its share, is written but wrong.
	modeBad, shareBad bool
}

// newBuilder returns the builder of a file that Decode read with lines
// and decodeErr, whose errors it keeps: a value that did not decode is
// reported once, by Decode, and not checked again.
func newBuilder(file string, lines yamlfield.Lines, decodeErr error, rootLine int) *builder {
	b := &builder{file: file, lines: lines, failed: map[string]bool{}, within: map[string]bool{}, rootLine: rootLine}
	for _, err := range leaves(decodeErr) {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			ce = &ConfigError{Reason: err.Error()}
		}
		b.errs = append(b.errs, ce)
		// An error that quotes no value is about a key of the mapping
		// holding it, unknown or set twice (the first value is kept).
		p := ce.Path
		if ce.Value != "" {
			b.failed[p] = true
		} else {
			p = parentPath(p)
		}
		for ; p != "" && !b.within[p]; p = parentPath(p) {
			b.within[p] = true
		}
	}
	return b
}

// parentPath returns the path holding path: "rules" for "rules[1]", ""
// for "domain".
func parentPath(path string) string { return path[:max(strings.LastIndexAny(path, ".["), 0)] }

// leaves returns the errors joined in err (by errors.Join).
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// didNotDecode reports whether Decode reported the value at path.
func (b *builder) didNotDecode(path string) bool { return b.failed[path] }

// brokenWithin reports whether Decode reported the value at path, or one
// inside it.
func (b *builder) brokenWithin(path string) bool { return b.within[path] }

// written reports whether the key at path is in the file, even empty.
func (b *builder) written(path string) bool {
	_, ok := b.lines[path]
	return ok
}

// report adds an error at line about the value at path.
func (b *builder) report(line int, path, value, reason string) {
	b.errs = append(b.errs, &ConfigError{Line: line, Path: path, Value: value, Reason: reason})
}

// reportAt adds an error about the value at path, on its line.
func (b *builder) reportAt(path, value, reason string) {
	b.report(b.lines.Line(path), path, value, reason)
}

// oneOf reports the string s at path, which is none of known, with the one
// it is most likely a typo of.
func (b *builder) oneOf(s yamlfield.Scalar[string], path string, known []string) {
	b.errs = append(b.errs, &ConfigError{Line: b.line(s.Line, path), Path: path, Value: strconv.Quote(s.Value),
		Reason: "is not one of " + strings.Join(known, ", "), Fix: yamlfield.DidYouMean(s.Value, known)})
}

// line returns valueLine, a Scalar's, or when its key is left out the line
// of path's nearest enclosing path.
func (b *builder) line(valueLine int, path string) int {
	if valueLine > 0 {
		return valueLine
	}
	return b.lines.Line(path)
}

// sorted returns the errors by line, in the order found within a line.
func (b *builder) sorted() []*ConfigError {
	slices.SortStableFunc(b.errs, func(x, y *ConfigError) int { return cmp.Compare(x.Line, y.Line) })
	return b.errs
}

// domainLine returns the line of the domain key, or of the top mapping
// when it is left out.
func (b *builder) domainLine() int {
	if b.written("domain") {
		return b.lines.Line("domain")
	}
	return b.rootLine
}

// algorithm returns the algorithm s written at path, and false if it is
// wrong (reported).
func (b *builder) algorithm(s yamlfield.Scalar[string], path string) (floodgate.Algorithm, bool) {
	if b.didNotDecode(path) {
		return 0, false
	}
	alg, err := floodgate.ParseAlgorithm(s.Value)
	if err != nil {
		b.oneOf(s, path, algorithmlist.Names())
		return 0, false
	}
	return alg, true
}

// top checks f, a file's top mapping, and compiles its domain.
func (b *builder) top(f *fileYAML) *domain {
	d := &domain{source: b.file, root: keyTable{}, headers: bool(f.ResponseHeaders)}
	if f.Algorithm.Set {
		b.alg, _ = b.algorithm(f.Algorithm, "algorithm")
	}
	if f.FailureMode.Set {
		var ok bool
		b.failure, ok = b.failureMode(f.FailureMode, "failure_mode")
		b.modeBad = !ok
	}
	b.shares = f.shares()
	ok := b.localShare(&b.failure, b.shares, 0, b.modeBad)
	_, _, _, written := b.shares.written()
	b.shareBad = !ok && written
	d.name = f.Domain
	if d.name == "" && !b.didNotDecode("domain") {
		b.report(b.domainLine(), "domain", `""`, "is required: name the domain Envoy's rate-limit filter sends")
	}
	b.domain = d.name
	if b.alg == 0 {
		b.alg = DefaultAlgorithm
	}
	d.alg, d.failure = b.alg, b.failure
	b.descriptors(f.Descriptors, "descriptors", d.name, nil, d.root)
	return d
}

// descriptors checks one list of descriptors, at path under the
// descriptor parentKey names, and compiles it into table.
func (b *builder) descriptors(list descriptorsYAML, path, parentKey string, chain []level, table keyTable) {
	seen := map[string]int{} // the line of each key and value
	for i, item := range list {
		ipath := yamlfield.Index(path, i)
		switch {
		case item == nil:
			b.reportAt(ipath, "nothing", "is not a mapping")
			continue
		case b.didNotDecode(ipath):
			continue // not a mapping
		case item.Key == "":
			if !b.didNotDecode(yamlfield.Join(ipath, "key")) {
				b.reportAt(yamlfield.Join(ipath, "key"), `""`, "is required: every descriptor has a key")
			}
			continue
		}
		composite := item.Key
		if item.Value != "" {
			composite += "_" + item.Value
		}
		fullKey := parentKey + "." + composite
		line := b.lines.Line(ipath)
		if prev, dup := seen[composite]; dup {
			b.report(line, ipath, strconv.Quote(fullKey), fmt.Sprintf("is a duplicate descriptor (same key and value as line %d)", prev))
			continue
		}
		seen[composite] = line
		wildcard := strings.HasSuffix(item.Value, "*")
		if bool(item.ShareThreshold) && !wildcard {
			b.reportAt(yamlfield.Join(ipath, "share_threshold"), "true",
				fmt.Sprintf("applies to wildcard values only (a value ending in '*'), but %q has none", fullKey))
			continue
		}
		lv := level{key: item.Key, value: item.Value, toMetric: bool(item.ValueToMetric)}
		if item.ShareThreshold {
			lv.share = item.Value
		}
		here := append(slices.Clip(chain), lv)
		nd := &node{line: line}
		if item.RateLimit != nil {
			nd.rule = b.rateLimit(item.RateLimit, yamlfield.Join(ipath, "rate_limit"), fullKey, bool(item.ShadowMode), bool(item.DetailedMetric))
			nd.rule.QuotaMode = bool(item.QuotaMode)
			nd.rule.setLevels(here)
			nd.rule.compilePolicy()
		}
		if item.Descriptors != nil {
			nd.children = keyTable{}
			b.descriptors(item.Descriptors, yamlfield.Join(ipath, "descriptors"), fullKey, here, nd.children)
		}
		table.add(item.Key, item.Value, nd)
	}
}

// add files nd, the descriptor of key and value, by how it matches a
// value: any value ("" written), a wildcard prefix ("prefix*"), or the
// value exactly.
func (t keyTable) add(key, value string, nd *node) {
	kn := t[key]
	if kn == nil {
		kn = &keyNode{exact: map[string]*node{}}
		t[key] = kn
	}
	switch {
	case value == "":
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

// rateLimit checks one rate_limit block, written at path, and compiles
// its rule.
func (b *builder) rateLimit(rl *rateLimitYAML, path, fullKey string, shadow, detailed bool) *Rule {
	line := b.lines.Line(path)
	r := &Rule{Domain: b.domain, Key: fullKey, Name: rl.Name, Unlimited: bool(rl.Unlimited), RequestsPerUnit: rl.RequestsPerUnit.Value,
		ShadowMode: shadow, DetailedMetric: detailed, Source: b.file + ":" + strconv.Itoa(line)}
	r.setFailure(b.failure)
	errsBefore := len(b.errs)
	r.Replaces = b.replaces(rl.Replaces, yamlfield.Join(path, "replaces"))
	alg := b.alg
	if rl.Algorithm.Set {
		alg, _ = b.algorithm(rl.Algorithm, yamlfield.Join(path, "algorithm"))
	}
	shares := rl.shares(path)
	modeBad := b.modeBad // the failure_mode this rule takes is written but wrong
	if rl.FailureMode.Set {
		m, ok := b.failureMode(rl.FailureMode, yamlfield.Join(path, "failure_mode"))
		r.setFailure(m) // if !ok the default, in a file refused anyway
		modeBad = !ok
	}
	own := failure{mode: r.FailureMode, set: r.failureSet}
	if b.localShare(&own, shares, b.failure.share, modeBad) {
		r.LocalShare = own.share
	}
	if len(b.errs) > errsBefore || b.brokenWithin(path) {
		return r
	}
	if b.checkRule(r, rl, path, alg) {
		b.usableShare(r, shares, line)
		b.lease(r, rl.Lease, yamlfield.Join(path, "lease"))
	}
	return r
}

// lease checks a rate_limit's lease, written at path, and sets r's.
func (b *builder) lease(r *Rule, l *leaseYAML, path string) {
	if l == nil {
		return
	}
	r.Lease = &decide.LeaseOptions{Refresh: l.Refresh, TTL: l.TTL, Idle: l.Idle, MaxShare: l.MaxShare}
	fe := rulecheck.Lease(r.Limit, r.Lease)
	switch {
	case fe == nil:
	case fe.Field == "Lease":
		b.reportAt(path, "", "on "+fe.Value+" "+fe.Reason+"; set algorithm: token_bucket or fixed_window (the default), or remove lease")
	default:
		key := map[string]string{"Lease.Refresh": "refresh", "Lease.TTL": "ttl", "Lease.Idle": "idle", "Lease.MaxShare": "max_share"}[fe.Field]
		b.reportAt(yamlfield.Join(path, key), fe.Value, fe.Reason)
	}
}

// checkRule checks the values of a rate_limit that decoded, written at
// path, and sets r's Unit and Limit; it reports whether the store decides
// the rule (it is neither unlimited nor blocking every request).
func (b *builder) checkRule(r *Rule, rl *rateLimitYAML, path string, alg floodgate.Algorithm) bool {
	at := func(key string) string { return yamlfield.Join(path, key) }
	for _, name := range r.Replaces {
		if name == r.Name && name != "" {
			b.reportAt(at("replaces"), strconv.Quote(name), "is this rule's own name: a rule cannot replace itself")
		}
	}
	unit, window, known := parseUnit(rl.Unit.Value)
	if r.Unlimited {
		switch {
		case known:
			b.report(rl.Unit.Line, at("unit"), strconv.Quote(rl.Unit.Value), "must not be set when unlimited is true")
		case rl.Algorithm.Set:
			b.report(rl.Algorithm.Line, at("algorithm"), strconv.Quote(rl.Algorithm.Value), "does not apply when unlimited is true")
		case rl.Capacity.Set:
			b.report(rl.Capacity.Line, at("capacity"), rl.Capacity.Text, "does not apply when unlimited is true")
		}
		return false
	}
	if !known {
		b.oneOf(rl.Unit, at("unit"), unitNames(false))
		return false
	}
	r.Unit = unit
	switch {
	case !rl.RequestsPerUnit.Set:
		b.reportAt(at("requests_per_unit"), "", "is required (0 denies every request; unlimited: true admits every request)")
		return false
	case rl.Capacity.Set && alg != floodgate.TokenBucket:
		b.report(rl.Capacity.Line, at("capacity"), rl.Capacity.Text, "applies to algorithm token_bucket only (this rule's algorithm is "+alg.String()+")")
		return false
	case r.RequestsPerUnit == 0:
		return false // blocks every request; nothing for the store to decide
	}
	if alg == floodgate.TokenBucket {
		size := int64(r.RequestsPerUnit)
		if rl.Capacity.Set {
			size = int64(rl.Capacity.Value)
		}
		r.Limit = floodgate.NewTokenBucket(size, int64(r.RequestsPerUnit), window)
	} else {
		r.Limit = floodgate.NewLimit(alg, int64(r.RequestsPerUnit), window)
	}
	err := r.Limit.Validate()
	if err == nil {
		return true
	}
	key, written, reason := "requests_per_unit", rl.RequestsPerUnit, err.Error()
	var le *floodgate.LimitError
	if errors.As(err, &le) {
		reason = le.Reason
		if le.Field == "Quota" && rl.Capacity.Set {
			key, written = "capacity", rl.Capacity
		}
	}
	b.report(written.Line, at(key), written.Text, reason+" (algorithm "+alg.String()+", unit "+rl.Unit.Value+")")
	return false
}

// replaces checks a replaces list, written at path, and returns its names.
func (b *builder) replaces(list replacesYAML, path string) []string {
	var out []string
	for i, item := range list {
		ipath := yamlfield.Index(path, i)
		switch {
		case item == nil:
			b.reportAt(ipath, "nothing", "is not a mapping")
		case b.didNotDecode(ipath):
		case item.Name == "":
			if !b.didNotDecode(yamlfield.Join(ipath, "name")) {
				b.report(b.lines.Line(ipath), yamlfield.Join(ipath, "name"), `""`, "is required: name the rate_limit this one replaces")
			}
		default:
			out = append(out, item.Name)
		}
	}
	return out
}

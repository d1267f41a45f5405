package envoy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/filebound"
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
		data, err := filebound.Read(path, filebound.MaxRules)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
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
		d, domainLine, err := parseFile(src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := r.domains[d.name]; dup {
			if !opts.MergeDomains {
				errs = append(errs, &ConfigError{File: src.Name, Line: domainLine, Path: "domain", Value: d.name,
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

// maxErrors bounds the errors reported per file.
const maxErrors = 20

// parseFile compiles one rule file into its domain, and returns the line
// of its domain key. The file decodes into a fileYAML (yamlfield.Decode),
// whose values a builder then checks and compiles. The error lists every
// problem found, by line, each a *ConfigError naming the file.
func parseFile(src Source) (*domain, int, error) {
	errs := yamlfield.List{File: src.Name, Max: maxErrors}
	doc, dec, err := yamlfield.Parse(src.Data)
	var ye *yamlfield.Error
	switch {
	case errors.Is(err, io.EOF):
		errs.Report(0, "", "", "the file is empty: want a domain and its descriptors")
	case errors.As(err, &ye):
		errs.Add(ye)
	case err != nil:
		errs.Report(0, "", "", "is not valid YAML: "+err.Error())
	case len(doc.Content) == 0:
		errs.Report(0, "", "", "the file is empty: want a domain and its descriptors")
	default:
		if line := yamlfield.NextDocument(dec); line > 0 {
			errs.Report(line, "", "", "holds more than one YAML document; want one domain per file")
		}
	}
	// Anchors first: Decode would resolve them too, but the checks below
	// must not run over a document whose aliases did not resolve.
	if errs.Len() > 0 || !errs.Expand(doc) {
		return nil, 0, errs.Err()
	}
	var f fileYAML
	lines, err := yamlfield.Decode(doc, &f)
	root := doc.Content[0]
	b := newBuilder(src.Name, lines, err, root.Line)
	var d *domain
	switch {
	case yamlfield.IsNull(root): // which Decode takes for an empty mapping
		b.errs = append(b.errs, yamlfield.TypeError(root, "", "a mapping"))
	case !b.didNotDecode(""): // else root is not a mapping, as Decode reported
		d = b.top(&f)
	}
	errs.Add(b.sorted()...)
	if err := errs.Err(); err != nil {
		return nil, 0, err
	}
	return d, b.domainLine(), nil
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

package envoy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// failure is a failure_mode as rule files write it. "open", "closed" and
// "local" are the engine's modes; "error" is FailClosed to the engine
// (nothing is admitted for the request), and the service then fails the
// whole call with UNAVAILABLE, so that Envoy's failure_mode_deny decides, as
// with envoyproxy/ratelimit.
type failure struct {
	mode  decide.FailureMode
	call  bool    // "error": an outage fails the call
	set   bool    // written in the file; else the Service's default applies
	share float64 // "local": the share of the limit this instance enforces alone
}

// errorMode is failure_mode error, the default.
var errorMode = failure{mode: decide.FailClosed, call: true}

// failureNames are the failure modes rule files name.
var failureNames = []string{"error", "open", "closed", "local"}

// parseFailure returns the failure mode named s: error, open, closed or
// local (whose share the caller sets).
func parseFailure(s string) (failure, error) {
	if s == "error" {
		return failure{mode: decide.FailClosed, call: true, set: true}, nil
	}
	m, err := decide.ParseFailureMode(s)
	if err != nil {
		return failure{}, fmt.Errorf("failure mode %q is not error, open, closed or local", s)
	}
	return failure{mode: m, set: true}, nil
}

// String returns the mode's name: error, open, closed or local.
func (f failure) String() string {
	if f.call {
		return "error"
	}
	return f.mode.String()
}

func (p *parser) failureMode(n *yaml.Node, path string) (failure, bool) {
	s, ok := p.errs.String(n, path)
	if !ok {
		return failure{}, false
	}
	m, err := parseFailure(s)
	if err != nil {
		p.errs.Add(&ConfigError{Line: n.Line, Path: path, Value: strconv.Quote(s), Reason: "is not error, open, closed or local",
			Fix: yamlfield.DidYouMean(s, failureNames)})
		return failure{}, false
	}
	return m, true
}

// shareKeys are the nodes of local_share and instances written at one
// level (the domain, or a rate_limit), and of its failure_mode; nil when
// absent.
type shareKeys struct {
	mode, share, instances *yaml.Node
}

// localShare sets f.share, the share of the limit failure_mode local
// enforces on each instance, from k (written at path, read by
// decide.ShareOf as floodgate's own config reads it) or else inherited, the
// domain's. A rule that fails local with no share at all is reported by
// usableShare, since only rules the store decides need one. It reports what
// is wrong and returns false.
func (p *parser) localShare(f *failure, k shareKeys, inherited float64, path string) bool {
	var share float64
	var instances int64
	ok := true
	if k.share != nil {
		share, ok = p.errs.Float(k.share, yamlfield.Join(path, "local_share"))
	}
	if k.instances != nil {
		var okInstances bool
		instances, okInstances = p.wholeNumber(k.instances, yamlfield.Join(path, "instances"))
		ok = ok && okInstances
	}
	if !ok {
		return false
	}
	got, err := decide.ShareOf(f.mode, share, instances)
	var fe *decide.FieldError
	switch {
	case err == nil:
		f.share = got
		return true
	case !errors.As(err, &fe):
		p.errs.Report(0, path, "", err.Error())
		return false
	case fe.Field == "Failure": // local without a share of its own
		f.share = inherited
		return true
	}
	key, node := "local_share", k.share
	if fe.Field == "Instances" {
		key, node = "instances", k.instances
	}
	reason := fe.Reason
	if strings.HasPrefix(reason, "applies to") {
		reason += " (this one's failure_mode is " + f.String() + ")"
		if !f.set {
			reason = fe.Reason + " (failure_mode is not set here or on the domain)"
		}
	}
	line := 0
	if node != nil {
		line = node.Line
	}
	p.errs.Report(line, yamlfield.Join(path, key), fe.Value, reason)
	return false
}

// wholeNumber reads a whole number, negative ones too (decide.ShareOf says
// what is wrong with them), and reports any other node.
func (p *parser) wholeNumber(n *yaml.Node, path string) (int64, bool) {
	var v int64
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" && n.Decode(&v) == nil {
		return v, true
	}
	_, ok := p.errs.Uint(n, path, math.MaxInt64) // reports it
	return 0, ok
}

// usableShare reports a rule that fails local without a share, or with one
// its limit cannot be divided by (decide.CheckRule): r's rate_limit, on
// line, written at path with k. Only rules the store decides need a share.
func (p *parser) usableShare(r *Rule, k shareKeys, path string, line int) {
	if r.FailureMode != decide.FailLocal {
		return
	}
	if r.LocalShare == 0 {
		_, err := decide.ShareOf(decide.FailLocal, 0, 0)
		need := strings.TrimPrefix(err.Error(), "Failure local ")
		if k.mode != nil {
			p.errs.Report(k.mode.Line, yamlfield.Join(path, "failure_mode"), "local", need+"; set one beside it, or on the domain")
		} else {
			p.errs.Report(line, path, "", fmt.Sprintf("has failure_mode local from its domain (line %d) and %s; set one here, or on the domain", p.failureLine, need))
		}
		return
	}
	for _, fe := range decide.CheckRule(r.Limit, r.FailureMode, r.LocalShare) {
		if fe.Field != "LocalShare" {
			continue // the limit's own errors are reported where it is read
		}
		// The share is the rule's own or its domain's: name the one written.
		field, node := "local_share", k.share
		if node == nil && k.instances != nil {
			field, node = "instances", k.instances
		}
		at, value, whose := line, fe.Value, "the domain's share "
		if node != nil {
			at, value, whose = node.Line, node.Value, ""
		}
		p.errs.Report(at, yamlfield.Join(path, field), value, whose+fe.Reason)
	}
}

package envoy

import (
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
// enforces on each instance, from k (written at path) or else inherited, the
// domain's. local_share and instances apply to failure_mode local only (a
// rule that needs a share and has none is reported by usableShare). It
// reports what is wrong and returns false.
func (p *parser) localShare(f *failure, k shareKeys, inherited float64, path string) bool {
	var share float64
	var at *yaml.Node
	atKey := "local_share"
	switch {
	case k.share != nil && k.instances != nil:
		p.errs.Report(k.instances.Line, yamlfield.Join(path, "instances"), k.instances.Value, "cannot be used together with local_share; set one of them")
		return false
	case k.share != nil:
		v, ok := p.errs.Float(k.share, yamlfield.Join(path, "local_share"))
		if !ok {
			return false
		}
		if !(v > 0 && v <= 1) {
			p.errs.Report(k.share.Line, yamlfield.Join(path, "local_share"), k.share.Value, "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)")
			return false
		}
		share, at = v, k.share
	case k.instances != nil:
		v, ok := p.errs.Uint(k.instances, yamlfield.Join(path, "instances"), math.MaxUint32)
		if !ok {
			return false
		}
		if v == 0 {
			p.errs.Report(k.instances.Line, yamlfield.Join(path, "instances"), "0", "must be at least 1")
			return false
		}
		share, at, atKey = 1/float64(v), k.instances, "instances"
	}
	if f.mode != decide.FailLocal {
		if at != nil {
			why := "(this one's failure_mode is " + f.String() + ")"
			if !f.set {
				why = "(failure_mode is not set here or on the domain)"
			}
			p.errs.Report(at.Line, yamlfield.Join(path, atKey), at.Value, "applies to failure_mode: local only "+why)
			return false
		}
		return true
	}
	if share == 0 {
		share = inherited
	}
	f.share = share
	return true
}

// usableShare reports a rule that fails local without a share, or with one
// its limit cannot be divided by (decide.LocalLimit): r's rate_limit, on
// line, written at path with k. Only rules the store decides need a share.
func (p *parser) usableShare(r *Rule, k shareKeys, path string, line int) {
	if r.FailureMode != decide.FailLocal {
		return
	}
	if r.LocalShare == 0 {
		const need = "needs local_share (such as 0.25) or instances (such as 4): the share of the limit each instance enforces alone while the store is unavailable"
		if k.mode != nil {
			p.errs.Report(k.mode.Line, yamlfield.Join(path, "failure_mode"), "local", need+"; set one beside it, or on the domain")
		} else {
			p.errs.Report(line, path, "", fmt.Sprintf("has failure_mode local from its domain (line %d) and %s; set one here, or on the domain", p.failureLine, need))
		}
		return
	}
	if _, err := decide.LocalLimit(r.Limit, r.LocalShare); err != nil {
		// The share is the rule's own or its domain's: name the one written.
		field, node := "local_share", k.share
		if node == nil && k.instances != nil {
			field, node = "instances", k.instances
		}
		at, value, whose := line, strconv.FormatFloat(r.LocalShare, 'g', -1, 64), "the domain's share "
		if node != nil {
			at, value, whose = node.Line, node.Value, ""
		}
		p.errs.Report(at, yamlfield.Join(path, field), value, whose+"cannot be used: "+strings.TrimPrefix(err.Error(), "decide: "))
	}
}

package envoy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/rulecheck"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// failure is a failure_mode as rule files write it: "open", "closed",
// "local" and "error" (decide.FailError: the service fails the whole call
// with UNAVAILABLE, so that Envoy's failure_mode_deny decides, as with
// envoyproxy/ratelimit).
type failure struct {
	mode  decide.FailureMode
	call  bool    // "error": mode is FailError
	set   bool    // written in the file; else the Service's default applies
	share float64 // "local": the share of the limit this instance enforces alone
}

// errorMode is failure_mode error, the default.
var errorMode = failure{mode: decide.FailError, call: true}

// failureNames are the failure modes rule files name.
var failureNames = []string{"error", "open", "closed", "local"}

// parseFailure returns the failure mode named s: error, open, closed or
// local (whose share the caller sets).
func parseFailure(s string) (failure, error) {
	if s == "error" {
		return failure{mode: decide.FailError, call: true, set: true}, nil
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
// rulecheck.ShareOf as floodgate's own config reads it) or else inherited, the
// domain's. modeBad is a failure_mode that is written but did not parse
// (and is reported): then only the values are checked, not whether the
// mode takes them. A rule that fails local with no share at all is
// reported by usableShare, since only rules the store decides need one. It
// reports what is wrong and returns false.
func (p *parser) localShare(f *failure, k shareKeys, inherited float64, path string, modeBad bool) bool {
	var share *float64
	var instances *int64
	ok := true
	if k.share != nil {
		// Written empty (~), it is a share of 0, as floodgate's config
		// decodes it; else a number, whose value ShareOf checks.
		v, okShare := 0.0, true
		if !yamlfield.IsNull(k.share) {
			v, okShare = p.errs.Float(k.share, yamlfield.Join(path, "local_share"))
		}
		share, ok = &v, okShare
	}
	if k.instances != nil {
		v, okInstances := int64(0), true
		if !yamlfield.IsNull(k.instances) {
			v, okInstances = p.errs.Int(k.instances, yamlfield.Join(path, "instances"))
		}
		instances, ok = &v, ok && okInstances
	}
	if !ok {
		return false
	}
	got, err := rulecheck.ShareOf(f.mode, modeBad, share, instances)
	var fe *fielderr.Error
	switch {
	case err == nil:
		f.share = got
		return !modeBad || share == nil && instances == nil // a bad mode with no share: nothing else to say
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
		whose := "this one's"
		if path == "" {
			whose = "the domain's"
		}
		switch {
		case f.set:
			reason += " (" + whose + " failure_mode is " + f.String() + ")"
		case path == "":
			reason += " (the domain's failure_mode is not set)"
		default:
			reason += " (failure_mode is not set here or on the domain)"
		}
	}
	line, value := 0, fe.Value
	if node != nil {
		line = node.Line
		if node.Value != "" {
			value = node.Value // as written: .inf, -0.0
		}
	}
	p.errs.Report(line, yamlfield.Join(path, key), value, reason)
	return false
}

// usableShare reports a rule that fails local without a share, or with one
// its limit cannot be divided by (rulecheck.Rule): r's rate_limit, on
// line, written at path with k. Only rules the store decides need a share.
// A share the rule takes from its domain is reported on the domain's
// local_share or instances, naming the rule; none at all is not reported
// when the domain's is written but wrong (that is reported once, where it
// is written).
func (p *parser) usableShare(r *Rule, k shareKeys, path string, line int) {
	if r.FailureMode != decide.FailLocal {
		return
	}
	own := k.share != nil || k.instances != nil
	if r.LocalShare == 0 {
		if !own && p.shareBad {
			return
		}
		_, err := rulecheck.ShareOf(decide.FailLocal, false, nil, nil)
		need := strings.TrimPrefix(err.Error(), "Failure local ")
		if k.mode != nil {
			p.errs.Report(k.mode.Line, yamlfield.Join(path, "failure_mode"), "local", need+"; set one beside it, or on the domain")
		} else {
			p.errs.Report(line, path, "", fmt.Sprintf("has failure_mode local from its domain (line %d) and %s; set one here, or on the domain", p.failureLine, need))
		}
		return
	}
	for _, fe := range rulecheck.Rule(r.Limit, r.FailureMode, r.LocalShare) {
		if fe.Field != "LocalShare" {
			continue // the limit's own errors are reported where it is read
		}
		// The share is the rule's own or its domain's: name the one written.
		keys, at, reason := k, path, fe.Reason
		if !own {
			keys, at, reason = p.shares, "", fmt.Sprintf("%s (for %s, line %d)", fe.Reason, path, line)
			if fe.Err != nil {
				reason = fmt.Sprintf("is not a usable share of the limit of %s (line %d): %s", path, line, strings.TrimPrefix(fe.Err.Error(), "decide: "))
			}
		}
		field, node := "local_share", keys.share
		if node == nil && keys.instances != nil {
			field, node = "instances", keys.instances
		}
		where, value := line, fe.Value
		if node != nil {
			where, value = node.Line, node.Value
		}
		p.errs.Report(where, yamlfield.Join(at, field), value, reason)
	}
}

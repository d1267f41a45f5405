package envoy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/rulecheck"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// failure is a failure_mode as rule files write it: "open", "closed",
// "local" and "error" (decide.FailError: the service fails the whole call
// with UNAVAILABLE, so that Envoy's failure_mode_deny decides, as with
// envoyproxy/ratelimit).
type failure struct {
	mode  decide.FailureMode
	set   bool    // written in the file; else the Service's default applies
	share float64 // "local": the share of the limit this instance enforces alone
}

// errorMode is failure_mode error, the default.
var errorMode = failure{mode: decide.FailError}

// failureNames are the failure modes rule files name.
var failureNames = []string{"error", "open", "closed", "local"}

// parseFailure returns the failure mode named s: error, open, closed or
// local (whose share the caller sets).
func parseFailure(s string) (failure, error) {
	if s == "error" {
		return failure{mode: decide.FailError, set: true}, nil
	}
	m, err := decide.ParseFailureMode(s)
	if err != nil {
		return failure{}, fmt.Errorf("failure mode %q is not error, open, closed or local", s)
	}
	return failure{mode: m, set: true}, nil
}

// String returns the mode's name: error, open, closed or local.
func (f failure) String() string { return f.mode.String() }

// failureMode returns the failure mode s written at path, and false if
// it is wrong (reported).
func (b *builder) failureMode(s yamlfield.Scalar[string], path string) (failure, bool) {
	if b.didNotDecode(path) {
		return failure{}, false
	}
	m, err := parseFailure(s.Value)
	if err != nil {
		b.errs = append(b.errs, &ConfigError{Line: s.Line, Path: path, Value: strconv.Quote(s.Value), Reason: "is not error, open, closed or local",
			Fix: yamlfield.DidYouMean(s.Value, failureNames)})
		return failure{}, false
	}
	return m, true
}

// shareKeys are failure_mode, local_share and instances as written at one
// level: the domain (path "") or a rate_limit.
type shareKeys struct {
	path      string
	mode      yamlfield.Scalar[string]
	share     yamlfield.Scalar[float64]
	instances yamlfield.Scalar[int64]
}

// at returns the path of key at the level.
func (k shareKeys) at(key string) string { return yamlfield.Join(k.path, key) }

// written returns the share written at the level, local_share or else
// instances: its key, text and line; ok is false if neither is written.
func (k shareKeys) written() (key, text string, line int, ok bool) {
	switch {
	case k.share.Set:
		return "local_share", k.share.Text, k.share.Line, true
	case k.instances.Set:
		return "instances", k.instances.Text, k.instances.Line, true
	}
	return "local_share", "", 0, false
}

// localShare sets f.share, the share of the limit failure_mode local
// enforces on each instance, from k (checked by rulecheck.ShareOf, as
// floodgate's own config checks it) or else inherited, the domain's.
// modeBad is a failure_mode that is written but wrong (and reported):
// then only the values are checked, not whether the mode takes them. A
// rule that fails local with no share at all is reported by usableShare,
// since only rules the store decides need one. It reports what is wrong
// and returns false.
func (b *builder) localShare(f *failure, k shareKeys, inherited float64, modeBad bool) bool {
	if b.didNotDecode(k.at("local_share")) || b.didNotDecode(k.at("instances")) {
		return false
	}
	// Written empty (~), either is 0, as floodgate's config decodes it.
	var share *float64
	var instances *int64
	if k.share.Set {
		share = &k.share.Value
	}
	if k.instances.Set {
		instances = &k.instances.Value
	}
	got, err := rulecheck.ShareOf(f.mode, modeBad, share, instances)
	var fe *fielderr.Error
	switch {
	case err == nil:
		f.share = got
		return !modeBad || share == nil && instances == nil // a bad mode with no share: nothing else to say
	case !errors.As(err, &fe):
		b.report(0, k.path, "", err.Error())
		return false
	case fe.Field == "Failure": // local without a share of its own
		f.share = inherited
		return true
	}
	key, text, line := "local_share", k.share.Text, k.share.Line
	if fe.Field == "Instances" {
		key, text, line = "instances", k.instances.Text, k.instances.Line
	}
	reason := fe.Reason
	if strings.HasPrefix(reason, "applies to") {
		reason += " (" + b.modeSaid(f, k.path) + ")"
	}
	value := fe.Value
	if text != "" {
		value = text // as written: .inf, -0.0, ~
	}
	b.report(line, k.at(key), value, reason)
	return false
}

// modeSaid says which failure_mode f is, for a share written at path
// where f does not take one.
func (b *builder) modeSaid(f *failure, path string) string {
	whose := "this one's"
	if path == "" {
		whose = "the domain's"
	}
	switch {
	case f.set:
		return whose + " failure_mode is " + f.String()
	case path == "":
		return "the domain's failure_mode is not set"
	}
	return "failure_mode is not set here or on the domain"
}

// usableShare reports a rule that fails local without a share, or with one
// its limit cannot be divided by (rulecheck.Rule): r's rate_limit, on
// line, written with k. Only rules the store decides need a share. A
// share the rule takes from its domain is reported on the domain's
// local_share or instances, naming the rule; none at all is not reported
// when the domain's is written but wrong (that is reported once, where it
// is written).
func (b *builder) usableShare(r *Rule, k shareKeys, line int) {
	if r.FailureMode != decide.FailLocal {
		return
	}
	_, _, _, own := k.written()
	if r.LocalShare == 0 {
		if !own && b.shareBad {
			return
		}
		_, err := rulecheck.ShareOf(decide.FailLocal, false, nil, nil)
		need := strings.TrimPrefix(err.Error(), "Failure local ")
		if k.mode.Set {
			b.report(k.mode.Line, k.at("failure_mode"), "local", need+"; set one beside it, or on the domain")
		} else {
			b.report(line, k.path, "", fmt.Sprintf("has failure_mode local from its domain (line %d) and %s; set one here, or on the domain", b.shares.mode.Line, need))
		}
		return
	}
	for _, fe := range rulecheck.Rule(r.Limit, r.FailureMode, r.LocalShare) {
		if fe.Field != "LocalShare" {
			continue // the limit's own errors are reported where it is read
		}
		// The share is the rule's own or its domain's: name the one written.
		keys, reason := k, fe.Reason
		if !own {
			keys, reason = b.shares, fmt.Sprintf("%s (for %s, line %d)", fe.Reason, k.path, line)
			if fe.Err != nil {
				reason = fmt.Sprintf("is not a usable share of the limit of %s (line %d): %s", k.path, line, fe.Err.Error())
			}
		}
		key, text, at, ok := keys.written()
		where, value := line, fe.Value
		if ok {
			where, value = at, text
		}
		b.report(where, keys.at(key), value, reason)
	}
}

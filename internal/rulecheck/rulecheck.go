// Package rulecheck checks the parts of a rule every front end and config
// dialect share before they become the engine's checks: its name, its
// limit, failure mode and local share, a file's share or instances, and a
// key prefix. Each answer names the field as the Go types do, so the
// callers report it under their own names (a Config's index, a YAML path).
package rulecheck

import (
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

// Rule reports what is wrong with the parts of a rule that every front end
// passes to a Check as they are: its limit, its failure mode, and its
// local share (checked only against a valid limit). It returns nil when
// all three are usable.
func Rule(limit floodgate.Limit, failure decide.FailureMode, localShare float64) []fielderr.Error {
	var errs []fielderr.Error
	limitErr := limit.Validate()
	if limitErr != nil {
		errs = append(errs, fielderr.Error{Field: "Limit", Value: limit.String(), Reason: "is invalid: " + limitErr.Error(), Err: limitErr})
	}
	if !failure.Valid() || failure == decide.FailError {
		// FailError is Envoy's failure_mode error, which its rule files name.
		errs = append(errs, fielderr.Error{Field: "Failure", Value: failure.String(), Reason: "must be FailOpen, FailClosed or FailLocal"})
	}
	share := strconv.FormatFloat(localShare, 'g', -1, 64)
	if localShare != 0 && failure != decide.FailLocal && failure.Valid() {
		// A share that applies to nothing: most likely Failure was
		// forgotten, and there would be no local fallback at all.
		errs = append(errs, fielderr.Error{Field: "LocalShare", Value: share,
			Reason: "applies to FailLocal only (the failure mode is " + failure.String() + ")"})
	} else if localShare != 0 && limitErr == nil {
		if _, err := limitcheck.Share(limit, localShare); err != nil {
			errs = append(errs, fielderr.Error{Field: "LocalShare", Value: share,
				Reason: "is not a usable share of the limit: " + err.Error(), Err: err})
		}
	}
	return errs
}

// Lease reports what is wrong with a rule's lease under its limit (nil
// lease: none), as a field error naming Lease.Refresh, Lease.TTL,
// Lease.Idle, Lease.MaxShare, or Lease for an algorithm a lease cannot
// keep exact. It returns nil for a usable lease, or when limit is invalid
// (Rule reports that).
func Lease(limit floodgate.Limit, lease *decide.LeaseOptions) *fielderr.Error {
	if lease == nil || limit.Validate() != nil {
		return nil
	}
	fe, ok := lease.Validate(limit).(*fielderr.Error)
	if !ok || fe == nil {
		return nil
	}
	out := *fe
	if fe.Field == "Algorithm" {
		out.Field = "Lease"
	} else {
		out.Field = "Lease." + fe.Field
	}
	return &out
}

// ShareOf returns the local share of a rule written in a file: a rule of
// failure mode local sets either its share (above 0, at most 1) or the
// instances that share the store (at least 1: a share of 1/instances), and
// a rule of another mode sets neither (share 0). share and instances are
// nil when the file does not write them; a written 0 is an error. The
// error is a *fielderr.Error naming LocalShare, Instances, or Failure for
// a local rule with no share. With failureBad (a failure mode the file
// writes but cannot be read), only the values are checked.
func ShareOf(failure decide.FailureMode, failureBad bool, share *float64, instances *int64) (float64, error) {
	if failureBad {
		if share == nil && instances == nil {
			return 0, nil
		}
		failure = decide.FailLocal
	}
	var s float64
	var n int64
	shareValue, instancesValue := "", ""
	if share != nil {
		s = *share
		shareValue = strconv.FormatFloat(s, 'g', -1, 64)
	}
	if instances != nil {
		n = *instances
		instancesValue = strconv.FormatInt(n, 10)
	}
	local := failure == decide.FailLocal
	switch {
	case share != nil && instances != nil:
		return 0, &fielderr.Error{Field: "Instances", Value: instancesValue, Reason: "cannot be used together with local_share; set one of them"}
	case instances != nil && n < 1:
		return 0, &fielderr.Error{Field: "Instances", Value: instancesValue, Reason: "must be at least 1"}
	case share != nil && !(s > 0 && s <= 1): // 0, NaN and the infinities too
		return 0, &fielderr.Error{Field: "LocalShare", Value: shareValue, Reason: "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"}
	case !local && share != nil:
		return 0, &fielderr.Error{Field: "LocalShare", Value: shareValue, Reason: "applies to failure_mode: local only"}
	case !local && instances != nil:
		return 0, &fielderr.Error{Field: "Instances", Value: instancesValue, Reason: "applies to failure_mode: local only"}
	case !local:
		return 0, nil
	case instances != nil:
		return 1 / float64(n), nil
	case share == nil:
		return 0, &fielderr.Error{Field: "Failure", Value: "local", Reason: "needs local_share (such as 0.25) or instances (such as 4): " +
			"the share of the limit each instance enforces alone while the store is unavailable"}
	}
	return s, nil
}

// RuleName returns why name cannot name a rule, or "" if it can. A rule's
// name reaches URLs, response headers and metadata, metric labels, logs
// and store keys, so every front end takes the same names: 1 to 64
// letters, digits, '_', '.' or '-', starting with a letter or digit.
func RuleName(name string) string {
	if name == "" {
		return "is required"
	}
	if len(name) > 64 {
		return "must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit (it has " + strconv.Itoa(len(name)) + " bytes)"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letterOrDigit := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !letterOrDigit && (i == 0 || c != '_' && c != '.' && c != '-') {
			return "must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
		}
	}
	return ""
}

// KeyPrefix returns why prefix cannot begin the store keys of a rule (a
// front end's KeyPrefix, the server's store-API namespace), or "" if it
// can.
func KeyPrefix(prefix string) string {
	if strings.ContainsAny(prefix, "{}") {
		return "must not hold '{' or '}': it would give every key one Redis Cluster hash tag"
	}
	return ""
}

package decide

import (
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// FieldError is one field of a front end's rule that cannot make a
// [Check]: the field as the rule types name it (Limit, Failure,
// LocalShare), its value, and why. Front ends report it in their own
// ConfigError, under the rule's index.
//
// As an error it is also how [New] and [CacheOptions.Validate] name a bad
// option (such as "Timeout" or "OverLimitCache.MaxBytes"), so that every
// front end reports the engine's own check under its own field names.
type FieldError struct {
	Field, Value, Reason string
	// Err is the error behind Reason, if any.
	Err error
}

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// CheckRule reports what is wrong with the parts of a rule that every
// front end passes to a Check as they are: its limit, its failure mode,
// and its local share (checked only against a valid limit). It returns
// nil when all three are usable. The rule's name, methods, paths and keys
// are each front end's own to check.
func CheckRule(limit floodgate.Limit, failure FailureMode, localShare float64) []FieldError {
	var errs []FieldError
	limitErr := limit.Validate()
	if limitErr != nil {
		errs = append(errs, FieldError{Field: "Limit", Value: limit.String(), Reason: "is invalid: " + limitErr.Error(), Err: limitErr})
	}
	if !failure.Valid() {
		errs = append(errs, FieldError{Field: "Failure", Value: failure.String(), Reason: "must be FailOpen, FailClosed or FailLocal"})
	}
	if localShare != 0 && failure != FailLocal && failure.Valid() {
		// A share that applies to nothing: most likely Failure was
		// forgotten, and there would be no local fallback at all.
		errs = append(errs, FieldError{Field: "LocalShare", Value: strconv.FormatFloat(localShare, 'g', -1, 64),
			Reason: "applies to FailLocal only (the failure mode is " + failure.String() + ")"})
	} else if localShare != 0 && limitErr == nil {
		if _, err := LocalLimit(limit, localShare); err != nil {
			errs = append(errs, FieldError{Field: "LocalShare", Value: strconv.FormatFloat(localShare, 'g', -1, 64),
				Reason: "is not a usable share of the limit: " + strings.TrimPrefix(err.Error(), "decide: "), Err: err})
		}
	}
	return errs
}

// ShareOf returns the local share of a rule written in a file, where a
// rule of failure mode local sets either its share of the limit (above 0,
// at most 1) or the number of instances that share the store (at least 1:
// a share of 1/instances). share and instances are what the file writes,
// nil when it does not write them: a written 0 is a mistake, not "absent".
// A rule of another failure mode sets neither, and its share is 0; a local
// rule with neither is an error (the engine would take a share of 0 as the
// whole limit, which a file means only by local_share: 1). The error is a
// *FieldError naming LocalShare, Instances, or Failure for a local rule
// that has no share. Both YAML dialects, floodgate's and Envoy's rule
// files, read a share through it, so the same mistake gets the same answer.
//
// failureBad says that the file writes a failure mode that it cannot
// read (and reports): then only the values are checked, as if the mode
// were local, not whether the mode takes them; with neither written, the
// share is 0 and there is no error.
func ShareOf(failure FailureMode, failureBad bool, share *float64, instances *int64) (float64, error) {
	if failureBad {
		if share == nil && instances == nil {
			return 0, nil
		}
		failure = FailLocal
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
	switch {
	case share != nil && instances != nil:
		return 0, &FieldError{Field: "Instances", Value: instancesValue, Reason: "cannot be used together with local_share; set one of them"}
	case instances != nil && n < 1:
		return 0, &FieldError{Field: "Instances", Value: instancesValue, Reason: "must be at least 1"}
	case share != nil && !(s > 0 && s <= 1): // 0, NaN and the infinities too
		return 0, &FieldError{Field: "LocalShare", Value: shareValue, Reason: "must be above 0 and at most 1 (0.25: each instance enforces a quarter of the limit)"}
	case failure != FailLocal && share != nil:
		return 0, &FieldError{Field: "LocalShare", Value: shareValue, Reason: "applies to failure_mode: local only"}
	case failure != FailLocal && instances != nil:
		return 0, &FieldError{Field: "Instances", Value: instancesValue, Reason: "applies to failure_mode: local only"}
	case failure != FailLocal:
		return 0, nil
	case instances != nil:
		return 1 / float64(n), nil
	case share == nil:
		return 0, &FieldError{Field: "Failure", Value: "local", Reason: "needs local_share (such as 0.25) or instances (such as 4): " +
			"the share of the limit each instance enforces alone while the store is unavailable"}
	}
	return s, nil
}

// Error returns the field, its value and the reason.
func (e *FieldError) Error() string {
	if e.Value == "" {
		return e.Field + " " + e.Reason
	}
	return e.Field + " " + e.Value + " " + e.Reason
}

// CheckRuleName returns why name cannot name a rule of the library front
// ends (the middleware, the gRPC interceptors), or "" if it can: a rule's
// name reaches response headers and metadata, logs and store keys, so it
// is required and printable ASCII.
func CheckRuleName(name string) string {
	if name == "" {
		return "is required"
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return "must be printable ASCII"
		}
	}
	return ""
}

// CheckKeyPrefix returns why prefix cannot begin the store keys of a
// [KeySpace] (a front end's KeyPrefix, the server's store-API namespace),
// or "" if it can.
func CheckKeyPrefix(prefix string) string {
	if strings.ContainsAny(prefix, "{}") {
		return "must not hold '{' or '}': it would give every key one Redis Cluster hash tag"
	}
	return ""
}

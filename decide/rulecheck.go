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
type FieldError struct {
	Field, Value, Reason string
	// Err is the error behind Reason, if any.
	Err error
}

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
	if localShare != 0 && limitErr == nil {
		if _, err := LocalLimit(limit, localShare); err != nil {
			errs = append(errs, FieldError{Field: "LocalShare", Value: strconv.FormatFloat(localShare, 'g', -1, 64),
				Reason: "is not a usable share of the limit: " + err.Error(), Err: err})
		}
	}
	return errs
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

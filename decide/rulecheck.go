package decide

import (
	"strconv"

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

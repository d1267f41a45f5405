// Package fielderr is the error of one named field that cannot be used:
// the engine's options, a front end's rule, a rule file's share. Front ends
// and config report it under their own field names.
package fielderr

// Error is one field that cannot be used: the field as the caller's types
// name it (Limit, Failure, LocalShare, Timeout), its value, and why.
type Error struct {
	Field, Value, Reason string
	// Err is the error behind Reason, if any.
	Err error
}

// Error returns the field, its value and the reason.
func (e *Error) Error() string {
	if e.Value == "" {
		return e.Field + " " + e.Reason
	}
	return e.Field + " " + e.Value + " " + e.Reason
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

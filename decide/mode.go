package decide

import (
	"fmt"
	"strconv"
)

// FailureMode says what a check does when the store cannot decide it in
// time (an error matching [floodgate.ErrStoreUnavailable], or the decision's
// deadline passing). It applies to nothing else: a store error that is not
// an outage never admits.
type FailureMode uint8

const (
	// FailOpen lets the request through as if the check did not exist (the
	// zero value): availability first, for public APIs.
	FailOpen FailureMode = iota
	// FailClosed rejects the request as unavailable (503, gRPC UNAVAILABLE):
	// for routes where an unlimited client is worse than an outage, such as
	// login or payment endpoints.
	FailClosed
	// FailLocal keeps limiting while the store is unavailable: each
	// instance decides the check alone, in memory, at its share of the
	// limit ([Check.LocalShare]), and the outcome says so
	// ([Outcome.Local]); when the store answers again, the next decision is
	// the shared one. A check without a key ([Check.Err]) fails open.
	FailLocal
	// FailError rejects the request as unavailable, as FailClosed does, and
	// is the one a Result names when both could not decide. A front end
	// whose protocol tells the two apart fails the whole call as an error
	// (Envoy's failure_mode error), where FailClosed answers over the
	// limit; the HTTP and gRPC front ends answer both alike.
	FailError
)

// String returns "open", "closed", "local" or "error".
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	case FailError:
		return "error"
	}
	return "FailureMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseFailureMode returns the mode named s: "open", "closed" or "local".
// FailError has no name in floodgate's own configuration: Envoy's rule
// files call it "error".
func ParseFailureMode(s string) (FailureMode, error) {
	switch s {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	case "local":
		return FailLocal, nil
	}
	return 0, fmt.Errorf("failure mode %q is not open, closed or local", s)
}

// Valid reports whether m is one of the modes.
func (m FailureMode) Valid() bool { return m <= FailError }

// UnmarshalText implements [encoding.TextUnmarshaler].
func (m *FailureMode) UnmarshalText(b []byte) error {
	v, err := ParseFailureMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Verdict is why a check, or a whole request, was admitted or not.
type Verdict uint8

const (
	// Admitted: within every enforced limit (for a FailLocal check the
	// store could not decide, within its local share), or a fail-open check
	// could not be decided.
	Admitted Verdict = iota
	// Denied: over a limit (or a cached denial's, or a FailLocal check's
	// local share). Nothing was consumed.
	Denied
	// Unavailable: the store could not decide in time and a fail-closed
	// check needed it.
	Unavailable
	// StoreError: the store failed in a way that is not an outage (a bad
	// script reply, a misconfiguration). Never admits; front ends answer
	// 500 or gRPC INTERNAL.
	StoreError
	// Invalid: the caller's input cannot be decided (a cost below 1 or above
	// the limit's quota, an invalid limit). Front ends answer 400 or gRPC
	// INVALID_ARGUMENT, or map it to their protocol.
	Invalid
)

var verdictNames = [...]string{
	Admitted:    "admitted",
	Denied:      "denied",
	Unavailable: "unavailable",
	StoreError:  "store_error",
	Invalid:     "invalid",
}

// String returns the verdict's name, such as "admitted" or "store_error".
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

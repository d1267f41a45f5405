// Package problem writes RFC 9457 problem details (application/problem+json)
// for floodgate's HTTP front ends.
package problem

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// ContentType is the media type of problem details.
const ContentType = "application/problem+json"

// QuotaExceeded is the problem type of a request over its rate limit, from
// the IETF RateLimit header fields draft.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// QuotaExceededTitle is the title the draft registers for QuotaExceeded.
const QuotaExceededTitle = "Request cannot be satisfied as assigned quota has been exceeded"

// LocalShareNote follows a limit that this instance enforced alone while
// the store was unavailable (failure mode local), in every front end's
// description of a denial.
const LocalShareNote = ", this instance's share while the store is unavailable"

// Quota returns the problem of a request that policy (a rule's name)
// denied: status is 429, or a forward-auth deny status; limit describes
// the rule's limit, or with local the share of it this instance enforced
// alone while the store was unavailable (failure mode local). Every front
// end's denial body is this one.
func Quota(status int, policy, limit string, local bool) Details {
	if local {
		limit += LocalShareNote
	}
	return Details{Type: QuotaExceeded, Title: QuotaExceededTitle, Status: status,
		Detail:           fmt.Sprintf("The request exceeds the quota of policy %q: %s. Retry after the number of seconds in Retry-After.", policy, limit),
		ViolatedPolicies: []string{policy}}
}

// Details is an RFC 9457 problem. Type defaults to "about:blank" and Title to
// the status text.
type Details struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	Instance         string   `json:"instance,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// Kind names the kind of a server failure (a 5xx), such as
	// "store_error".
	Kind string `json:"kind,omitempty"`
	// RequestID is a server failure's id, which the server's log line of
	// it carries.
	RequestID string `json:"request_id,omitempty"`
}

// Write sends p with its status. Headers already set on w (such as
// Retry-After) are kept.
func Write(w http.ResponseWriter, p Details) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: every field marshals
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(p.Status) + `}`)
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// Error writes a problem with the given status and detail.
func Error(w http.ResponseWriter, status int, detail string) {
	Write(w, Details{Status: status, Detail: detail})
}

// The kinds of a server failure (a 5xx answer), named in its body as
// "kind".
const (
	// KindStoreError: the store answered with an error that is no outage.
	KindStoreError = "store_error"
	// KindStoreUnavailable: the store could not be reached in time.
	KindStoreUnavailable = "store_unavailable"
	// KindOverloaded: the server was at its limit of requests in flight.
	KindOverloaded = "overloaded"
	// KindInternal: the server failed on its own.
	KindInternal = "internal"
)

// HeaderRequestID carries a server failure's request id, which its body
// and the server's log line of it also carry.
const HeaderRequestID = "X-Request-Id"

// NewRequestID returns a fresh request id for a server failure.
func NewRequestID() string { return rand.Text()[:16] }

// Failure answers a request the server could not serve (status 5xx): a
// problem naming the kind of failure, with detail for the caller and a
// fresh request id, also sent as X-Request-Id and never cached. It returns
// the id, for the log line that holds the error itself: an error's text
// (a store's internals) never goes to the caller.
func Failure(w http.ResponseWriter, status int, kind, detail string) string {
	id := NewRequestID()
	w.Header()[HeaderRequestID] = []string{id}
	w.Header()["Cache-Control"] = []string{"no-store"}
	Write(w, Details{Status: status, Detail: detail, Kind: kind, RequestID: id})
	return id
}

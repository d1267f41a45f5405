// Package problem writes RFC 9457 problem details (application/problem+json)
// for floodgate's HTTP front ends.
package problem

import (
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

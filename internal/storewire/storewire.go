// Package storewire is the wire format of floodgate's store API: the JSON
// bodies of POST /v1/store/allow, /v1/store/batch, /v1/store/refund and
// /v1/store/reset, and the one mapping between the store's error kinds and
// the API's. The server (package server) answers them; the remote store
// (package remotestore) sends them. Neither imports the other, so the format
// lives here once.
package storewire

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/storeerr"
)

// The store API's paths, all POST.
const (
	PathAllow  = "/v1/store/allow"
	PathBatch  = "/v1/store/batch"
	PathRefund = "/v1/store/refund"
	PathReset  = "/v1/store/reset"
)

// Bounds of a store API request.
const (
	// MaxBodyBytes bounds a request body: keys are arbitrary bytes, and the
	// stores accept long ones.
	MaxBodyBytes = 1 << 20
	// MaxBatchItems bounds the items of one batch.
	MaxBatchItems = 256
)

// Limit is a floodgate.Limit on the wire; the window is in whole
// microseconds, the resolution every store decides at.
type Limit struct {
	Algorithm string `json:"algorithm"`
	Quota     int64  `json:"quota"`
	WindowUs  int64  `json:"window_us"`
	Refill    int64  `json:"refill,omitempty"`
}

// FromLimit returns l on the wire.
func FromLimit(l floodgate.Limit) Limit {
	return Limit{Algorithm: l.Algorithm.String(), Quota: l.Quota, WindowUs: l.Window.Microseconds(), Refill: l.Refill}
}

// Limit returns the floodgate.Limit, validated: the error matches
// floodgate.ErrInvalidLimit.
func (w Limit) Limit() (floodgate.Limit, error) {
	a, err := floodgate.ParseAlgorithm(w.Algorithm)
	if err != nil {
		return floodgate.Limit{}, err
	}
	if w.WindowUs > math.MaxInt64/int64(time.Microsecond) {
		return floodgate.Limit{}, &floodgate.LimitError{Field: "Window", Value: fmt.Sprintf("%dµs", w.WindowUs),
			Reason: "is longer than any limit accepts"}
	}
	l := floodgate.Limit{Algorithm: a, Quota: w.Quota, Window: time.Duration(w.WindowUs) * time.Microsecond, Refill: w.Refill}
	return l, l.Validate()
}

// Request is the body of allow, refund and reset, and one item of a batch.
// The key is in Key when it is valid UTF-8 (the JSON string) and otherwise
// in KeyBase64 (standard base64): exactly one of them is set.
type Request struct {
	Key       *string `json:"key,omitempty"`
	KeyBase64 []byte  `json:"key_base64,omitempty"`
	Limit     Limit   `json:"limit"`
	// Cost is the request's cost (allow, refund and batch items); a reset
	// has none.
	Cost int64 `json:"cost,omitempty"`
	// NowUs is the time of the call in Unix microseconds, sent only by a
	// client with its own clock, to a server that decides at the client's
	// time (tests and simulations); 0 otherwise. Batch items leave it 0:
	// the batch carries it.
	NowUs int64 `json:"now_us,omitempty"`
}

// NewRequest returns the request for key under l with cost n.
func NewRequest(key string, l floodgate.Limit, n int64) Request {
	r := Request{Limit: FromLimit(l), Cost: n}
	if utf8.ValidString(key) {
		r.Key = &key
	} else {
		r.KeyBase64 = []byte(key)
	}
	return r
}

// StoreKey returns the request's key, or an error if it has none or both.
func (r *Request) StoreKey() (string, error) {
	switch {
	case r.Key != nil && r.KeyBase64 != nil:
		return "", errors.New(`"key" and "key_base64" are both set; send one`)
	case r.Key != nil:
		return *r.Key, nil
	case r.KeyBase64 != nil:
		return string(r.KeyBase64), nil
	}
	return "", errors.New(`"key" (a string) or "key_base64" (bytes, in base64) is required`)
}

// BatchRequest is the body of POST /v1/store/batch.
type BatchRequest struct {
	Items []Request `json:"items"`
	NowUs int64     `json:"now_us,omitempty"`
}

// Decision is a floodgate.Decision on the wire, its delays exact in
// microseconds. It is the 200 answer of allow.
type Decision struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterUs int64 `json:"retry_after_us"`
	ResetAfterUs int64 `json:"reset_after_us"`
}

// FromDecision returns d on the wire.
func FromDecision(d floodgate.Decision) Decision {
	return Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfterUs: d.RetryAfter.Microseconds(), ResetAfterUs: d.ResetAfter.Microseconds()}
}

// Decision returns the floodgate.Decision.
func (d Decision) Decision() floodgate.Decision {
	return floodgate.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: time.Duration(d.RetryAfterUs) * time.Microsecond, ResetAfter: time.Duration(d.ResetAfterUs) * time.Microsecond}
}

// BatchResult is one item's outcome in a BatchResponse: Decision or Error,
// and RefundError when the store could not give an admitted item back.
type BatchResult struct {
	Decision    *Decision `json:"decision,omitempty"`
	Error       *Error    `json:"error,omitempty"`
	RefundError *Error    `json:"refund_error,omitempty"`
}

// BatchResponse is the 200 answer of POST /v1/store/batch, one result per
// item, in order.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
}

// The error kinds: the "kind" member of a problem answer and of a batch
// item's error.
const (
	KindInvalidLimit     = "invalid_limit"      // 400, floodgate.ErrInvalidLimit
	KindInvalidCost      = "invalid_cost"       // 400, floodgate.ErrInvalidCost
	KindCostExceedsLimit = "cost_exceeds_limit" // 400, floodgate.ErrCostExceedsLimit
	KindBadRequest       = "bad_request"        // 400 or 413: the body is not a request
	KindUnavailable      = "unavailable"        // 503, floodgate.ErrStoreUnavailable
	KindStoreError       = "store_error"        // 500, any other store error
)

// Error is a store error on the wire.
type Error struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// NewError returns err on the wire, its kind from the store's sentinels. A
// context's deadline is an outage, as the engine counts it.
func NewError(err error) *Error {
	kind := KindStoreError
	switch {
	case errors.Is(err, floodgate.ErrInvalidLimit):
		kind = KindInvalidLimit
	case errors.Is(err, floodgate.ErrInvalidCost):
		kind = KindInvalidCost
	case errors.Is(err, floodgate.ErrCostExceedsLimit):
		kind = KindCostExceedsLimit
	case storeerr.Outage(err):
		kind = KindUnavailable
	}
	return &Error{Kind: kind, Detail: err.Error()}
}

// Status returns the HTTP status of an answer of e's kind.
func (e *Error) Status() int {
	switch e.Kind {
	case KindInvalidLimit, KindInvalidCost, KindCostExceedsLimit, KindBadRequest:
		return http.StatusBadRequest
	case KindUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Err returns the error a client reports for e: it matches the sentinel of
// e's kind (floodgate.ErrInvalidLimit, ErrInvalidCost, ErrCostExceedsLimit,
// ErrStoreUnavailable), and for any other kind, none of them: a store error
// that never admits.
func (e *Error) Err() error {
	var sentinel error
	switch e.Kind {
	case KindInvalidLimit:
		sentinel = floodgate.ErrInvalidLimit
	case KindInvalidCost:
		sentinel = floodgate.ErrInvalidCost
	case KindCostExceedsLimit:
		sentinel = floodgate.ErrCostExceedsLimit
	case KindUnavailable:
		sentinel = floodgate.ErrStoreUnavailable
	default:
		return fmt.Errorf("floodgate server: %s: %s", e.Kind, e.Detail)
	}
	return fmt.Errorf("%w: floodgate server: %s", sentinel, strings.TrimPrefix(e.Detail, sentinel.Error()+": "))
}

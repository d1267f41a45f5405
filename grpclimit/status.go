package grpclimit

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// The rate-limit metadata keys: the HTTP header names in lower case, as
// gRPC metadata keys are.
const (
	// MetadataPolicy lists every enforced rule of the call: its quota and
	// window (HTTP's RateLimit-Policy).
	MetadataPolicy = "ratelimit-policy"
	// MetadataRateLimit is what remains of the most restrictive rule, and
	// when (HTTP's RateLimit).
	MetadataRateLimit = "ratelimit"
	// MetadataLimit is the most restrictive rule's quota.
	MetadataLimit = "x-ratelimit-limit"
	// MetadataRemaining is what remains of it.
	MetadataRemaining = "x-ratelimit-remaining"
	// MetadataReset is when it is whole again, in Unix epoch seconds.
	MetadataReset = "x-ratelimit-reset"
	// MetadataRetryAfter is a denial's retry delay in whole seconds,
	// rounded up.
	MetadataRetryAfter = "retry-after"
	// MetadataPushback is grpc-go's retry pushback: a client whose retry
	// policy retries the status waits this many milliseconds, the retry
	// delay rounded up, instead of its own backoff.
	MetadataPushback = "grpc-retry-pushback-ms"
	// MetadataFallback, with the value "local", says that the store was
	// unavailable and this instance decided alone at a FailLocal rule's
	// share, as the HTTP front ends' Floodgate-Fallback header does.
	MetadataFallback = "floodgate-fallback"
)

// metadataKeys maps the encoder's canonical header names to metadata keys.
var metadataKeys = [...][2]string{
	{ratelimitheader.HeaderPolicy, MetadataPolicy},
	{ratelimitheader.HeaderRateLimit, MetadataRateLimit},
	{ratelimitheader.HeaderLimit, MetadataLimit},
	{ratelimitheader.HeaderRemaining, MetadataRemaining},
	{ratelimitheader.HeaderReset, MetadataReset},
	{ratelimitheader.HeaderRetryAfter, MetadataRetryAfter},
	{ratelimitheader.HeaderFallback, MetadataFallback},
}

// metadata returns the rate-limit metadata of a decided call, whose rules'
// header pieces are policies: the HTTP front ends' headers with lower-case
// keys, and grpc-retry-pushback-ms beside retry-after. Nil when there is
// nothing to send.
func (l *Limiter) metadata(policies []*ratelimitheader.Policy, res *decide.Result) metadata.MD {
	h := make(http.Header, len(ratelimitheader.Order)+2)
	v := frontend.WriteHeaders(h, l.headers, l.front.Now(), policies, res)
	if len(h) == 0 {
		return nil
	}
	// The same map, its keys renamed to the metadata's lower case.
	md := metadata.MD(h)
	for _, k := range metadataKeys {
		if v, ok := h[k[0]]; ok {
			delete(h, k[0])
			md[k[1]] = v
		}
	}
	if v.Deciding >= 0 && !v.Decision.Allowed {
		md[MetadataPushback] = []string{pushback(v.Decision.RetryAfter)}
	}
	return md
}

// pushback formats a retry delay as grpc-retry-pushback-ms: whole
// milliseconds, rounded up, so a client that waits them is never early.
func pushback(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// retryAfterMD is the metadata of a call a fail-closed rule could not
// decide: retry-after only, as the HTTP front ends send with their 503.
func retryAfterMD(d time.Duration) metadata.MD {
	return metadata.MD{MetadataRetryAfter: {ratelimitheader.RetryAfter(d)}, MetadataPushback: {pushback(d)}}
}

// quotaFailure returns a rule's QuotaFailure detail: marshalled once when
// the rule is loaded, or, with local, for the share of it this instance
// enforced alone.
func quotaFailure(name string, l floodgate.Limit, local bool) (*anypb.Any, error) {
	desc := fmt.Sprintf("the call exceeds the quota of rule %q: %s", name, l)
	if local {
		desc += problem.LocalShareNote
	}
	return anypb.New(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "rule:" + name,
		Description: desc,
		QuotaId:     name,
		QuotaValue:  l.Quota,
	}}})
}

// denied is the status of a call over ru's limit: ResourceExhausted with a
// RetryInfo of the exact delay and a QuotaFailure naming the rule, or, when
// this instance denied alone (o.Local), its local limit.
func denied(ru *rule, o *decide.Outcome) error {
	d := o.Decision
	msg := "rate limit exceeded: rule " + strconv.Quote(ru.name) + "; retry after " + d.RetryAfter.String()
	quota := ru.quota
	if o.Local {
		msg += " (decided by this instance alone: the store is unavailable)"
		if q, err := quotaFailure(ru.name, o.Limit, true); err == nil {
			quota = q
		}
	}
	retry, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	if err != nil { // cannot happen: a RetryInfo marshals
		return status.Error(codes.ResourceExhausted, msg)
	}
	return status.FromProto(&spb.Status{Code: int32(codes.ResourceExhausted), Message: msg, Details: []*anypb.Any{retry, quota}}).Err()
}

// unavailable is the status of a call that the fail-closed rule named rule
// could not decide: Unavailable with a RetryInfo.
func unavailable(rule string, retry time.Duration) error {
	st := status.New(codes.Unavailable, fmt.Sprintf("the rate-limit store cannot decide and rule %q fails closed; retry after %s", rule, retry))
	if withRetry, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = withRetry
	}
	return st.Err()
}

// storeFailed is the status of a call a store error kept from being
// decided: Internal, never admitted.
func storeFailed(err error) error {
	return status.Error(codes.Internal, fmt.Sprintf("the rate-limit store failed; the call was not let through: %v", err))
}

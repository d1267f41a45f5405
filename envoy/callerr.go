package envoy

import (
	"errors"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
)

// callError translates a verdict that fails the whole call: a store error
// (INTERNAL, whatever the failure mode), an invalid request (INVALID_ARGUMENT,
// naming the descriptor's hits for a cost the rule's algorithm does not take
// in one request), and an outage the engine decided by a rule whose failure
// mode is error (UNAVAILABLE).
func callError(descs []*ratelimitv3.RateLimitDescriptor, ds []descriptor, checks []decide.Check, res *decide.Result) error {
	switch res.Verdict {
	case decide.StoreError:
		return status.Errorf(codes.Internal, "rule %s: %v", checks[res.Deciding].Rule, res.Err())
	case decide.Invalid:
		err := res.Err()
		for i := range ds {
			if d := &ds[i]; d.kind == kindCheck && d.check == res.Deciding && errors.Is(err, floodgate.ErrInvalidCost) {
				field := "hits_addend"
				if descs[i].GetHitsAddend() != nil {
					field = fmt.Sprintf("descriptors[%d].hits_addend", i)
				}
				if cause := errors.Unwrap(err); cause != nil {
					err = cause // without the engine's rule name: the field names it
				}
				return status.Errorf(codes.InvalidArgument, "%s %d: %v", field, d.cost, err)
			}
		}
		return status.Errorf(codes.InvalidArgument, "rule %s: %v", checks[res.Deciding].Rule, err)
	case decide.Unavailable:
		if c := &checks[res.Deciding]; c.Failure == decide.FailError {
			return status.Errorf(codes.Unavailable, "rule %s: %v", c.Rule, res.Err())
		}
	}
	return nil
}

// validate answers INVALID_ARGUMENT for requests the reference rejects and
// descriptors Envoy's own validation rejects.
func validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return status.Errorf(codes.InvalidArgument, "descriptors[%d]: entries must not be empty", i)
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d]: key must not be empty", i, j)
			}
		}
	}
	return nil
}

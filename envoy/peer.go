package envoy

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate/decide"
	"google.golang.org/protobuf/types/known/structpb"
)

// peerHeaders returns envoyproxy/ratelimit's response headers
// (LIMIT_RESPONSE_HEADERS_ENABLED) for an answer: the limit, remaining and
// reset (seconds until the clock-aligned unit ends) of the descriptor
// closest to its limit, or of the last one over it, as the reference picks
// them, among those that may appear in a header (inHeaders). Unlike the
// reference, a shadow descriptor is never picked (the deliberate difference
// "shadow-not-in-headers"), nor one a fail-open rule let through undecided.
func (s *Service) peerHeaders(ds []descriptor, res *decide.Result, resp *rlsv3.RateLimitResponse, now time.Time) []*corev3.HeaderValue {
	var most *rlsv3.RateLimitResponse_DescriptorStatus
	mostAt := -1
	least := uint32(math.MaxUint32)
	for i, st := range resp.Statuses {
		if !ds[i].inHeaders() || st.GetCurrentLimit() == nil {
			continue
		}
		if d := &ds[i]; d.kind == kindCheck && !res.Outcomes[d.check].Decided && st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		if st.GetLimitRemaining() < least {
			most, mostAt, least = st, i, st.GetLimitRemaining()
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			most, mostAt, least = st, i, 0
		}
	}
	if most == nil {
		return nil
	}
	sec := int64(UnitDuration(most.CurrentLimit.Unit) / time.Second)
	reset := sec - now.Unix()%sec
	limit := uint64(most.CurrentLimit.RequestsPerUnit)
	if d := &ds[mostAt]; d.kind == kindCheck && res.Outcomes[d.check].Local {
		// Decided by this instance alone: its remaining counts against the
		// local quota, which the limit names too.
		limit = uint64(max(0, res.Outcomes[d.check].Decision.Limit))
	}
	return []*corev3.HeaderValue{
		{Key: s.peerHdr.Limit, Value: strconv.FormatUint(limit, 10)},
		{Key: s.peerHdr.Remaining, Value: strconv.FormatUint(uint64(most.LimitRemaining), 10)},
		{Key: s.peerHdr.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}

// dynamicMetadata is the reference's dynamic_metadata of an answer
// (RESPONSE_DYNAMIC_METADATA): the domain, each descriptor (entries as
// "key=value", its limit override, its hitsAddend), the request's
// hitsAddend, the indexes of the quota-mode descriptors over their quota,
// and whether any matched rule is in quota mode.
func dynamicMetadata(req *rlsv3.RateLimitRequest, ds []descriptor, violations []int) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		f := map[string]*structpb.Value{}
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
		if d.GetLimit() != nil {
			f["limit"] = structpb.NewStringValue(d.GetLimit().String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if len(violations) > 0 {
		vs := make([]*structpb.Value, len(violations))
		for i, v := range violations {
			vs[i] = structpb.NewNumberValue(float64(v))
		}
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	quota := false
	for i := range ds {
		// The reference looks at the rules' own quota_mode, not the global one.
		quota = quota || ds[i].rule != nil && ds[i].rule.QuotaMode
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(quota)
	return &structpb.Struct{Fields: fields}
}

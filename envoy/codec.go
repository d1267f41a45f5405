package envoy

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// codec is the gRPC codec of NewGRPCServer: protobuf, as gRPC's own, but
// for the two messages of every call, which it reads and writes directly
// rather than through protobuf's reflection: a RateLimitRequest as Envoy
// sends it (domain, descriptors with entries, limit override, hits_addend
// and is_negative_hits, hits_addend) and a RateLimitResponse with codes,
// statuses (current_limit, limit_remaining, duration_until_reset) and
// response headers. Anything else, such as unknown fields, a field written
// twice, invalid UTF-8 or dynamic metadata, goes to protobuf, so that every
// message means what protobuf makes of it and every error is protobuf's.
type codec struct {
	proto encoding.CodecV2
}

// newCodec returns the codec, delegating to gRPC's registered proto codec.
func newCodec() codec { return codec{proto: encoding.GetCodecV2(grpcproto.Name)} }

// Name is the proto codec's name: the content-subtype is unchanged.
func (c codec) Name() string { return grpcproto.Name }

// Marshal writes v.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rlsv3.RateLimitResponse); ok {
		if b, ok := marshalResponse(r); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	}
	return c.proto.Marshal(v)
}

// Unmarshal reads data into v.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlsv3.RateLimitRequest); ok && data.Len() <= maxDirect {
		var s string
		if len(data) == 1 {
			s = string(data[0].ReadOnlyData())
		} else {
			s = string(data.Materialize())
		}
		if unmarshalRequest(s, r) {
			return nil
		}
	}
	return c.proto.Unmarshal(data, v)
}

// maxDirect bounds the requests the codec reads itself; a larger one is
// protobuf's (gRPC's MaxRecvMsgSize bounds it first).
const maxDirect = 64 << 10

// field is the next field of a message: its number, wire type, and value
// (a varint, or the bytes of a length-delimited field as a substring).
type field struct {
	num    protowire.Number
	typ    protowire.Type
	varint uint64
	bytes  string
}

// next reads the field at the start of s and returns the rest, or false if
// s does not start with a well-formed varint or length-delimited field.
func next(s string) (field, string, bool) {
	tag, n := varint(s)
	if n < 0 || tag>>3 < 1 || tag>>3 > uint64(protowire.MaxValidNumber) {
		return field{}, "", false
	}
	f := field{num: protowire.Number(tag >> 3), typ: protowire.Type(tag & 7)}
	s = s[n:]
	switch f.typ {
	case protowire.VarintType:
		v, n := varint(s)
		if n < 0 {
			return field{}, "", false
		}
		f.varint, s = v, s[n:]
	case protowire.BytesType:
		l, n := varint(s)
		if n < 0 || l > uint64(len(s)-n) {
			return field{}, "", false
		}
		f.bytes, s = s[n:n+int(l)], s[n+int(l):]
	default:
		return field{}, "", false
	}
	return f, s, true
}

// varint reads a varint at the start of s and returns it and its length,
// or -1 if s does not start with one of at most ten bytes (as
// protowire.ConsumeVarint).
func varint(s string) (uint64, int) {
	var v uint64
	for i := 0; i < len(s) && i < 10; i++ {
		c := s[i]
		if i == 9 && c > 1 {
			return 0, -1 // more than 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// text returns a string field, false unless it is valid UTF-8 (which
// protobuf requires of proto3 strings).
func text(f field) (string, bool) {
	return f.bytes, f.typ == protowire.BytesType && utf8.ValidString(f.bytes)
}

// unmarshalRequest reads a RateLimitRequest from s into r (which must be
// empty), or returns false, leaving r untouched, if s holds anything it
// does not read as protobuf would.
func unmarshalRequest(s string, r *rlsv3.RateLimitRequest) bool {
	var (
		domain string
		descs  []*ratelimitv3.RateLimitDescriptor
		hits   uint32 // a scalar written twice: protobuf takes the last
	)
	for len(s) > 0 {
		f, rest, ok := next(s)
		if !ok {
			return false
		}
		s = rest
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			if domain, ok = text(f); !ok {
				return false
			}
		case f.num == 2 && f.typ == protowire.BytesType:
			d, ok := unmarshalDescriptor(f.bytes)
			if !ok {
				return false
			}
			descs = append(descs, d)
		case f.num == 3 && f.typ == protowire.VarintType:
			hits = uint32(f.varint)
		default:
			return false
		}
	}
	r.Domain, r.Descriptors, r.HitsAddend = domain, descs, hits
	return true
}

// unmarshalDescriptor reads a RateLimitDescriptor.
func unmarshalDescriptor(s string) (*ratelimitv3.RateLimitDescriptor, bool) {
	d := &ratelimitv3.RateLimitDescriptor{}
	for len(s) > 0 {
		f, rest, ok := next(s)
		if !ok {
			return nil, false
		}
		s = rest
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			e, ok := unmarshalEntry(f.bytes)
			if !ok {
				return nil, false
			}
			d.Entries = append(d.Entries, e)
		case f.num == 2 && f.typ == protowire.BytesType && d.Limit == nil:
			if d.Limit, ok = unmarshalOverride(f.bytes); !ok {
				return nil, false
			}
		case f.num == 3 && f.typ == protowire.BytesType && d.HitsAddend == nil:
			v, ok := unmarshalUint64Value(f.bytes)
			if !ok {
				return nil, false
			}
			d.HitsAddend = wrapperspb.UInt64(v)
		case f.num == 4 && f.typ == protowire.VarintType:
			d.IsNegativeHits = f.varint != 0
		default:
			return nil, false // a message field twice (merged), or another field
		}
	}
	return d, true
}

// unmarshalEntry reads a RateLimitDescriptor_Entry.
func unmarshalEntry(s string) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
	e := &ratelimitv3.RateLimitDescriptor_Entry{}
	for len(s) > 0 {
		f, rest, ok := next(s)
		if !ok {
			return nil, false
		}
		s = rest
		switch f.num {
		case 1:
			if e.Key, ok = text(f); !ok {
				return nil, false
			}
		case 2:
			if e.Value, ok = text(f); !ok {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return e, true
}

// unmarshalOverride reads a RateLimitDescriptor_RateLimitOverride without a
// unit_multiplier.
func unmarshalOverride(s string) (*ratelimitv3.RateLimitDescriptor_RateLimitOverride, bool) {
	o := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{}
	for len(s) > 0 {
		f, rest, ok := next(s)
		if !ok || f.typ != protowire.VarintType {
			return nil, false
		}
		s = rest
		switch f.num {
		case 1:
			o.RequestsPerUnit = uint32(f.varint)
		case 2:
			o.Unit = typev3.RateLimitUnit(int32(f.varint))
		default:
			return nil, false
		}
	}
	return o, true
}

// unmarshalUint64Value reads a google.protobuf.UInt64Value.
func unmarshalUint64Value(s string) (uint64, bool) {
	var v uint64
	for len(s) > 0 {
		f, rest, ok := next(s)
		if !ok || f.num != 1 || f.typ != protowire.VarintType {
			return 0, false
		}
		v, s = f.varint, rest
	}
	return v, true
}

// marshalResponse writes r as protobuf does (fields in number order,
// defaults left out), or returns false if r sets anything beyond its codes,
// statuses (without quota or unit_multiplier) and response headers. r must
// hold no unknown fields: it is the service's own answer.
func marshalResponse(r *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(r.RequestHeadersToAdd) > 0 || len(r.RawBody) > 0 || r.DynamicMetadata != nil || r.Quota != nil {
		return nil, false
	}
	for _, st := range r.Statuses {
		if st == nil || st.Quota != nil || (st.CurrentLimit != nil && st.CurrentLimit.UnitMultiplier != nil) {
			return nil, false
		}
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h == nil {
			return nil, false
		}
	}
	n := sizeVarintField(1, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		n += sizeMessage(2, sizeStatus(st))
	}
	for _, h := range r.ResponseHeadersToAdd {
		n += sizeMessage(3, sizeHeader(h))
	}
	b := make([]byte, 0, n)
	b = appendVarintField(b, 1, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		b = appendStatus(protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.BytesType), uint64(sizeStatus(st))), st)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = appendHeader(protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.BytesType), uint64(sizeHeader(h))), h)
	}
	return b, true
}

// sizeVarintField is the size of a varint field, 0 for its default.
func sizeVarintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// appendVarintField appends a varint field, nothing for its default.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// sizeStringField is the size of a string or bytes field, 0 when empty.
func sizeStringField(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendStringField appends a string field, nothing when empty.
func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

// sizeMessage is the size of a message field whose message is n bytes.
func sizeMessage(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func sizeStatus(st *rlsv3.RateLimitResponse_DescriptorStatus) int {
	n := sizeVarintField(1, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		n += sizeMessage(2, sizeLimit(l))
	}
	n += sizeVarintField(3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		n += sizeMessage(4, sizeDuration(d))
	}
	return n
}

func appendStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarintField(b, 1, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = appendLimit(protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.BytesType), uint64(sizeLimit(l))), l)
	}
	b = appendVarintField(b, 3, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = appendDuration(protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.BytesType), uint64(sizeDuration(d))), d)
	}
	return b
}

func sizeLimit(l *rlsv3.RateLimitResponse_RateLimit) int {
	return sizeVarintField(1, uint64(l.RequestsPerUnit)) + sizeVarintField(2, uint64(l.Unit)) + sizeStringField(3, len(l.Name))
}

func appendLimit(b []byte, l *rlsv3.RateLimitResponse_RateLimit) []byte {
	b = appendVarintField(b, 1, uint64(l.RequestsPerUnit))
	b = appendVarintField(b, 2, uint64(l.Unit))
	return appendStringField(b, 3, l.Name)
}

// A Duration's int64 and int32 are varints of their two's complement, as
// protobuf writes negative values (ten bytes).
func sizeDuration(d *durationpb.Duration) int {
	return sizeVarintField(1, uint64(d.Seconds)) + sizeVarintField(2, uint64(int64(d.Nanos)))
}

func appendDuration(b []byte, d *durationpb.Duration) []byte {
	b = appendVarintField(b, 1, uint64(d.Seconds))
	return appendVarintField(b, 2, uint64(int64(d.Nanos)))
}

func sizeHeader(h *corev3.HeaderValue) int {
	return sizeStringField(1, len(h.Key)) + sizeStringField(2, len(h.Value)) + sizeStringField(3, len(h.RawValue))
}

func appendHeader(b []byte, h *corev3.HeaderValue) []byte {
	b = appendStringField(b, 1, h.Key)
	b = appendStringField(b, 2, h.Value)
	if len(h.RawValue) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), h.RawValue)
	}
	return b
}

package envoy

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestCodecFields checks that the messages the codec reads and writes
// itself have the fields it knows, and no others: a go-control-plane
// upgrade that adds one fails here rather than losing the field.
func TestCodecFields(t *testing.T) {
	tests := []struct {
		msg  proto.Message
		want []protowire.Number
	}{
		{&rlsv3.RateLimitRequest{}, []protowire.Number{1, 2, 3}},
		{&ratelimitv3.RateLimitDescriptor{}, []protowire.Number{1, 2, 3, 4}},
		{&ratelimitv3.RateLimitDescriptor_Entry{}, []protowire.Number{1, 2}},
		{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{}, []protowire.Number{1, 2, 3}}, // 3, unit_multiplier: protobuf's
		{&wrapperspb.UInt64Value{}, []protowire.Number{1}},
		{&rlsv3.RateLimitResponse{}, []protowire.Number{1, 2, 3, 4, 5, 6, 7}},            // 4 to 7: protobuf's
		{&rlsv3.RateLimitResponse_DescriptorStatus{}, []protowire.Number{1, 2, 3, 4, 5}}, // 5, quota: protobuf's
		{&rlsv3.RateLimitResponse_RateLimit{}, []protowire.Number{1, 2, 3, 4}},           // 4, unit_multiplier: protobuf's
		{&durationpb.Duration{}, []protowire.Number{1, 2}},
		{&corev3.HeaderValue{}, []protowire.Number{1, 2, 3}},
	}
	for _, tt := range tests {
		fields := tt.msg.ProtoReflect().Descriptor().Fields()
		var got []protowire.Number
		for i := range fields.Len() {
			got = append(got, fields.Get(i).Number())
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s has fields %v, the codec knows %v", tt.msg.ProtoReflect().Descriptor().FullName(), got, tt.want)
		}
	}
}

// requests are RateLimitRequests as Envoy sends them, and at the edges of
// what the codec reads itself.
func codecRequests() []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{
		{},
		request("bench", desc("client=c42")),
		request("d", desc("a=1", "b=2"), desc("k"), desc("x=")),
		{Domain: "héllo ✓", HitsAddend: math.MaxUint32, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: strings.Repeat("v", 300)}},
				HitsAddend: wrapperspb.UInt64(0), IsNegativeHits: true},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "", Value: ""}, {}},
				Limit:      &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR},
				HitsAddend: wrapperspb.UInt64(math.MaxUint64)},
			{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{}},
			{},
		}},
		{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
			RequestsPerUnit: 1, Unit: typev3.RateLimitUnit(-3)}}}},
	}
}

// TestCodecRequest checks the codec reads what protobuf reads, and reads
// Envoy's requests itself.
func TestCodecRequest(t *testing.T) {
	c := newCodec()
	for i, want := range codecRequests() {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := &rlsv3.RateLimitRequest{}
		if !unmarshalRequest(string(b), got) {
			t.Errorf("request %d: not read directly: %v", i, want)
			continue
		}
		if !proto.Equal(got, want) {
			t.Errorf("request %d: read %v, want %v", i, got, want)
		}
		// Through the codec, in one buffer and split in many.
		for _, data := range []mem.BufferSlice{{mem.SliceBuffer(b)}, split(b)} {
			got := &rlsv3.RateLimitRequest{}
			if err := c.Unmarshal(data, got); err != nil || !proto.Equal(got, want) {
				t.Errorf("request %d: Unmarshal = %v, %v; want %v", i, got, err, want)
			}
		}
	}
}

// split returns b as a BufferSlice of one-byte buffers.
func split(b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for i := range b {
		s = append(s, mem.SliceBuffer(b[i:i+1]))
	}
	return s
}

// TestCodecRequestFallback checks what the codec leaves to protobuf:
// protobuf's answer, error or not.
func TestCodecRequestFallback(t *testing.T) {
	base, _ := proto.Marshal(request("d", desc("k=v")))
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	withLimit := func(n int) []byte {
		var b []byte
		for range n {
			o, _ := proto.Marshal(&ratelimitv3.RateLimitDescriptor{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(n)}})
			b = append(b, o...)
		}
		return protowire.AppendBytes(tag(2, protowire.BytesType), b)
	}
	unitMultiplier, _ := proto.Marshal(&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, UnitMultiplier: wrapperspb.UInt32(5)}}}})
	tests := []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{"unknown field", append(slices.Clone(base), protowire.AppendVarint(tag(9, protowire.VarintType), 5)...), false},
		{"domain as a varint", protowire.AppendVarint(tag(1, protowire.VarintType), 5), false},
		{"fixed32 field", protowire.AppendFixed32(tag(3, protowire.Fixed32Type), 5), false},
		{"limit twice, merged", withLimit(2), false},
		{"unit_multiplier", unitMultiplier, false},
		{"invalid UTF-8 domain", protowire.AppendBytes(tag(1, protowire.BytesType), []byte{0xff, 0xfe}), true},
		{"invalid UTF-8 value", protowire.AppendBytes(tag(2, protowire.BytesType),
			protowire.AppendBytes(tag(1, protowire.BytesType), protowire.AppendBytes(tag(2, protowire.BytesType), []byte{0xc3}))), true},
		{"truncated", base[:len(base)-1], true},
		{"length past the end", append(tag(1, protowire.BytesType), 50, 'a'), true},
		{"varint of eleven bytes", append(tag(3, protowire.VarintType), bytes.Repeat([]byte{0x80}, 10)...), true},
		{"field 0", []byte{0x00, 0x01}, true},
	}
	c := newCodec()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if unmarshalRequest(string(tt.data), &rlsv3.RateLimitRequest{}) {
				t.Errorf("read directly; want it left to protobuf")
			}
			want := &rlsv3.RateLimitRequest{}
			wantErr := proto.Unmarshal(tt.data, want)
			if (wantErr != nil) != tt.wantErr {
				t.Fatalf("protobuf's error %v, the test expects one: %v", wantErr, tt.wantErr)
			}
			got := &rlsv3.RateLimitRequest{}
			err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.data)}, got)
			if (err != nil) != (wantErr != nil) || (err == nil && !proto.Equal(got, want)) {
				t.Errorf("Unmarshal = %v, %v; protobuf: %v, %v", got, err, want, wantErr)
			}
		})
	}
}

// FuzzCodecRequest checks that on any input the codec answers as protobuf
// does: the same message, or an error when protobuf errs.
func FuzzCodecRequest(f *testing.F) {
	for _, r := range codecRequests() {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	c := newCodec()
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &rlsv3.RateLimitRequest{}
		wantErr := proto.Unmarshal(b, want)
		got := &rlsv3.RateLimitRequest{}
		err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
		if (err != nil) != (wantErr != nil) || (err == nil && !proto.Equal(got, want)) {
			t.Errorf("Unmarshal(%x) = %v, %v; protobuf: %v, %v", b, got, err, want, wantErr)
		}
	})
}

// codecResponses are answers as the service gives them.
func codecResponses() []*rlsv3.RateLimitResponse {
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "per-client", RequestsPerUnit: 1000000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	return []*rlsv3.RateLimitResponse{
		{},
		{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}},
		{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: 999999, DurationUntilReset: durationpb.New(734 * time.Millisecond)}}},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32},
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Unit: rlsv3.RateLimitResponse_RateLimit_YEAR},
				DurationUntilReset: durationpb.New(365 * 24 * time.Hour)},
			{Code: rlsv3.RateLimitResponse_Code(-1), CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{}, DurationUntilReset: durationpb.New(-1500 * time.Millisecond)},
			{DurationUntilReset: &durationpb.Duration{}},
		}, ResponseHeadersToAdd: []*corev3.HeaderValue{
			{Key: "RateLimit-Policy", Value: `"per-client";q=1000000;w=1`}, {Key: "Retry-After", Value: "1"}, {}, {Key: "raw", RawValue: []byte{0, 1, 2}},
		}},
	}
}

// TestCodecResponse checks the codec writes what protobuf writes, byte for
// byte, and leaves what it does not know to protobuf.
func TestCodecResponse(t *testing.T) {
	c := newCodec()
	rng := rand.New(rand.NewPCG(1, 2))
	resps := codecResponses()
	for range 200 { // random statuses
		r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(rng.IntN(3))}
		for range rng.IntN(4) {
			st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(rng.IntN(3)), LimitRemaining: rng.Uint32() >> rng.IntN(32)}
			if rng.IntN(2) == 0 {
				st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: strings.Repeat("n", rng.IntN(200)),
					RequestsPerUnit: rng.Uint32() >> rng.IntN(32), Unit: rlsv3.RateLimitResponse_RateLimit_Unit(rng.IntN(8))}
			}
			if rng.IntN(2) == 0 {
				st.DurationUntilReset = durationpb.New(time.Duration(rng.Int64() >> rng.IntN(64)))
			}
			r.Statuses = append(r.Statuses, st)
		}
		resps = append(resps, r)
	}
	for i, r := range resps {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := marshalResponse(r)
		if !ok {
			t.Errorf("response %d: not written directly: %v", i, r)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("response %d: wrote %x, protobuf %x (%v)", i, got, want, r)
		}
		data, err := c.Marshal(r)
		if err != nil || !bytes.Equal(data.Materialize(), want) {
			t.Errorf("response %d: Marshal = %x, %v; want %x", i, data.Materialize(), err, want)
		}
	}
	for _, r := range []*rlsv3.RateLimitResponse{
		{RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "k"}}},
		{RawBody: []byte("x")},
		{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"domain": structpb.NewStringValue("d")}}},
		{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 3}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 1}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(2)}}}},
	} {
		if _, ok := marshalResponse(r); ok {
			t.Errorf("%v written directly; want it left to protobuf", r)
		}
		want, _ := proto.Marshal(r)
		data, err := c.Marshal(r)
		got := &rlsv3.RateLimitResponse{}
		if err != nil || proto.Unmarshal(data.Materialize(), got) != nil || !proto.Equal(got, r) {
			t.Errorf("Marshal(%v) = %x, %v; protobuf %x", r, data.Materialize(), err, want)
		}
	}
	// Other messages are protobuf's.
	other := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}
	data, err := c.Marshal(other)
	want, _ := proto.Marshal(other)
	if err != nil || !bytes.Equal(data.Materialize(), want) {
		t.Errorf("Marshal(descriptor) = %x, %v; want %x", data.Materialize(), err, want)
	}
	var _ protoreflect.ProtoMessage = other
}

// BenchmarkCodec compares the codec with protobuf on a one-descriptor
// request and its answer.
func BenchmarkCodec(b *testing.B) {
	req, _ := proto.Marshal(request("bench", desc("client=c4242")))
	resp := codecResponses()[2]
	b.Run("unmarshal/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := &rlsv3.RateLimitRequest{}
			if !unmarshalRequest(string(req), r) {
				b.Fatal("not read")
			}
		}
	})
	b.Run("unmarshal/protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(req, &rlsv3.RateLimitRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal/codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := marshalResponse(resp); !ok {
				b.Fatal("not written")
			}
		}
	})
	b.Run("marshal/protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

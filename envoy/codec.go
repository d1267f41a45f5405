package envoy

import (
	"errors"
	"strings"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ServerCodec returns the gRPC server option NewGRPCServer sets: the
// standard protobuf codec, except for a RateLimitRequest whose strings hold
// invalid UTF-8 (Envoy copies header bytes 0x80-0xFF into descriptor
// values). The standard codec fails such a call with INTERNAL, which
// Envoy's default failure_mode_deny=false admits; this one replaces each
// invalid sequence with U+FFFD, so the request is decided like any other
// (values that differ only in their invalid bytes share a key). Every other
// message and error is the standard codec's. A server that registers the
// Service itself should pass this option.
func ServerCodec() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{base: encoding.GetCodecV2(protocodec.Name)})
}

// codec is the standard protobuf codec with invalid UTF-8 in a
// RateLimitRequest's strings replaced. A valid message is decoded by the
// standard codec itself; the type assertion and the rewrite run only after
// a decoding error, so valid messages cost what they cost there.
type codec struct{ base encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c codec) Name() string { return c.base.Name() }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return err
	}
	b, changed, werr := validUTF8(nil, data.Materialize(), req.ProtoReflect().Descriptor(), 0)
	if werr != nil || !changed {
		return err // not invalid UTF-8: the standard codec's error stands
	}
	return proto.Unmarshal(b, req)
}

// maxNesting bounds the message nesting validUTF8 follows, as
// proto.Unmarshal bounds its own.
const maxNesting = 10000

var errMalformed = errors.New("malformed protobuf wire data")

// validUTF8 appends to dst the message of type md encoded in b, with every
// string field that the protobuf decoder checks for UTF-8 made valid
// (strings.ToValidUTF8, U+FFFD), in message fields too, however deeply
// nested (map entries are messages). Other fields are copied as they are.
// changed reports whether a string was rewritten; malformed wire data is
// an error.
func validUTF8(dst, b []byte, md protoreflect.MessageDescriptor, depth int) (out []byte, changed bool, err error) {
	if depth > maxNesting {
		return nil, false, errMalformed
	}
	fields := md.Fields()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false, errMalformed
		}
		dst, b = append(dst, b[:n]...), b[n:]
		fd := fields.ByNumber(num)
		var kind protoreflect.Kind
		if fd != nil {
			kind = fd.Kind()
		}
		switch {
		case typ == protowire.BytesType && kind == protoreflect.StringKind && checksUTF8(fd):
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, false, errMalformed
			}
			if !utf8.Valid(v) {
				v, changed = []byte(strings.ToValidUTF8(string(v), string(utf8.RuneError))), true
			}
			dst, b = protowire.AppendBytes(dst, v), b[m:]
		case typ == protowire.BytesType && kind == protoreflect.MessageKind:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, false, errMalformed
			}
			sub, c, err := validUTF8(nil, v, fd.Message(), depth+1)
			if err != nil {
				return nil, false, err
			}
			dst, b, changed = protowire.AppendBytes(dst, sub), b[m:], changed || c
		case typ == protowire.StartGroupType && kind == protoreflect.GroupKind:
			v, m := protowire.ConsumeGroup(num, b)
			if m < 0 {
				return nil, false, errMalformed
			}
			sub, c, err := validUTF8(dst, v, fd.Message(), depth+1)
			if err != nil {
				return nil, false, err
			}
			dst, b, changed = protowire.AppendTag(sub, num, protowire.EndGroupType), b[m:], changed || c
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return nil, false, errMalformed
			}
			dst, b = append(dst, b[:m]...), b[m:]
		}
	}
	return dst, changed, nil
}

// checksUTF8 reports whether the protobuf decoder refuses invalid UTF-8
// in the string field fd: proto3 fields, and editions fields whose
// utf8_validation is VERIFY (the default), as the decoder decides it.
func checksUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if f, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return f.EnforceUTF8()
		}
		return true
	}
	return fd.Syntax() == protoreflect.Proto3
}

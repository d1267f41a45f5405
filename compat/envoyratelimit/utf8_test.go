package envoyratelimit

import (
	"bytes"
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/envoy"
)

// rawCodec sends a request as the bytes it is, so that a descriptor value
// can hold invalid UTF-8, as Envoy sends a header value's bytes 0x80-0xFF.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// invalidUTF8 is the deliberate difference invalid-utf8-decided: the
// peer's gRPC library fails a request whose value holds \xff with
// INTERNAL (which Envoy's default failure_mode_deny=false admits), every
// time; floodgate decides it: 1 per minute, so the second is OVER_LIMIT.
func (ps *pair) invalidUTF8(t *testing.T) {
	w, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "one_per_minute", Value: "utf8~"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	in := bytes.ReplaceAll(w, []byte("~"), []byte{0xff})
	call := func(svc *service) (rlsv3.RateLimitResponse_Code, error) {
		var out []byte
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.conn.Invoke(ctx, "/"+envoy.ServiceName+"/ShouldRateLimit", &in, &out, grpc.ForceCodec(rawCodec{})); err != nil {
			return 0, err
		}
		resp := &rlsv3.RateLimitResponse{}
		if err := proto.Unmarshal(out, resp); err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode(), nil
	}
	awaitWindow(time.Minute, 2)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if _, err := call(ps.peer); status.Code(err) != codes.Internal {
			t.Errorf("call %d: the peer answered %v, want INTERNAL (if it decides now, drop invalid-utf8-decided)", i+1, err)
		}
		if got, err := call(ps.fg); err != nil || got != want {
			t.Errorf("call %d: floodgate answered %v %v, want %v", i+1, got, err, want)
		}
	}
}

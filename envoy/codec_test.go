package envoy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// rawCodec sends and receives messages as the bytes they are, so that a
// test can send what the generated client refuses to marshal (invalid
// UTF-8), as Envoy, which copies header bytes into descriptors, does.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// withByte marshals m, then replaces every '~' in its wire form with b:
// the same length, so every length prefix stays right.
func withByte(t testing.TB, m proto.Message, b byte) []byte {
	t.Helper()
	w, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(w, []byte("~"), []byte{b})
}

// callRaw calls ShouldRateLimit with the wire bytes in.
func (e *env) callRaw(t testing.TB, in []byte) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	var out []byte
	err := e.conn.Invoke(context.Background(), "/"+ServiceName+"/ShouldRateLimit", &in, &out, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return nil, err
	}
	resp := &rlsv3.RateLimitResponse{}
	if err := proto.Unmarshal(out, resp); err != nil {
		t.Fatal(err)
	}
	return resp, nil
}

// TestInvalidUTF8Decided holds that a descriptor value with invalid UTF-8
// is decided over gRPC (the standard codec fails it with INTERNAL, which
// Envoy admits by default): counted under its own key, with each invalid
// byte as U+FFFD.
func TestInvalidUTF8Decided(t *testing.T) {
	store, _ := memoryStore()
	e := start(t, store, true, Options{}, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	bad := withByte(t, request("edge", desc("remote_address=7.7.7.7~")), 0xff)
	for i := 1; i <= 6; i++ {
		resp, err := e.callRaw(t, bad)
		if err != nil {
			t.Fatalf("call %d with a \\xff value: %v", i, err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 6 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := resp.GetOverallCode(); got != want {
			t.Fatalf("call %d with a \\xff value: %v, want %v", i, got, want)
		}
	}
	// Its own key: the valid value has its whole quota.
	resp, err := e.client.ShouldRateLimit(context.Background(), request("edge", desc("remote_address=7.7.7.7")))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 4 {
		t.Errorf("the valid value after the invalid one's 6 calls: remaining %d, want 4", got)
	}
	// The key is the value with U+FFFD: another invalid byte shares it, and
	// so does the U+FFFD a client may send itself.
	for _, b := range []byte{0xfe, 0x80} {
		resp, err := e.callRaw(t, withByte(t, request("edge", desc("remote_address=7.7.7.7~")), b))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("a \\x%x value: %v %v, want OVER_LIMIT (the U+FFFD key)", b, resp.GetOverallCode(), err)
		}
	}
	if resp, err := e.client.ShouldRateLimit(context.Background(), request("edge", desc("remote_address=7.7.7.7\uFFFD"))); err != nil ||
		resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the value with U+FFFD: %v %v, want OVER_LIMIT", resp.GetOverallCode(), err)
	}
	// Invalid UTF-8 in the domain and the key is decided too.
	resp2, err := e.callRaw(t, withByte(t, request("edge~", desc("remote_address~=1")), 0xc0))
	if err != nil || resp2.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp2.GetStatuses()) != 1 {
		t.Errorf("invalid UTF-8 in the domain and the key: %v %v, want OK (no rule)", resp2, err)
	}
}

// TestCodecOtherErrors holds that the codec replaces nothing but invalid
// UTF-8: malformed wire data still fails the call, and other services'
// messages keep the standard codec's error.
func TestCodecOtherErrors(t *testing.T) {
	store, _ := memoryStore()
	e := start(t, store, true, Options{}, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	good, err := proto.Marshal(request("edge", desc("k=v~")))
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{
		"truncated":                      good[:len(good)-1],
		"truncated, with invalid UTF-8":  bytes.ReplaceAll(good[:len(good)-1], []byte("~"), []byte{0xff}),
		"invalid UTF-8 and a bad varint": append(bytes.ReplaceAll(good, []byte("~"), []byte{0xff}), 0x18, 0xff),
	} {
		if _, err := e.callRaw(t, in); status.Code(err) != codes.Internal {
			t.Errorf("%s: %v, want INTERNAL", name, err)
		}
	}
	// The health service's request keeps the standard error.
	hreq := withByte(t, &healthpb.HealthCheckRequest{Service: "x~"}, 0xff)
	var out []byte
	err = e.conn.Invoke(context.Background(), "/grpc.health.v1.Health/Check", &hreq, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.Internal {
		t.Errorf("health check with invalid UTF-8: %v, want INTERNAL", err)
	}
}

// TestValidUTF8 holds the wire rewrite to every string field at any depth
// (repeated, map keys and values, oneofs) and to nothing else.
func TestValidUTF8(t *testing.T) {
	s, err := structpb.NewStruct(map[string]any{"k~": "v~", "list": []any{"a~", 1.5, map[string]any{"deep~": "x~"}}, "n": 3.0, "ok": true})
	if err != nil {
		t.Fatal(err)
	}
	in := withByte(t, s, 0xff)
	if err := proto.Unmarshal(in, &structpb.Struct{}); err == nil {
		t.Fatal("the test's input is valid UTF-8")
	}
	out, changed, err := validUTF8(nil, in, s.ProtoReflect().Descriptor(), 0)
	if err != nil || !changed {
		t.Fatalf("validUTF8: changed %v, %v", changed, err)
	}
	got := &structpb.Struct{}
	if err := proto.Unmarshal(out, got); err != nil {
		t.Fatal(err)
	}
	want, err := structpb.NewStruct(map[string]any{"k\uFFFD": "v\uFFFD", "list": []any{"a\uFFFD", 1.5, map[string]any{"deep\uFFFD": "x\uFFFD"}}, "n": 3.0, "ok": true})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// Valid input comes back as it was, unchanged.
	valid, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if out, changed, err := validUTF8(nil, valid, want.ProtoReflect().Descriptor(), 0); err != nil || changed || !bytes.Equal(out, valid) {
		t.Errorf("valid input: changed %v, %v, equal %v", changed, err, bytes.Equal(out, valid))
	}
}

// TestJSONInvalidUTF8 holds that POST /json never admits a body with
// invalid UTF-8 silently: raw invalid bytes and lone surrogate escapes are
// refused with 400 and problem details, which Envoy's HTTP callers see as
// errors, not as OK.
func TestJSONInvalidUTF8(t *testing.T) {
	store, _ := memoryStore()
	e := start(t, store, true, Options{}, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	post := func(body string) (int, string) {
		t.Helper()
		res, err := http.Post(e.json, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v` + "\xff" + `"}]}]}`); code != http.StatusBadRequest ||
		!strings.Contains(body, "UTF-8") {
		t.Errorf("raw \\xff: %d %s, want 400 naming UTF-8", code, body)
	}
	if code, body := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v\udcff"}]}]}`); code != http.StatusBadRequest ||
		!strings.Contains(body, "escape") {
		t.Errorf("lone surrogate escape: %d %s, want 400 naming the escape", code, body)
	}
}

// BenchmarkCodecUnmarshal compares decoding a valid one-descriptor request
// with the standard codec and with ServerCodec's: the valid path must cost
// the same.
func BenchmarkCodecUnmarshal(b *testing.B) {
	w, err := proto.Marshal(request("edge", desc("remote_address=192.0.2.7")))
	if err != nil {
		b.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(w)}
	std := encoding.GetCodecV2(protocodec.Name)
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"standard", std}, {"floodgate", codec{base: std}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.codec.Unmarshal(data, &rlsv3.RateLimitRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

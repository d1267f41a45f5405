package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/floodgate-rl/floodgate/grpclimit"
)

// testService answers the grpc_testing TestService: UnaryCall echoes,
// FullDuplexCall answers every message until the client is done.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func (testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (testService) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

func (testService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	return stream.Send(&testpb.StreamingOutputCallResponse{})
}

// serveOpts configures a test server.
type serveOpts struct {
	bufconn  bool                          // an in-memory listener instead of loopback TCP
	register func(*grpc.Server)            // more services
	unary    []grpc.UnaryServerInterceptor // before the limiter
	dial     []grpc.DialOption
}

// serve starts a gRPC server with lim's interceptors and the test service,
// and returns a client connection to it.
func serve(t testing.TB, lim *grpclimit.Limiter, o serveOpts) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(append(o.unary, lim.Unary)...),
		grpc.ChainStreamInterceptor(lim.Stream),
	)
	testpb.RegisterTestServiceServer(srv, testService{})
	if o.register != nil {
		o.register(srv)
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.dial...)
	var target string
	if o.bufconn {
		ln := bufconn.Listen(1 << 20)
		go func() { _ = srv.Serve(ln) }()
		target = "passthrough:///bufconn"
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		target = ln.Addr().String()
	}
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func newLimiter(t testing.TB, cfg grpclimit.Config) *grpclimit.Limiter {
	t.Helper()
	lim, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// details returns a status's RetryInfo delay (-1 without one) and the rule
// its QuotaFailure names ("" without one).
func details(t testing.TB, err error) (time.Duration, string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%v is not a gRPC status", err)
	}
	retry, rule := time.Duration(-1), ""
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			if v := d.GetViolations(); len(v) == 1 {
				rule = v[0].GetQuotaId()
			}
		}
	}
	return retry, rule
}

package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// A gRPC server behind the interceptors: two calls per minute per tenant.
// The third call ends with ResourceExhausted, a RetryInfo saying when to
// retry and a QuotaFailure naming the rule.
func Example() {
	lim, err := grpclimit.New(grpclimit.Config{
		Store: memory.New(),
		Rules: []grpclimit.Rule{
			{Name: "per-tenant", Limit: floodgate.PerMinute(2), Key: grpclimit.Metadata("x-tenant")},
		},
	})
	if err != nil {
		log.Fatal(err) // a *grpclimit.ConfigError naming the field
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary), grpc.ChainStreamInterceptor(lim.Stream))
	testpb.RegisterTestServiceServer(srv, testService{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err == nil {
			fmt.Println("OK, ratelimit:", header.Get("ratelimit-policy")[0])
			continue
		}
		st := status.Convert(err)
		fmt.Println(st.Code(), "retry-after:", trailer.Get("retry-after")[0])
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("  RetryInfo within the minute:", d.GetRetryDelay().AsDuration() <= 60e9)
			case *errdetails.QuotaFailure:
				fmt.Println("  QuotaFailure:", d.GetViolations()[0].GetSubject())
			}
		}
	}
	// Output:
	// OK, ratelimit: "per-tenant";q=2;w=60
	// OK, ratelimit: "per-tenant";q=2;w=60
	// ResourceExhausted retry-after: 60
	//   RetryInfo within the minute: true
	//   QuotaFailure: rule:per-tenant
}

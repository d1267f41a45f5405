package grpclimit_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
	"github.com/floodgate-rl/floodgate/memory"
)

// issue returns a certificate of ca for cn (and uri, if set), for a server
// (127.0.0.1) or a client.
func issue(ca *tlstest.CA, serial int64, cn, uri string, server bool) tls.Certificate {
	l := tlstest.Leaf{CommonName: cn, Server: server, Serial: serial}
	if uri != "" {
		l.URIs = []string{uri}
	}
	return ca.Issue(cn, l).Certificate
}

// TestClientCertificate: over real mutual TLS, each client certificate's
// identity has its own budget; a client without one is not counted by the
// rule.
func TestClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	lim := newLimiter(t, grpclimit.Config{Store: memory.New(), Logger: discard,
		Rules: []grpclimit.Rule{{Name: "per-client", Limit: floodgate.PerHour(2), Key: grpclimit.ClientCertificate()}}})
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{issue(ca, 2, "server", "", true)},
		ClientCAs:    ca.Pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	})), grpc.UnaryInterceptor(lim.Unary))
	testpb.RegisterTestServiceServer(srv, testService{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	dial := func(cert *tls.Certificate) testpb.TestServiceClient {
		cfg := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return testpb.NewTestServiceClient(cc)
	}
	billing := issue(ca, 3, "billing", "spiffe://example.org/billing", false)
	billing2 := issue(ca, 4, "another billing instance", "spiffe://example.org/billing", false)
	search := issue(ca, 5, "search", "", false)
	clients := []struct {
		name   string
		client testpb.TestServiceClient
	}{
		{"billing", dial(&billing)}, {"billing, second instance", dial(&billing2)},
		{"search", dial(&search)}, {"no certificate", dial(nil)},
	}
	admitted := map[string]int{}
	for _, c := range clients {
		for range 3 {
			_, err := c.client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
			switch status.Code(err) {
			case codes.OK:
				admitted[c.name]++
			case codes.ResourceExhausted:
			default:
				t.Fatalf("%s: %v", c.name, err)
			}
		}
	}
	// Both billing instances share the SPIFFE ID's budget of 2.
	want := map[string]int{"billing": 2, "billing, second instance": 0, "search": 2, "no certificate": 3}
	for name, n := range want {
		if admitted[name] != n {
			t.Errorf("%s: admitted %d of 3, want %d", name, admitted[name], n)
		}
	}
}

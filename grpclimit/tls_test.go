package grpclimit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// testCA issues certificates for a TLS test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for cn (and uri, if set), for a server
// (127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, serial int64, cn, uri string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if uri != "" {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestClientCertificate: over real mutual TLS, each client certificate's
// identity has its own budget; a client without one is not counted by the
// rule.
func TestClientCertificate(t *testing.T) {
	ca := newCA(t)
	lim := newLimiter(t, grpclimit.Config{Store: memory.New(), Logger: discard,
		Rules: []grpclimit.Rule{{Name: "per-client", Limit: floodgate.PerHour(2), Key: grpclimit.ClientCertificate()}}})
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, 2, "server", "", true)},
		ClientCAs:    ca.pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13,
	})), grpc.UnaryInterceptor(lim.Unary))
	testpb.RegisterTestServiceServer(srv, testService{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	dial := func(cert *tls.Certificate) testpb.TestServiceClient {
		cfg := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS13}
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
	billing := ca.issue(t, 3, "billing", "spiffe://example.org/billing", false)
	billing2 := ca.issue(t, 4, "another billing instance", "spiffe://example.org/billing", false)
	search := ca.issue(t, 5, "search", "", false)
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

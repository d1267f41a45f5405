package main

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// TestServeEnvoyEnvTLSAndUDS: GRPC_SERVER_USE_TLS with a client CA serves
// the RLS over mutual TLS (a real handshake with certificates made here):
// a client with a certificate of the CA is answered, one without is not.
// GRPC_UDS serves it on a unix socket instead of TCP.
func TestServeEnvoyEnvTLSAndUDS(t *testing.T) {
	srv := redistest.Spawn(t)
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "r.yaml"), []byte("domain: env\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, "rls")
	server := ca.Issue("server", tlstest.Leaf{CommonName: "leaf", Server: true})
	clientCert := ca.Issue("client", tlstest.Leaf{CommonName: "leaf"})
	env := map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "USE_STATSD": "false",
	}
	call := func(conn *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request1("env", "k", "v"))
		return err
	}

	t.Run("mutual TLS", func(t *testing.T) {
		for k, v := range env {
			t.Setenv(k, v)
		}
		t.Setenv("GRPC_SERVER_USE_TLS", "true")
		t.Setenv("GRPC_SERVER_TLS_CERT", server.CertFile)
		t.Setenv("GRPC_SERVER_TLS_KEY", server.KeyFile)
		t.Setenv("GRPC_CLIENT_TLS_CACERT", ca.CertFile)
		base, addr, _, _ := startServeRLS(t, true, "--envoy-env")
		// As the peer's: GRPC_SERVER_USE_TLS covers the gRPC listener; the
		// HTTP port (/healthcheck, probes) stays plain.
		if !strings.HasPrefix(base, "http://") {
			t.Errorf("HTTP API at %s, want plain http:// under --envoy-env", base)
		}
		pool := ca.Pool
		dial := func(certs []tls.Certificate) *grpc.ClientConn {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs})))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return conn
		}
		if err := call(dial([]tls.Certificate{clientCert.Certificate})); err != nil {
			t.Fatalf("a client with a certificate of the CA: %v", err)
		}
		if err := call(dial(nil)); err == nil {
			t.Fatal("a client without a certificate was answered")
		}
		plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		if err := call(plain); err == nil {
			t.Fatal("a plaintext client was answered")
		}
	})
	t.Run("unix socket", func(t *testing.T) {
		for k, v := range env {
			t.Setenv(k, v)
		}
		sock := filepath.Join(t.TempDir(), "rls.sock")
		t.Setenv("GRPC_UDS", sock)
		_, addr, _, _ := startServeRLS(t, true, "--envoy-env")
		if !strings.HasSuffix(addr, "rls.sock") {
			t.Fatalf("banner address %q, want the socket", addr)
		}
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := call(conn); err != nil {
			t.Fatalf("over the unix socket: %v", err)
		}
	})
}

// request1 is a request of one descriptor of one entry.
func request1(domain, key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
	}}
}

package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// TestRedisTLS connects to a Redis of its own that serves TLS only to
// clients with a certificate of the test's CA, with the config's
// store.tls_* keys.
func TestRedisTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Issue("redis", tlstest.Leaf{CommonName: "redis.test", Server: true, DNSNames: []string{"redis.test"}})
	cli := ca.Issue("redis-client", tlstest.Leaf{CommonName: "floodgate"})
	srvCert, srvKey, cliCert, cliKey, caFile := srv.CertFile, srv.KeyFile, cli.CertFile, cli.KeyFile, ca.CertFile
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	redistest.Spawn(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", srvCert, "--tls-key-file", srvKey,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes")
	addr := fmt.Sprintf("127.0.0.1:%d", tlsPort)

	open := func(t *testing.T, extra string) (floodgate.Store, func(), error) {
		t.Helper()
		cfg, err := config.Parse([]byte("store:\n  type: redis\n  addrs: ["+addr+"]\n  timeout: 2s\n  tls: true\n"+extra), "test.yaml")
		if err != nil {
			return nil, nil, err
		}
		return openStore(cfg.Store)
	}
	full := fmt.Sprintf("  tls_ca_file: %s\n  tls_cert_file: %s\n  tls_key_file: %s\n  tls_server_name: redis.test\n", caFile, cliCert, cliKey)
	t.Run("CA, client certificate and server name", func(t *testing.T) {
		store, closeStore, err := open(t, full)
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		for i := range 3 {
			d, err := store.Allow(context.Background(), "tls-key", floodgate.PerMinute(2))
			if err != nil || d.Allowed != (i < 2) {
				t.Fatalf("decision %d over TLS: %+v %v", i, d, err)
			}
		}
	})
	t.Run("the wrong server name with tls_skip_hostname_verification", func(t *testing.T) {
		store, closeStore, err := open(t, strings.Replace(full, "redis.test", "elsewhere.test", 1)+"  tls_skip_hostname_verification: true\n")
		if err != nil {
			t.Fatal(err)
		}
		defer closeStore()
		if d, err := store.Allow(context.Background(), "tls-skip-key", floodgate.PerMinute(2)); err != nil || !d.Allowed {
			t.Fatalf("decision over TLS without the name check: %+v %v", d, err)
		}
	})
	other := tlstest.NewCA(t, "other-ca")
	for _, c := range []struct{ name, extra string }{
		{"another CA with tls_skip_hostname_verification", strings.Replace(full, caFile, other.CertFile, 1) + "  tls_skip_hostname_verification: true\n"},
		{"no client certificate", fmt.Sprintf("  tls_ca_file: %s\n  tls_server_name: redis.test\n", caFile)},
		{"the wrong server name", strings.Replace(full, "redis.test", "elsewhere.test", 1)},
		{"the system roots only", fmt.Sprintf("  tls_cert_file: %s\n  tls_key_file: %s\n", cliCert, cliKey)},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			store, closeStore, err := open(t, c.extra)
			if err == nil {
				defer closeStore()
				_, err = store.Allow(context.Background(), "tls-key", floodgate.PerMinute(2))
			}
			if err == nil {
				t.Fatal("connected")
			}
		})
	}
	t.Run("tls_* keys without tls: true are errors", func(t *testing.T) {
		_, err := config.Parse([]byte("store:\n  type: redis\n  addrs: ["+addr+"]\n  tls_ca_file: "+caFile+"\n"), "test.yaml")
		if err == nil || !strings.Contains(err.Error(), "store.tls_ca_file") || !strings.Contains(err.Error(), "tls: true") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("a missing CA file names the key", func(t *testing.T) {
		_, err := config.Parse([]byte("store:\n  type: redis\n  addrs: ["+addr+"]\n  tls: true\n  tls_ca_file: /nonexistent.pem\n"), "test.yaml")
		if err == nil || !strings.Contains(err.Error(), "store.tls") || !strings.Contains(err.Error(), "nonexistent") {
			t.Fatalf("error %v", err)
		}
	})
}

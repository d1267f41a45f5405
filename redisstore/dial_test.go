package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// socketDir returns a short temporary directory for unix sockets (their
// paths are limited to about 100 bytes, which t.TempDir's can exceed).
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fgsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// TestUnixSocket decides over a unix socket of a redis-server of its own,
// written both ways (unix:// and a bare path), and checks through TCP that
// the keys landed in that server.
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(socketDir(t), "redis.sock")
	srv := redistest.Spawn(t, "--unixsocket", sock, "--unixsocketperm", "700")
	tcp := newClient(t, srv.Addr)
	for _, c := range []struct {
		name string
		addr string
		mode Mode
	}{
		{"unix URL, standalone", "unix://" + sock, ModeStandalone},
		{"bare path, auto", sock, ModeAuto},
		{"bare path, lazy", sock, ModeStandalone},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			s, err := New(Config{Addrs: []string{c.addr}, Mode: c.mode, KeyPrefix: prefix, Timeout: testTimeout, LazyConnect: strings.Contains(c.name, "lazy")})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if c.mode == ModeStandalone && strings.Contains(c.name, "lazy") {
				waitConnected(t, s)
			}
			for i := range 3 {
				d, err := s.Allow(ctx, "unix-key", floodgate.PerMinute(2))
				if err != nil || d.Allowed != (i < 2) {
					t.Fatalf("decision %d over the unix socket: %+v %v", i, d, err)
				}
			}
			res := make([]floodgate.BatchResult, 2)
			s.AllowBatch(ctx, []floodgate.BatchItem{{Key: "b1", Limit: floodgate.PerMinute(5), Cost: 1}, {Key: "b2", Limit: floodgate.PerMinute(5), Cost: 2}}, res)
			for i, r := range res {
				if r.Err != nil || !r.Decision.Allowed {
					t.Fatalf("batch item %d: %+v", i, r)
				}
			}
			if n, _ := doKey(t, tcp, "EXISTS", s.Key("unix-key", floodgate.PerMinute(2).Algorithm)).AsInt64(); n != 1 {
				t.Fatalf("the key is not in the server behind the socket: EXISTS = %d", n)
			}
			h := s.Health()
			if !h.Connected || len(h.Nodes) != 1 || !h.Available() {
				t.Fatalf("health %+v", h)
			}
		})
	}
}

// waitConnected waits until a LazyConnect store has connected.
func waitConnected(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Health().Connected {
		if time.Now().After(deadline) {
			t.Fatalf("not connected within 10s: %+v", s.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnixSocketMissing: a socket path nothing listens on fails like a
// TCP address that refuses connections: New reports the store unavailable,
// and a LazyConnect store answers ErrStoreUnavailable, so rules follow
// their failure mode.
func TestUnixSocketMissing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	_ = l.Close()
	for _, addr := range []string{"unix://" + filepath.Join(socketDir(t), "absent.sock"), filepath.Join(socketDir(t), "absent.sock"), refused} {
		t.Run(addr, func(t *testing.T) {
			_, err := New(Config{Addrs: []string{addr}, Mode: ModeStandalone, Timeout: testTimeout})
			if !errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Fatalf("New = %v, want ErrStoreUnavailable", err)
			}
			s, err := New(Config{Addrs: []string{addr}, Mode: ModeStandalone, Timeout: testTimeout, LazyConnect: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Allow(context.Background(), "k", floodgate.PerMinute(2)); !errors.Is(err, floodgate.ErrStoreUnavailable) {
				t.Fatalf("Allow = %v, want ErrStoreUnavailable", err)
			}
			if h := s.Health(); h.Connected || h.Error == "" {
				t.Fatalf("health %+v, want not connected with a reason", h)
			}
		})
	}
}

// TestTLSSkipHostnameVerification does real TLS handshakes with Redis
// servers of its own: one whose certificate, from the trusted CA, names
// another host (not the IP address dialled), and one whose certificate
// names the address but comes from another CA. The option accepts the
// first and refuses the second; without it both are refused.
func TestTLSSkipHostnameVerification(t *testing.T) {
	ca, other := tlstest.NewCA(t, "redis-ca"), tlstest.NewCA(t, "other-ca")
	spawnTLS := func(is tlstest.Issued) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		redistest.Spawn(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", is.CertFile, "--tls-key-file", is.KeyFile,
			"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", "no")
		return "127.0.0.1:" + strconv.Itoa(port)
	}
	elsewhere := spawnTLS(ca.Issue("elsewhere", tlstest.Leaf{CommonName: "redis.elsewhere", Server: true, NoIPs: true, DNSNames: []string{"redis.elsewhere"}}))
	foreign := spawnTLS(other.Issue("foreign", tlstest.Leaf{CommonName: "redis.test", Server: true, DNSNames: []string{"redis.test"}}))
	for _, c := range []struct {
		name   string
		addr   string
		skip   bool
		accept bool
	}{
		{"another hostname, skipped", elsewhere, true, true},
		{"another hostname, verified", elsewhere, false, false},
		{"another CA, skipped", foreign, true, false},
		{"another CA, verified", foreign, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Addrs: []string{c.addr}, Mode: ModeStandalone, TLS: &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12},
				TLSSkipHostnameVerification: c.skip, KeyPrefix: uniquePrefix(t), Timeout: testTimeout}
			s, err := New(cfg)
			if !c.accept {
				if err == nil {
					s.Close()
					t.Fatal("connected")
				}
				if !strings.Contains(err.Error(), "certificate") {
					t.Fatalf("error %v does not say the certificate was refused", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 3 {
				d, err := s.Allow(context.Background(), "tls-key", floodgate.PerMinute(2))
				if err != nil || d.Allowed != (i < 2) {
					t.Fatalf("decision %d over TLS: %+v %v", i, d, err)
				}
			}
		})
	}
	t.Run("the caller's configuration is not changed", func(t *testing.T) {
		tc := &tls.Config{RootCAs: ca.Pool}
		s, err := New(Config{Addrs: []string{elsewhere}, Mode: ModeStandalone, TLS: tc, TLSSkipHostnameVerification: true, Timeout: testTimeout})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if tc.InsecureSkipVerify || tc.VerifyConnection != nil {
			t.Fatalf("New changed the caller's tls.Config: %+v", tc)
		}
	})
}

// TestTwemproxySocket connects to a twemproxy (nutcracker, the Debian
// package) unix socket in front of a Redis of its own: envoyproxy/ratelimit's
// default REDIS_URL points at one. twemproxy closes the connection at the
// first command it does not proxy (HELLO), so floodgate cannot use it: New
// and a LazyConnect store's health say so in words, not just "EOF".
func TestTwemproxySocket(t *testing.T) {
	bin, err := exec.LookPath("nutcracker")
	if err != nil {
		bin = "/usr/sbin/nutcracker" // the Debian package's, outside a user's PATH
		if _, serr := os.Stat(bin); serr != nil {
			msg := "nutcracker (twemproxy) is not installed: scripts/proxies.sh ensure (apt-get install nutcracker)"
			if os.Getenv("FLOODGATE_REQUIRE_PROXIES") == "1" {
				t.Fatal(msg + ", and FLOODGATE_REQUIRE_PROXIES=1")
			}
			t.Skip(msg)
		}
	}
	srv := redistest.Spawn(t)
	dir := socketDir(t)
	sock, conf := filepath.Join(dir, "twemproxy.sock"), filepath.Join(dir, "nutcracker.yml")
	yml := "floodgate:\n  listen: " + sock + " 0600\n  redis: true\n  servers:\n    - " + srv.Addr + ":1\n"
	if err := os.WriteFile(conf, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nutcracker did not listen on its socket within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err = New(Config{Addrs: []string{sock}, Mode: ModeStandalone, Timeout: testTimeout})
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), "twemproxy") || !strings.Contains(err.Error(), "needs Redis itself") {
		t.Fatalf("New = %v, want an outage that names twemproxy", err)
	}
	s, err := New(Config{Addrs: []string{sock}, Mode: ModeStandalone, Timeout: testTimeout, LazyConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if h := s.Health(); h.Connected || !strings.Contains(h.Error, "twemproxy") {
		t.Fatalf("health %+v: want not connected, naming twemproxy", h)
	}
}

// TestRefusedSetUp: a Redis that refuses the connection's set-up (a wrong
// password, no password where one is required, a database out of range) is
// a misconfiguration, not an outage: New fails with a *ConfigError naming the
// field, and a LazyConnect store's calls fail with it too, never matching
// ErrStoreUnavailable, so no failure mode admits them; its health says why.
func TestRefusedSetUp(t *testing.T) {
	srv := redistest.Spawn(t, "--requirepass", "right-password")
	open := redistest.Spawn(t)
	cases := []struct {
		name, addr, password, field string
		db                          int
		want                        string
	}{
		{"wrong password", srv.Addr, "wrong", "Password", 0, "WRONGPASS"},
		{"no password", srv.Addr, "", "Password", 0, "NOAUTH"},
		{"database out of range", open.Addr, "", "DB", 99, "DB index"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Addrs: []string{c.addr}, Mode: ModeStandalone, Password: c.password, DB: c.db, Timeout: testTimeout}
			_, err := New(cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field || errors.Is(err, floodgate.ErrStoreUnavailable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New = %v; want a *ConfigError for %s naming %q, not an outage", err, c.field, c.want)
			}
			var logs logBuffer
			cfg.LazyConnect, cfg.Logger = true, logs.logger()
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for range 3 {
				_, err := s.Allow(context.Background(), "k", floodgate.PerMinute(5))
				if err == nil || errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.As(err, &ce) {
					t.Fatalf("Allow = %v; want the refusal, not an outage", err)
				}
			}
			if h := s.Health(); h.Connected || !strings.Contains(h.Error, c.want) {
				t.Fatalf("health %+v: want not connected, saying %q", h, c.want)
			}
			if log := logs.String(); !strings.Contains(log, c.want) || !strings.Contains(log, "never admitted") {
				t.Errorf("the log does not say %q and that nothing is admitted:\n%s", c.want, log)
			}
		})
	}
	// The right password connects.
	s, err := New(Config{Addrs: []string{srv.Addr}, Mode: ModeStandalone, Password: "right-password", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestFreshStoreDecidesAtOnce: a store made with LazyConnect (as serve
// makes it) against a healthy Redis, asked by many callers the moment New
// returns, answers every call from Redis: New connects before it returns
// when it can, so a starting instance answers nothing by its failure mode.
func TestFreshStoreDecidesAtOnce(t *testing.T) {
	addr := redistest.StandaloneAddr(t)
	for round := range 5 {
		s, err := New(Config{Mode: ModeStandalone, Addrs: []string{addr}, LazyConnect: true, Timeout: 2 * time.Second,
			KeyPrefix: "lazy-" + strconv.FormatInt(time.Now().UnixNano(), 10) + ":"})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 32)
		for range 32 {
			go func() {
				_, err := s.AllowN(context.Background(), "k", floodgate.PerMinute(100), 1)
				errs <- err
			}()
		}
		for range 32 {
			if err := <-errs; err != nil {
				t.Errorf("round %d: a call made while the store connects: %v", round, err)
			}
		}
		s.Close()
	}
}

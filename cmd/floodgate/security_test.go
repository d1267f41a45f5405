package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// process is a running floodgate binary.
type process struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	lines  chan string // stdout, line by line

	stopOnce sync.Once
}

// stop ends the process with SIGTERM (SIGKILL after 20s) and waits for
// it, and for its stderr to be copied whole. It may be called again.
func (p *process) stop() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	})
}

// startBinary runs `floodgate serve args...` and waits for its banner's
// last line; it is stopped with SIGTERM at the test's end.
func startBinary(t *testing.T, env []string, args ...string) (*process, string) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := &process{cmd: cmd, stderr: &syncbuf.Buffer{}, lines: make(chan string, 64)}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	var banner strings.Builder
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("serve exited before its banner:\n%s\nstderr:\n%s", banner.String(), p.stderr)
			}
			banner.WriteString(line + "\n")
			if strings.HasPrefix(line, "try:") {
				go func() {
					for range p.lines {
					}
				}()
				return p, banner.String()
			}
		case <-deadline:
			t.Fatalf("no banner within 60s:\n%s\nstderr:\n%s", banner.String(), p.stderr)
		}
	}
}

func find(t *testing.T, banner, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("banner lacks %s:\n%s", pattern, banner)
	}
	return m[1]
}

// call makes one request and returns its status, WWW-Authenticate and body.
func call(t *testing.T, c *http.Client, method, url, contentType, token, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

const (
	tokDecide  = "decide-4f1c2a9b7e6d5c3a4f1c2a9b7e6d5c3a"
	tokAdmin   = "admin-8b7a6c5d4e3f2a1b8b7a6c5d4e3f2a1b"
	tokRotated = "rotated-1a2b3c4d5e6f7a8b1a2b3c4d5e6f7a8b"
	// tokStrong has 128 bits and more of randomness.
	tokStrong = "9f2c4e6a8b0d1f3e5a7c9e1b3d5f7a9c"
)

func TestBinaryTLSAndTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	ca := tlstest.NewCA(t, "floodgate-test")
	server := ca.Issue("server", tlstest.Leaf{CommonName: "floodgate", Server: true, DNSNames: []string{"floodgate"}})
	certFile, keyFile, firstSerial := server.CertFile, server.KeyFile, server.Serial
	clientCert := ca.Issue("client", tlstest.Leaf{CommonName: "ingress"})
	other := tlstest.NewCA(t, "stranger")
	stranger := other.Issue("stranger", tlstest.Leaf{CommonName: "stranger"})
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ingress decide "+tokDecide+"\nops admin "+tokAdmin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
metrics_listen: 127.0.0.1:0
auth:
  tokens_file: %s
tls:
  cert_file: %s
  key_file: %s
  client_ca_file: %s
rules:
  - name: api
    algorithm: fixed_window
    limit: 100
    window: 1h
`, tokens, certFile, keyFile, ca.CertFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, banner := startBinary(t, nil, "--config", cfg, "--grpc-listen", "127.0.0.1:0")
	base := find(t, banner, `listening on (https://\S+)`)
	ops := find(t, banner, `metrics and probes on (http://\S+)`)
	grpcAddr := find(t, banner, `on grpcs://(\S+),`) // TLS, as the API's https://
	if strings.Contains(p.stderr.String(), "WARNING") {
		t.Errorf("warned although every listener is on loopback:\n%s", p.stderr)
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(&clientCert)}}
	t.Run("a client without a certificate is refused in the handshake", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(nil)}}
		if _, err := c.Get(base + "/healthz"); err == nil {
			t.Fatal("served a client with no certificate")
		}
	})
	t.Run("a client certificate of another CA is refused", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: func() *tls.Config {
			cc := other.ClientTLS(&stranger)
			cc.RootCAs = ca.Pool
			return cc
		}()}}
		if _, err := c.Get(base + "/healthz"); err == nil {
			t.Fatal("served a client whose certificate no trusted CA signed")
		}
	})
	t.Run("plaintext HTTP is not served", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(strings.Replace(base, "https://", "http://", 1) + "/healthz")
		if err == nil {
			defer resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatal("answered plaintext HTTP 200")
			}
		}
	})

	check := `{"rule":"api","key":"k"}`
	cases := []struct {
		name, method, path, ct, token, body string
		status                              int
		challenge                           string
	}{
		{"no token", "POST", "/v1/check", "application/json", "", check, 401, `Bearer realm="floodgate"`},
		{"wrong token", "POST", "/v1/check", "application/json", "wrong-0123456789abcdef", check, 401, `error="invalid_token"`},
		{"decide token", "POST", "/v1/check", "application/json", tokDecide, check, 200, ""},
		{"decide token, text/plain", "POST", "/v1/check", "text/plain", tokDecide, check, 415, ""},
		{"reset with the decide token", "POST", "/v1/reset", "application/json", tokDecide, check, 403, `error="insufficient_scope"`},
		{"reset with the admin token", "POST", "/v1/reset", "application/json", tokAdmin, check, 200, ""},
		{"rules need a token", "GET", "/v1/rules", "", "", "", 401, "Bearer"},
		{"metrics are not on the API listener", "GET", "/metrics", "", tokAdmin, "", 404, ""},
		{"healthz is open", "GET", "/healthz", "", "", "", 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, challenge, body := call(t, client, c.method, base+c.path, c.ct, c.token, c.body)
			if status != c.status || !strings.Contains(challenge, c.challenge) {
				t.Fatalf("%d %q %s; want %d and a challenge with %q", status, challenge, body, c.status, c.challenge)
			}
		})
	}
	t.Run("metrics listener needs no token", func(t *testing.T) {
		status, _, body := call(t, http.DefaultClient, "GET", ops+"/metrics", "", "", "")
		if status != 200 || !strings.Contains(body, `floodgate_http_auth_failures_total{reason="missing"}`) {
			t.Fatalf("%d %.300s", status, body)
		}
	})

	t.Run("gRPC: TLS, and a token in the metadata", func(t *testing.T) {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientTLS(&clientCert))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rls := rlsv3.NewRateLimitServiceClient(conn)
		ask := func(token string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
			}
			_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
			}})
			return err
		}
		if code := status.Code(ask("")); code != codes.Unauthenticated {
			t.Errorf("no token: %v, want Unauthenticated", code)
		}
		if code := status.Code(ask("wrong-0123456789abcdef")); code != codes.Unauthenticated {
			t.Errorf("wrong token: %v, want Unauthenticated", code)
		}
		if code := status.Code(ask(tokAdmin)); code != codes.PermissionDenied {
			t.Errorf("admin token: %v, want PermissionDenied", code)
		}
		if err := ask(tokDecide); err != nil {
			t.Errorf("decide token: %v", err)
		}
		// The quota service's stream is behind the same token check.
		stream := func(token string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
			}
			st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"user": "alice"}}, NumRequestsAllowed: 1}}}); err != nil && err != io.EOF {
				return err
			}
			_, err = st.Recv() // the answer for a bucket, or the stream's refusal
			return err
		}
		for _, tc := range []struct {
			token string
			want  codes.Code
		}{{"", codes.Unauthenticated}, {"wrong-0123456789abcdef", codes.Unauthenticated}, {tokAdmin, codes.PermissionDenied}, {tokDecide, codes.OK}} {
			if code := status.Code(stream(tc.token)); code != tc.want {
				t.Errorf("quota stream with token %q: %v, want %v", tc.token, code, tc.want)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("health check without a token: %v", err)
		}
		noCert, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientTLS(nil))))
		if err != nil {
			t.Fatal(err)
		}
		defer noCert.Close()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		if _, err := healthpb.NewHealthClient(noCert).Check(ctx2, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
			t.Errorf("gRPC client without a certificate: %v, want the handshake refused (Unavailable)", err)
		}
	})

	t.Run("rotated certificate and tokens are served after SIGHUP", func(t *testing.T) {
		serial := ca.Issue("server", tlstest.Leaf{CommonName: "floodgate-rotated", Server: true, DNSNames: []string{"floodgate-rotated"}}).Serial
		if err := os.WriteFile(tokens, []byte("ingress decide "+tokRotated+"\nops admin "+tokAdmin+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		served := func() int64 {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", strings.TrimPrefix(base, "https://"), ca.ClientTLS(&clientCert))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		}
		deadline := time.Now().Add(15 * time.Second)
		for served() != serial {
			if time.Now().After(deadline) {
				t.Fatalf("still serving certificate %d, not the rotated %d (first: %d)", served(), serial, firstSerial)
			}
			time.Sleep(50 * time.Millisecond)
		}
		fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(&clientCert)}}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			old, _, _ := call(t, fresh, "POST", base+"/v1/check", "application/json", tokDecide, check)
			cur, _, _ := call(t, fresh, "POST", base+"/v1/check", "application/json", tokRotated, check)
			if old == 401 && cur == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after rotation: old token %d, new token %d; want 401 and 200", old, cur)
			}
		}
	})

	t.Run("a tokens file changed without SIGHUP is picked up", func(t *testing.T) {
		const next = "watched-9f8e7d6c5b4a3f2e9f8e7d6c5b4a3f2e"
		if err := os.WriteFile(tokens, []byte("ingress decide "+next+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if s, _, _ := call(t, client, "POST", base+"/v1/check", "application/json", next, check); s == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the changed tokens file was not picked up; stderr:\n%s", p.stderr)
			}
		}
	})
}

func TestBinaryWarnsWithoutAuthBeyondLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	// The wildcard address is beyond loopback; nothing is sent to it.
	p, _ := startBinary(t, nil, "--listen", "0.0.0.0:0")
	// stderr is copied apart from stdout: give it its time.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.stderr.String(), "WARNING: listen "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no loud warning on stderr:\n%s", p.stderr)
		}
	}
	if !strings.Contains(p.stderr.String(), "auth.tokens_file") {
		t.Fatalf("the warning does not say how to fix it:\n%s", p.stderr)
	}
	// With tokens (from the environment), no warning.
	cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 0.0.0.0:0\nauth:\n  tokens_env: FG_TEST_TOKENS\nrules:\n  - name: r\n    algorithm: fixed_window\n    limit: 1\n    window: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	q, banner := startBinary(t, []string{"FG_TEST_TOKENS=a decide " + tokDecide + "; b admin " + tokAdmin}, "--config", cfg)
	if !strings.Contains(banner, "authentication on: 2 tokens") {
		t.Fatalf("the banner does not say authentication is on:\n%s", banner)
	}
	q.stop() // every line it wrote to stderr is copied once it has exited
	if strings.Contains(q.stderr.String(), "WARNING") {
		t.Fatalf("warned with tokens set:\n%s", q.stderr)
	}
}

func TestBinaryConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const maxConns, flood = 100, 1000
	cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\nmax_connections: %d\nrules:\n  - name: r\n    algorithm: fixed_window\n    limit: 1000\n    window: 1m\n", maxConns)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, banner := startBinary(t, nil, "--config", cfg)
	base := find(t, banner, `listening on (http://\S+)`)
	addr := strings.TrimPrefix(base, "http://")
	fds := func() int {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
		if err != nil {
			t.Skipf("cannot count the server's descriptors: %v", err)
		}
		return len(entries)
	}
	before := fds()
	start := time.Now()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood { // idle connections that never send a byte
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	// A real client still gets through, within its timeout.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 10 {
		status, _, body := call(t, client, "POST", base+"/v1/check", "application/json", "", `{"rule":"r","key":"k"}`)
		if status != 200 {
			t.Fatalf("request %d during the flood: %d %s", i, status, body)
		}
	}
	if open := fds() - before; open > maxConns+10 {
		t.Fatalf("the server holds %d more descriptors under a flood of %d connections; want at most about max_connections %d", open, flood, maxConns)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Fatalf("the flood and the requests took %s", d)
	}
	_, _, metrics := call(t, client, "GET", base+"/metrics", "", "", "")
	if !regexp.MustCompile(`floodgate_connections_evicted_total\{listener="listen"\} [1-9]`).MatchString(metrics) {
		t.Fatalf("no evictions counted:\n%s", grepLines(metrics, "floodgate_connections"))
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestBinaryStalledRequestFlood: thousands of connections that stall in
// their headers or announce a body they never send hold no place a real
// request needs, with tokens on (each stalled request is refused 401) and
// off (each handler waits for its body).
func TestBinaryStalledRequestFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const maxConns, flood = 100, 2000
	for _, tc := range []struct {
		name, auth string
		env        []string
	}{
		{"tokens on", "auth:\n  tokens_env: FG_TEST_TOKENS\n", []string{"FG_TEST_TOKENS=a decide " + tokStrong}},
		{"tokens off", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
			if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\nmax_connections: %d\n%srules:\n  - name: r\n    algorithm: fixed_window\n    limit: 100000\n    window: 1m\n", maxConns, tc.auth)), 0o600); err != nil {
				t.Fatal(err)
			}
			_, banner := startBinary(t, tc.env, "--config", cfg)
			base := find(t, banner, `listening on (http://\S+)`)
			addr := strings.TrimPrefix(base, "http://")
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			start := time.Now()
			for i := range flood {
				c, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					t.Fatalf("dial %d: %v", i, err)
				}
				conns = append(conns, c)
				stall := "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
				if i%4 == 0 {
					stall = "POST /v1/check HTTP/1.1\r\nHost: x\r\n" // headers that never end
				}
				_, _ = io.WriteString(c, stall) // the server may have closed it already
			}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := range 10 {
				if status, _, body := call(t, client, "GET", base+"/healthz", "", "", ""); status != 200 {
					t.Fatalf("healthz %d during the flood: %d %s", i, status, body)
				}
				if status, _, body := call(t, client, "POST", base+"/v1/check", "application/json", tokStrong, `{"rule":"r","key":"k"}`); status != 200 {
					t.Fatalf("check %d during the flood: %d %s", i, status, body)
				}
			}
			if d := time.Since(start); d > 60*time.Second {
				t.Fatalf("the flood and the requests took %s", d)
			}
		})
	}
}

// TestBinaryHandshakeErrorsThrottled: failed TLS handshakes on the HTTP
// and gRPC listeners are each counted, and logged a line at a time
// through the throttle, never a line each.
func TestBinaryHandshakeErrorsThrottled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const plain = 300
	ca := tlstest.NewCA(t, "floodgate-test")
	srv := ca.Issue("server", tlstest.Leaf{CommonName: "floodgate", Server: true, DNSNames: []string{"floodgate"}})
	cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\ntls:\n  cert_file: %s\n  key_file: %s\nrules:\n  - {name: r, algorithm: fixed_window, limit: 10, window: 1m}\n",
		srv.CertFile, srv.KeyFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, banner := startBinary(t, nil, "--config", cfg, "--grpc-listen", "127.0.0.1:0")
	addr := strings.TrimPrefix(find(t, banner, `listening on (https://\S+)`), "https://")
	grpcAddr := find(t, banner, `on grpcs?://(\S+),`)
	ops := find(t, banner, `metrics and probes on (http://\S+)`)
	for _, a := range []string{addr, grpcAddr} {
		for i := range plain { // plain HTTP to a TLS port
			c, err := net.DialTimeout("tcp", a, 10*time.Second)
			if err != nil {
				t.Fatalf("dial %d: %v", i, err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			_, _ = io.Copy(io.Discard, c) // until the server closes it
			c.Close()
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	want := regexp.MustCompile(`floodgate_connection_errors_total\{kind="tls_handshake",listener="(listen|grpc_listen)"\} (\d+)`)
	var metrics string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, _, metrics = call(t, client, "GET", ops+"/metrics", "", "", "")
		counted := map[string]string{}
		for _, m := range want.FindAllStringSubmatch(metrics, -1) {
			counted[m[1]] = m[2]
		}
		if counted["listen"] == fmt.Sprint(plain) && counted["grpc_listen"] == fmt.Sprint(plain) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want %d handshake errors counted on each listener:\n%s", plain, grepLines(metrics, "floodgate_connection_errors"))
		}
	}
	if n := strings.Count(p.stderr.String(), "connection error"); n < 1 || n > 4 {
		t.Fatalf("%d log lines for %d failed handshakes, want one or a few:\n%s", n, 2*plain, p.stderr)
	}
	if n := strings.Count(p.stderr.String(), "TLS handshake error"); n > 4 {
		t.Fatalf("%d handshake error lines:\n%s", n, p.stderr)
	}
}

// TestBinaryFilesAreBounded: a config, tokens or certificate path naming a
// device that never ends, a pipe or an oversized file is refused at once,
// naming the setting and the file.
func TestBinaryFilesAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.pem")
	if err := os.WriteFile(huge, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	const rule = "rules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n"
	for _, c := range []struct {
		name, yaml string
		want       string
	}{
		{"tokens from /dev/zero", "auth:\n  tokens_file: /dev/zero\n", "line 2: auth.tokens_file: /dev/zero: is not a regular file (a character device)"},
		{"tokens from a pipe", "auth:\n  tokens_file: " + fifo + "\n", fifo + ": is not a regular file (a named pipe)"},
		{"a certificate from /dev/zero", "tls:\n  cert_file: /dev/zero\n  key_file: /dev/zero\n", "line 2: tls.cert_file: /dev/zero is not a regular file (a character device)"},
		{"an oversized CA", "tls:\n  cert_file: " + huge + "\n  key_file: " + huge + "\n", "is 2097152 bytes, over the 1048576 bytes"},
		{"Envoy rules from a pipe", "envoy_config: " + dir + "\n", fifo + ": is not a regular file (a named pipe)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "floodgate.yaml", c.yaml+rule)
			for _, args := range [][]string{{"serve", "--config", path}, {"config", "validate", path}} {
				_, stderr, code := cli(t, args...) // cli gives up after 60 s
				if code != 1 || !strings.Contains(stderr, c.want) {
					t.Errorf("%s: exit %d, want 1 with %q:\n%s", args[0], code, c.want, stderr)
				}
			}
		})
	}
	_, stderr, code := cli(t, "serve", "--config", "/dev/zero")
	if code != 1 || !strings.Contains(stderr, "/dev/zero: is not a regular file") {
		t.Errorf("--config /dev/zero: exit %d %s", code, stderr)
	}
}

// TestBinaryStopsWhileStarting: SIGTERM ends serve while it is still
// starting (here, waiting on a store that accepts connections and never
// answers), not once the stage gives up.
func TestBinaryStopsWhileStarting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	cfg := writeFile(t, t.TempDir(), "floodgate.yaml", "listen: 127.0.0.1:0\nstore:\n  type: redis\n  addrs: ["+silent.Addr().String()+"]\nrules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(binary(t), "serve", "--config", cfg)
		stderr := &syncbuf.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		time.Sleep(time.Second) // well into start-up: the store's connection waits
		_ = cmd.Process.Signal(sig)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("%v: still running 20 s after the signal:\n%s", sig, stderr)
		}
		if !strings.Contains(stderr.String(), "interrupted while starting") {
			t.Errorf("%v: exited only once start-up gave up:\n%s", sig, stderr)
		}
	}
}

// TestBinaryGRPCConnectionFlood: thousands of idle connections to the gRPC
// port take no place a real call needs: each new connection at the cap
// evicts the longest idle, so health checks and RLS calls on fresh
// connections succeed throughout.
func TestBinaryGRPCConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const maxConns, flood, calls = 100, 2000, 20
	cfg := writeFile(t, t.TempDir(), "floodgate.yaml", fmt.Sprintf("listen: 127.0.0.1:0\nmax_connections: %d\nrules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n", maxConns))
	_, banner := startBinary(t, nil, "--config", cfg, "--grpc-listen", "127.0.0.1:0")
	grpcAddr := find(t, banner, `on grpc://(\S+),`)
	base := find(t, banner, `listening on (http://\S+)`)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for i := range flood { // silent connections, as a flood opens them
		c, err := net.DialTimeout("tcp", grpcAddr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	for i := range calls {
		func() {
			cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("health check %d under the flood: %v", i, err)
			}
			req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
			if _, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req); err != nil {
				t.Fatalf("RLS call %d under the flood: %v", i, err)
			}
		}()
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Fatalf("the flood and the calls took %s", d)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	_, _, metrics := call(t, client, "GET", base+"/metrics", "", "", "")
	if !regexp.MustCompile(`floodgate_connections_evicted_total\{listener="grpc_listen"\} [1-9]`).MatchString(metrics) {
		t.Fatalf("no evictions counted on the gRPC listener:\n%s", grepLines(metrics, "floodgate_connections"))
	}
}

package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// startServeRLS runs `floodgate serve args...` in-process and returns its
// HTTP base URL, its gRPC address (read from the banner when wantGRPC), its
// log and a stop function.
func startServeRLS(t *testing.T, wantGRPC bool, args ...string) (base, grpcAddr string, logs *syncbuf.Buffer, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	logs = &syncbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), pw, logs)
		pw.Close()
	}()
	httpRE := regexp.MustCompile(`listening on (https?://\S+)`)
	grpcRE := regexp.MustCompile(`on grpcs?://(\S+),`)
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		if m := httpRE.FindStringSubmatch(line); m != nil {
			base = m[1]
		}
		if m := grpcRE.FindStringSubmatch(line); m != nil {
			grpcAddr = m[1]
		}
		if base != "" && (grpcAddr != "" || !wantGRPC && strings.HasPrefix(line, "try:")) {
			break
		}
	}
	if base == "" || wantGRPC && grpcAddr == "" {
		cancel()
		t.Fatalf("serve printed no address; log:\n%s\nerr: %v", logs, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return base, grpcAddr, logs, stop
}

func rlsClient(t *testing.T, addr string) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn
}

func rlsCall(t *testing.T, c rlsv3.RateLimitServiceClient, domain, key, value string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
	}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func writeRules(t *testing.T, dir, rpu string) {
	t.Helper()
	rules := "domain: e2e\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + rpu + "\n      algorithm: sliding_window_log\n"
	if err := os.WriteFile(filepath.Join(dir, "e2e.yaml"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestServeEnvoyRLS(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir, "1")
	base, addr, logs, stop := startServeRLS(t, true, "--envoy-config", dir, "--grpc-listen", "127.0.0.1:0")
	c, conn := rlsClient(t, addr)
	if got := rlsCall(t, c, "e2e", "user", "alice").GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call %s", got)
	}
	if got := rlsCall(t, c, "e2e", "user", "alice").GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call %s", got)
	}
	// POST /json on the HTTP API decides against the same store.
	code, body := post(t, base+"/json", `{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("/json: %d %s", code, body)
	}
	// The HTTP API is still there, and its /metrics has the service's.
	if code, body := post(t, base+"/v1/check", `{"rule":"login","key":"k"}`); code != 200 {
		t.Errorf("/v1/check: %d %s", code, body)
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`floodgate_envoy_requests_total{code="over_limit"} 2`, "floodgate_decisions_total"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v %v", h, err)
	}

	// SIGHUP re-reads the folder; a bad folder keeps the rules in force.
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log:\n%s", want, logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	writeRules(t, dir, "3")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("envoy rules reloaded")
	resp := rlsCall(t, c, "e2e", "user", "alice")
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 3 {
		t.Errorf("after reload: %v", resp)
	}
	writeRules(t, dir, "lots")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("envoy rules reload failed")
	if !strings.Contains(logs.String(), "e2e.yaml:6") {
		t.Errorf("the reload error does not name the file and line:\n%s", logs)
	}
	if got := rlsCall(t, c, "e2e", "user", "bob").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 3 {
		t.Errorf("after a bad reload: limit %d, want 3 (kept)", got)
	}

	if err := stop(); err != nil {
		t.Fatalf("serve returned %v on shutdown", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "e2e"}); err == nil {
		t.Error("the gRPC server still answers after shutdown")
	}
}

func TestServeEnvoyRLSOff(t *testing.T) {
	base, _, _, _ := startServeRLS(t, false)
	if code, _ := post(t, base+"/json", `{"domain":"d"}`); code != http.StatusNotFound {
		t.Errorf("/json without the service: %d, want 404", code)
	}
}

func TestServeEnvoyRLSNoRules(t *testing.T) {
	_, addr, _, _ := startServeRLS(t, true, "--grpc-listen", "127.0.0.1:0")
	c, _ := rlsClient(t, addr)
	resp := rlsCall(t, c, "any", "k", "v")
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("no rules: %v", resp)
	}
}

func TestServeEnvoyRLSBadFolder(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir, "-1")
	err := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--envoy-config", dir, "--grpc-listen", "127.0.0.1:0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "e2e.yaml")+":6: descriptors[0].rate_limit.requests_per_unit") {
		t.Fatalf("serve with a bad rule folder: %v", err)
	}
	err = run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--envoy-config", filepath.Join(dir, "missing")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("serve with a missing rule folder: %v", err)
	}
}

// TestServeHealthcheckIsAProbe: GET /healthcheck answers as /healthz and
// /readyz do, without a token when authentication is on (a prober has
// none), while POST /json, a decision, needs one.
func TestServeHealthcheckIsAProbe(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir, "5")
	tokens := filepath.Join(t.TempDir(), "tokens")
	cfg := filepath.Join(t.TempDir(), "floodgate.yaml")
	for name, data := range map[string]string{
		tokens: "ingress decide " + tokDecide + "\n",
		cfg:    "grpc_listen: 127.0.0.1:0\nmax_in_flight: 1\nenvoy_config: " + dir + "\nauth:\n  tokens_file: " + tokens + "\n",
	} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base, _, _, _ := startServeRLS(t, true, "--config", cfg)
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/healthcheck"} {
		if code, body := get(path, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s, want 200", path, code, body)
		}
	}
	if code, body := post(t, base+"/json", `{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`); code != http.StatusUnauthorized {
		t.Errorf("POST /json without a token: %d %s, want 401", code, body)
	}
}

// blockingStore holds every decision until release is closed.
type blockingStore struct {
	floodgate.Store
	entered chan struct{}
	release chan struct{}
}

func (b blockingStore) AllowN(ctx context.Context, key string, l floodgate.Limit, n int64) (floodgate.Decision, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.Store.AllowN(ctx, key, l, n)
}

// TestGRPCInFlightBound: calls in progress over every gRPC connection are
// bounded; a call over the bound is refused UNAVAILABLE at once, and
// health checks are never refused.
func TestGRPCInFlightBound(t *testing.T) {
	const bound = 2
	store := blockingStore{Store: memory.New(), entered: make(chan struct{}, bound), release: make(chan struct{})}
	rules, err := envoy.Parse(envoy.Source{Name: "r.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoy.New(store, rules, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ce, err := newConnErrors(prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := envoy.NewGRPCServer(svc, grpcOptions(nil, func() *server.Tokens { return nil }, ce, bound)...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	var conns []*grpc.ClientConn
	client := func() *grpc.ClientConn { // each call on a connection of its own
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		return cc
	}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held := make(chan error, bound)
	for range bound {
		c := rlsv3.NewRateLimitServiceClient(client())
		go func() { _, err := c.ShouldRateLimit(ctx, req); held <- err }()
		<-store.entered
	}
	_, err = rlsv3.NewRateLimitServiceClient(client()).ShouldRateLimit(ctx, req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "max_in_flight") {
		t.Fatalf("a call over the bound: %v, want UNAVAILABLE naming max_in_flight", err)
	}
	if _, err := healthpb.NewHealthClient(client()).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a health check at the bound: %v", err)
	}
	close(store.release)
	for range bound {
		if err := <-held; err != nil {
			t.Fatalf("a held call: %v", err)
		}
	}
	go func() { // the bound is free again
		for range store.entered {
		}
	}()
	if _, err := rlsv3.NewRateLimitServiceClient(client()).ShouldRateLimit(ctx, req); err != nil {
		t.Fatalf("a call after the held ones ended: %v", err)
	}
}

// The banner's scheme says whether the gRPC listener serves TLS.
func TestRLSBannerScheme(t *testing.T) {
	svc, err := envoy.New(memory.New(), nil, envoy.Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tls  bool
		want string
	}{{false, " on grpc://127.0.0.1:8081,"}, {true, " on grpcs://127.0.0.1:8081,"}} {
		var b strings.Builder
		(&rlsServer{addr: "127.0.0.1:8081", svc: svc, tls: c.tls}).banner(&b)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("tls %v: banner %q, want %q", c.tls, b.String(), c.want)
		}
	}
}

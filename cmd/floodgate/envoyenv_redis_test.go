package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// TestServeEnvoyEnvRedisSettings runs `floodgate serve --envoy-env` with
// the three Redis settings of envoyproxy/ratelimit it used to refuse, on
// Redis servers of its own: the main Redis over a unix socket
// (REDIS_SOCKET_TYPE's default, unix), and REDIS_PERSECOND's Redis over TLS
// with a certificate that names another host
// (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION). The per-second limit's key lands in
// the per-second Redis, the per-minute one's in the main Redis; readiness
// shows both; with the per-second Redis gone only its limit fails.
func TestServeEnvoyEnvRedisSettings(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "fgsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "redis.sock")
	mainSrv := redistest.Spawn(t, "--unixsocket", sock, "--unixsocketperm", "700")

	ca := tlstest.NewCA(t, "redis-ca")
	cert := ca.Issue("redis-ps", tlstest.Leaf{CommonName: "redis-ps.internal", Server: true, NoIPs: true, DNSNames: []string{"redis-ps.internal"}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	psSrv := redistest.Spawn(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert.CertFile, "--tls-key-file", cert.KeyFile,
		"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", "no")

	root := t.TempDir()
	writeFile(t, root, "ratelimit/config/rules.yaml", "domain: split\ndescriptors:\n  - key: persec\n    rate_limit: {unit: second, requests_per_unit: 50}\n  - key: permin\n    rate_limit: {unit: minute, requests_per_unit: 50}\n")
	for k, v := range map[string]string{
		"REDIS_URL": sock, "REDIS_TIMEOUT": "2s",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "127.0.0.1:" + strconv.Itoa(tlsPort),
		"REDIS_PERSECOND_TLS": "true", "REDIS_TLS_CACERT": ca.CertFile, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "REDIS_PERSECOND_TIMEOUT": "2s",
		"CACHE_KEY_PREFIX": "splittest:", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "USE_STATSD": "false", "LOG_LEVEL": "info",
	} {
		t.Setenv(k, v)
	}
	base, grpcAddr, logs, stop := startServeRLS(t, true, "--envoy-env")
	defer func() { _ = stop() }()
	c, _ := rlsClient(t, grpcAddr)
	call := func(key string) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "split", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}},
		}})
	}
	// The stores connect in the background: wait for the first answer.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := call("persec")
		if err == nil && r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer for the per-second rule: %v %v; log:\n%s", r, err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	first, err := call("permin")
	if err != nil || first.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(first.GetStatuses()) != 1 || first.GetStatuses()[0].GetLimitRemaining() != 49 {
		t.Fatalf("per-minute rule: %v %v", first, err)
	}

	keys := func(srv *redistest.SpawnedServer) string {
		ks, err := srv.Do(t, "KEYS", "splittest:*").AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(ks, " ")
	}
	if k := keys(mainSrv); !strings.Contains(k, "permin") || strings.Contains(k, "persec") {
		t.Errorf("main Redis (unix socket) holds %q: want the per-minute rule's key only", k)
	}
	// The per-second rule's key lives for its one-second window, which a
	// loaded machine may let pass before KEYS: the calls the per-second
	// server ran say where it went instead.
	if k := keys(psSrv); strings.Contains(k, "permin") {
		t.Errorf("per-second Redis (TLS) holds %q: want no per-minute key", k)
	}
	if stats, err := psSrv.Do(t, "INFO", "commandstats").ToString(); err != nil || !strings.Contains(stats, "cmdstat_eval") {
		t.Errorf("per-second Redis (TLS) ran no script (%v):\n%s", err, stats)
	}
	if !strings.Contains(logs.String(), "TLS hostname verification is off") {
		t.Errorf("no warning about the skipped hostname verification in the log:\n%s", logs)
	}

	ready := func() (int, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := ready()
	var rb struct {
		Store struct {
			Nodes []struct {
				Addr      string `json:"addr"`
				Available bool   `json:"available"`
			} `json:"nodes"`
		} `json:"store"`
	}
	if err := json.Unmarshal([]byte(body), &rb); err != nil || code != http.StatusOK || len(rb.Store.Nodes) != 2 ||
		rb.Store.Nodes[0].Addr != sock || rb.Store.Nodes[1].Addr != "per-second 127.0.0.1:"+strconv.Itoa(tlsPort) {
		t.Fatalf("/readyz %d %s (%v): want both Redis", code, body, err)
	}

	mresp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`floodgate_store_node_available{node="` + sock + `"} 1`, `floodgate_store_node_available{node="per-second 127.0.0.1:` + strconv.Itoa(tlsPort) + `"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The per-second Redis goes away: only its rule fails (failure_mode
	// error: UNAVAILABLE, as with the peer), the per-minute one is decided.
	psSrv.Kill()
	if _, err := call("persec"); status.Code(err) != codes.Unavailable {
		t.Fatalf("per-second rule with its Redis down: %v, want UNAVAILABLE", err)
	}
	r, err := call("permin")
	if err != nil || len(r.GetStatuses()) != 1 {
		t.Fatalf("per-minute rule with the per-second Redis down: %v %v", r, err)
	}
	// A fixed window aligned to the minute: a new one may have begun since
	// the first call (its reset is then further away), holding this call only.
	want := uint32(48)
	if r.GetStatuses()[0].GetDurationUntilReset().AsDuration() > first.GetStatuses()[0].GetDurationUntilReset().AsDuration() {
		want = 49
	}
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != want {
		t.Fatalf("per-minute rule with the per-second Redis down: %v, want %d remaining", r, want)
	}
	resp, err := http.Get(base + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(hb), "per-second store") {
		t.Fatalf("/healthcheck with the per-second Redis down: %d %q", resp.StatusCode, hb)
	}
	// The nodes say which store is down; the error's text is the log's.
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, `"kind":"store_unavailable"`) ||
		!strings.Contains(body, `"addr":"per-second 127.0.0.1:`+strconv.Itoa(tlsPort)+`"`) {
		t.Fatalf("/readyz with the per-second Redis down: %d %s", code, body)
	}
}

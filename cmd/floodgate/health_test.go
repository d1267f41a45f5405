package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// freeLoopbackPort returns a loopback port nothing listens on now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runHealthCmd runs `floodgate health args...` and returns its error, its
// stdout and what main would print on stderr.
func runHealthCmd(t *testing.T, args ...string) (err error, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(t.Context(), append([]string{"health"}, args...), &out, &errOut)
	if err != nil && !errors.Is(err, errUsage) {
		errOut.WriteString(err.Error() + "\n")
	}
	return err, out.String(), errOut.String()
}

// healthCase is one run of floodgate health and what it must give.
type healthCase struct {
	name string
	args []string
	code int    // exit status
	want string // in stdout when 0, in stderr otherwise
}

// check runs the case, fails t unless it exits and prints as wanted, and
// returns what it wrote on stderr.
func (c healthCase) check(t *testing.T) string {
	t.Helper()
	err, stdout, stderr := runHealthCmd(t, c.args...)
	if got := exitCode(err); err == nil && c.code != 0 || err != nil && got != c.code {
		t.Fatalf("exit %d (%v), want %d; stderr:\n%s", got, err, c.code, stderr)
	}
	out := stdout
	if c.code != 0 {
		out = stderr
	}
	if !strings.Contains(out, c.want) {
		t.Fatalf("output %q, want %q", out, c.want)
	}
	return stderr
}

// TestHealth asks a real serve's probes on its metrics listener, found
// through its config file or given as --url, and listeners that do not
// answer.
func TestHealth(t *testing.T) {
	port := freeLoopbackPort(t)
	ops := "127.0.0.1:" + strconv.Itoa(port)
	cfg := writeFile(t, t.TempDir(), "floodgate.yaml", fmt.Sprintf("metrics_listen: %s\nrules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n", ops))
	startServe(t, "--config", cfg)

	closed := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	cases := []healthCase{
		{"ready through the config", []string{"--config", cfg}, 0, "healthy: http://" + ops + "/readyz answered 200 OK"},
		{"live through the config", []string{"--config", cfg, "--probe", "live"}, 0, "healthy: http://" + ops + "/healthz answered 200 OK"},
		{"ready at --url", []string{"--url", "http://" + ops + "/"}, 0, "healthy: http://" + ops + "/readyz answered 200 OK"},
		{"nothing listening", []string{"--url", "http://" + closed}, 1, "floodgate health: http://" + closed + "/readyz: dial tcp " + closed + ": connect: connection refused"},
		{"no answer", []string{"--url", "http://" + silent.Addr().String(), "--timeout", "300ms"}, 1, "/readyz: no answer within 300ms"},
		{"unknown probe", []string{"--config", cfg, "--probe", "started"}, 2, `--probe "started": want ready or live`},
		{"timeout past the bound", []string{"--config", cfg, "--timeout", "2m"}, 2, "at most 1m0s"},
		{"not a URL", []string{"--url", "127.0.0.1:9090"}, 2, "is not a base URL"},
		{"TLS files for http", []string{"--url", "http://" + ops, "--ca-file", cfg}, 2, "apply to an https URL only"},
		{"both sources", []string{"--config", cfg, "--url", "http://" + ops}, 2, "exclude each other"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stderr := c.check(t)
			if c.code == 1 && strings.Count(stderr, "\n") != 1 {
				t.Errorf("the reason is not one line: %q", stderr)
			}
		})
	}
}

// TestHealthStoreDown: with Redis down, readiness fails with the server's
// reason and liveness still passes.
func TestHealthStoreDown(t *testing.T) {
	srv := redistest.Spawn(t)
	srv.Kill()
	ops := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
	cfg := writeFile(t, t.TempDir(), "floodgate.yaml", fmt.Sprintf("metrics_listen: %s\nstore:\n  type: redis\n  addrs: [%q]\n  timeout: 200ms\nrules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n", ops, srv.Addr))
	startServe(t, "--config", cfg)

	err, _, stderr := runHealthCmd(t, "--config", cfg)
	if exitCode(err) != 1 || !strings.Contains(stderr, "/readyz answered 503 Service Unavailable: the store does not answer for every key") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("readiness with Redis down: exit %d, stderr %q", exitCode(err), stderr)
	}
	if err, stdout, stderr := runHealthCmd(t, "--config", cfg, "--probe", "live"); err != nil || !strings.Contains(stdout, "/healthz answered 200 OK") {
		t.Errorf("liveness with Redis down: %v %q %q", err, stdout, stderr)
	}
}

// TestProbeBase: the probes' address follows the config, on loopback for
// a listener on every interface.
func TestProbeBase(t *testing.T) {
	cases := []struct {
		cfg  config.Config
		want string
	}{
		{config.Config{Listen: "127.0.0.1:8080"}, "http://127.0.0.1:8080"},
		{config.Config{Listen: "0.0.0.0:8080", MetricsListen: "0.0.0.0:9090"}, "http://127.0.0.1:9090"},
		{config.Config{Listen: "0.0.0.0:8080", MetricsListen: "[::]:9090"}, "http://[::1]:9090"},
		{config.Config{Listen: ":8080"}, "http://127.0.0.1:8080"},
		{config.Config{Listen: "10.0.0.5:8443", TLS: config.TLS{CertFile: "c.pem", KeyFile: "k.pem"}}, "https://10.0.0.5:8443"},
		{config.Config{Listen: "0.0.0.0:8443", MetricsListen: "10.0.0.5:9090", TLS: config.TLS{CertFile: "c.pem", KeyFile: "k.pem"}}, "http://10.0.0.5:9090"},
	}
	for _, c := range cases {
		if got := probeBase(&c.cfg); got != c.want {
			t.Errorf("probeBase(listen %q, metrics_listen %q, tls %v) = %q, want %q", c.cfg.Listen, c.cfg.MetricsListen, c.cfg.TLS.Enabled(), got, c.want)
		}
	}
}

// TestHealthMutualTLS asks the probe of a serve whose only listener is
// TLS with client certificates, through check's TLS flags.
func TestHealthMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "health")
	srv := ca.Issue("server", tlstest.Leaf{CommonName: "floodgate.internal", Server: true, NoIPs: true, DNSNames: []string{"floodgate.internal"}})
	client := ca.Issue("client", tlstest.Leaf{CommonName: "prober"})
	cfg := writeFile(t, t.TempDir(), "floodgate.yaml", fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s\n  client_ca_file: %s\nrules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n",
		srv.CertFile, srv.KeyFile, ca.CertFile))
	base, _, _ := startServe(t, "--config", cfg)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("serve at %s, want https", base)
	}
	url := []string{"--url", base}
	cases := []healthCase{
		{"the system's roots", append(url, "--server-name", "floodgate.internal"), 1, "certificate signed by unknown authority"},
		{"a certificate for another name", append(url, "--ca-file", ca.CertFile), 1, "cannot validate certificate for 127.0.0.1"},
		{"no client certificate", append(url, "--ca-file", ca.CertFile, "--server-name", "floodgate.internal"), 1, "floodgate health: " + base + "/readyz: "},
		{"mutual TLS", append(url, "--ca-file", ca.CertFile, "--server-name", "floodgate.internal", "--cert-file", client.CertFile, "--key-file", client.KeyFile), 0, "healthy: " + base + "/readyz answered 200 OK"},
		{"a certificate without its key", append(url, "--cert-file", client.CertFile), 2, "--cert-file and --key-file go together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t) })
	}
}

// TestHealthEnvoyEnv: under the peer's variables, --envoy-env asks the
// HTTP listener HOST and PORT give serve --envoy-env, and --config FILE
// --or-envoy-env does so only when FILE does not exist: the image's one
// HEALTHCHECK for serve --config and /bin/ratelimit alike.
func TestHealthEnvoyEnv(t *testing.T) {
	srv := redistest.Spawn(t)
	root := t.TempDir()
	writeFile(t, root, "ratelimit/config/rules.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	port := strconv.Itoa(freeLoopbackPort(t))
	for k, v := range map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"HOST": "127.0.0.1", "PORT": port, "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "USE_STATSD": "false",
	} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "--envoy-env"}, io.Discard, io.Discard) }()
	t.Cleanup(func() { cancel(); <-done })
	want := "healthy: http://127.0.0.1:" + port + "/readyz answered 200 OK"
	// serve starts in the background: wait for its listener.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err, stdout, _ := runHealthCmd(t, "--envoy-env", "--timeout", "1s")
		if err == nil && strings.Contains(stdout, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health --envoy-env never answered %q: %v", want, err)
		}
	}
	missing := filepath.Join(t.TempDir(), "floodgate.yaml")
	present := writeFile(t, t.TempDir(), "floodgate.yaml", "listen: "+"127.0.0.1:"+strconv.Itoa(freeLoopbackPort(t))+"\n")
	cases := []healthCase{
		{"the peer's listener", []string{"--envoy-env"}, 0, want},
		{"no config file: the peer's listener", []string{"--config", missing, "--or-envoy-env"}, 0, want},
		{"a config file: its listener", []string{"--config", present, "--or-envoy-env"}, 1, "connection refused"},
		{"no config file, no fallback", []string{"--config", missing}, 1, "no such file"},
		{"--or-envoy-env alone", []string{"--or-envoy-env"}, 2, "goes with --config"},
		{"--envoy-env and --url", []string{"--envoy-env", "--url", "http://127.0.0.1:1"}, 2, "exclude each other"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t) })
	}
}

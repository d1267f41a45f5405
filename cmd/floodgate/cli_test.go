package main

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// binary builds the floodgate command once for the black-box tests and
// returns its path.
func binary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "floodgate-cli-test-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "floodgate")
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binaryPath, ".").CombinedOutput()
		if err != nil {
			binaryErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

// cli runs the built binary with args and returns its stdout, stderr and
// exit code.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("floodgate %q did not exit within 60s; stderr:\n%s", args, errOut.String())
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPositionalArguments: an argument a command does not take is a usage
// error (exit 2) naming it, never silently ignored with the flags after it.
func TestPositionalArguments(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "floodgate.yaml", "listen: 127.0.0.1:0\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "floodgate.yaml"}, `unexpected argument "floodgate.yaml"; did you mean --config floodgate.yaml?`},
		{[]string{"serve", "typo", "--listen", "127.0.0.1:0"}, `unexpected argument "typo"; the flags after it were not read`},
		{[]string{"serve", "--config", cfg, "extra"}, `unexpected argument "extra"`},
		{[]string{"check", "--rule", "login", "--key", "k", "more"}, `unexpected argument "more"`},
		{[]string{"version", "x"}, `unexpected argument "x"`},
		{[]string{"simulate", "x"}, `unexpected argument "x"`},
		{[]string{"bench", "x"}, `unexpected argument "x"`},
		{[]string{"scripts", "fixed_window", "token_bucket"}, `unexpected argument "token_bucket"`},
		{[]string{"config", "validate"}, "missing argument"},
		{[]string{"config", "validate", cfg, cfg}, "unexpected argument"},
		{[]string{"config", "validate-envoy"}, "missing argument"},
		{[]string{"config", "example", "x"}, `unexpected argument "x"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := cli(t, c.args...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, stderr, c.want)
			}
		})
	}
}

// TestConfigValidateIsServe: config validate rejects exactly what serve
// rejects before it starts, with the same message: bad listen addresses and
// a bad, empty or missing envoy_config folder included.
func TestConfigValidateIsServe(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "rules/ok.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	writeFile(t, dir, "broken/bad.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	const ok = "listen: 127.0.0.1:0\ngrpc_listen: 127.0.0.1:0\n"
	placeholders := writeFile(t, dir, "placeholders", "ops admin replace-me-ops-token-openssl-rand-hex-32\n")
	weak := writeFile(t, dir, "weak", "ingress decide decide-4f1c2a9b7e6d5c3a\n")
	for _, c := range []struct {
		name, yaml string
		want       string // "" for a valid file
	}{
		{"valid", ok + "envoy_config: " + filepath.Join(dir, "rules") + "\n", ""},
		{"listen not an address", "listen: not-an-address\n", "line 1: listen: not-an-address is not a listen address"},
		{"listen port 99999", "listen: 127.0.0.1:99999\n", "line 1: listen: 127.0.0.1:99999 has port 99999, over 65535"},
		{"grpc_listen port 99999", "listen: 127.0.0.1:0\ngrpc_listen: 127.0.0.1:99999\nenvoy_config: " + filepath.Join(dir, "rules") + "\n", "line 2: grpc_listen"},
		{"missing envoy folder", ok + "envoy_config: " + filepath.Join(dir, "missing") + "\n", "line 3: envoy_config: " + filepath.Join(dir, "missing")},
		{"empty envoy folder", ok + "envoy_config: " + filepath.Join(dir, "empty") + "\n", "line 3: envoy_config"},
		{"bad envoy rule", ok + "envoy_config: " + filepath.Join(dir, "broken") + "\n", filepath.Join(dir, "broken", "bad.yaml") + ":4: descriptors[0].rate_limit.unit"},
		{"placeholder token", "auth:\n  tokens_file: " + placeholders + "\n", "line 2: auth.tokens_file: " + placeholders + `:1: token "ops" is a placeholder`},
		{"token under 128 bits", "auth:\n  tokens_file: " + weak + "\n", `token "ingress" holds at most 120 bits of randomness`},
		{"bad rule", ok + "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 3.5\n    window: 1m\n", "line 6: rules[0].limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "floodgate.yaml", c.yaml)
			out, vErr, vCode := cli(t, "config", "validate", path)
			if c.want == "" {
				if vCode != 0 || !strings.Contains(out, "ok") || !strings.Contains(out, "envoy rules for 1 domains") {
					t.Fatalf("validate: exit %d, %s %s", vCode, out, vErr)
				}
				return
			}
			if vCode != 1 || !strings.Contains(vErr, c.want) {
				t.Fatalf("validate: exit %d, stderr:\n%s\nwant exit 1 and %q", vCode, vErr, c.want)
			}
			_, sErr, sCode := cli(t, "serve", "--config", path)
			if sCode != 1 || sErr != vErr {
				t.Fatalf("serve: exit %d, stderr:\n%s\nwant exit 1 and validate's:\n%s", sCode, sErr, vErr)
			}
		})
	}
	// A flag's value is checked as the file's is, naming the flag.
	_, stderr, code := cli(t, "serve", "--listen", "127.0.0.1:99999")
	if code != 1 || !strings.Contains(stderr, "--listen 127.0.0.1:99999: has port 99999") {
		t.Errorf("serve --listen 127.0.0.1:99999: exit %d %s", code, stderr)
	}
	// A catch-all trusted_proxies validates, with a warning.
	path := writeFile(t, dir, "open.yaml", "client_ip:\n  trusted_proxies: [0.0.0.0/0]\nrules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n")
	if out, stderr, code := cli(t, "config", "validate", path); code != 0 || !strings.Contains(out, "ok") ||
		!strings.Contains(stderr, "warning: "+path+": line 2: client_ip.trusted_proxies[0]: 0.0.0.0/0 trusts every address") {
		t.Errorf("catch-all trusted_proxies: exit %d\n%s\n%s", code, out, stderr)
	}
}

func TestConfigValidateEnvoy(t *testing.T) {
	out, stderr, code := cli(t, "config", "validate-envoy", filepath.Join("..", "..", "envoy", "testdata", "rules"))
	if code != 0 || !strings.Contains(out, "ok (11 files") {
		t.Fatalf("the envoy test rules: exit %d %s %s", code, out, stderr)
	}
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: -1}\n")
	_, stderr, code = cli(t, "config", "validate-envoy", dir)
	if code != 1 || !strings.Contains(stderr, filepath.Join(dir, "a.yaml")+":4: descriptors[0].rate_limit.requests_per_unit") {
		t.Fatalf("a bad rule file: exit %d %s", code, stderr)
	}
}

// TestScriptsNameMatchesList: `floodgate scripts NAME` prints the script
// exactly, so a file saved from it has the SHA1 that --list prints.
func TestScriptsNameMatchesList(t *testing.T) {
	list, _, code := cli(t, "scripts", "--list")
	if code != 0 {
		t.Fatal("scripts --list failed")
	}
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 5 {
		t.Fatalf("scripts --list: %q", list)
	}
	for _, line := range lines {
		sum, name, _ := strings.Cut(line, "  ")
		out, _, code := cli(t, "scripts", strings.TrimSuffix(name, ".lua"))
		got := sha1.Sum([]byte(out))
		if code != 0 || hex.EncodeToString(got[:]) != sum {
			t.Errorf("scripts %s: exit %d, SHA1 %x, want %s (--list)", name, code, got, sum)
		}
	}
}

// TestScriptsAllBlocksLoad: in `floodgate scripts`' listing of every
// script, each block starts with the "#!lua" line Redis needs first, its
// banner after it, so a block copied from one shebang to the next loads.
func TestScriptsAllBlocksLoad(t *testing.T) {
	out, _, code := cli(t, "scripts")
	if code != 0 {
		t.Fatal("scripts failed")
	}
	blocks := strings.Split(out, "\n#!lua")
	if len(blocks) != 5 || !strings.HasPrefix(blocks[0], "#!lua") {
		t.Fatalf("%d blocks; the listing starts %q", len(blocks), out[:min(len(out), 40)])
	}
	for i, b := range blocks {
		if _, rest, _ := strings.Cut(b, "\n"); !strings.HasPrefix(rest, "-- ==== ") {
			t.Errorf("block %d: the line after #!lua is not the banner: %q", i, rest[:min(len(rest), 40)])
		}
	}
}

// TestCheckURL: check --url asks a running server, so it sees what the
// server counted; check on the memory store says it decides alone.
func TestCheckURL(t *testing.T) {
	base, _, _ := startServe(t)
	for i := range 5 {
		out, stderr, code := cli(t, "check", "--url", base, "--rule", "login", "--key", "user-7")
		if code != 0 || !strings.HasPrefix(out, "allowed: rule login") || strings.Contains(stderr, "decides alone") {
			t.Fatalf("request %d: exit %d\n%s\n%s", i+1, code, out, stderr)
		}
	}
	out, _, code := cli(t, "check", "--url", base, "--rule", "login", "--key", "user-7", "--json")
	var resp struct {
		Allowed      bool  `json:"allowed"`
		Remaining    int64 `json:"remaining"`
		RetryAfterMs int64 `json:"retry_after_ms"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil || code != 3 || resp.Allowed || resp.RetryAfterMs <= 0 {
		t.Fatalf("6th request: exit %d, %s (%v); want exit 3 and a denial with a retry", code, out, err)
	}
	// The server's errors come back as errors.
	if _, stderr, code := cli(t, "check", "--url", base, "--rule", "nope", "--key", "k"); code != 1 || !strings.Contains(stderr, "404") || !strings.Contains(stderr, "nope") {
		t.Errorf("unknown rule: exit %d %s", code, stderr)
	}
	if _, stderr, code := cli(t, "check", "--url", "ftp://x", "--rule", "login", "--key", "k"); code != 1 || !strings.Contains(stderr, "not a base URL") {
		t.Errorf("bad URL: exit %d %s", code, stderr)
	}
	if _, stderr, code := cli(t, "check", "--url", base, "--config", "x.yaml", "--rule", "login", "--key", "k"); code != 2 || !strings.Contains(stderr, "exclude each other") {
		t.Errorf("--url with --config: exit %d %s", code, stderr)
	}
	if _, stderr, code := cli(t, "check", "--rule", "login", "--key", "a\xffb"); code != 2 || !strings.Contains(stderr, "UTF-8") {
		t.Errorf("a key that is not UTF-8: exit %d %s", code, stderr)
	}
	// Deciding here on the memory store says so.
	if out, stderr, code := cli(t, "check", "--rule", "login", "--key", "k"); code != 0 || !strings.Contains(out, "allowed") || !strings.Contains(stderr, "decides alone") {
		t.Errorf("memory check: exit %d\n%s\n%s", code, out, stderr)
	}
}

// TestServeReloadAccounting: every SIGHUP is one reload counted by result
// (error when the config or the Envoy rules fail), the log level applies
// on reload, a log format change is reported as needing a restart, and
// --listen is never taken for a change.
func TestServeReloadAccounting(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules")
	writeRules(t, mkdir(t, rules), "5")
	cfgText := func(level, format string) string {
		return "listen: 127.0.0.1:1\nlog:\n  level: " + level + "\n  format: " + format + "\nrules:\n  - name: r\n    algorithm: fixed_window\n    limit: 5\n    window: 1h\n"
	}
	path := writeFile(t, dir, "floodgate.yaml", cfgText("info", "text"))
	base, _, logs, _ := startServeRLS(t, true, "--config", path, "--envoy-config", rules, "--grpc-listen", "127.0.0.1:0")
	reloads := func(result string) string {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, `floodgate_config_reloads_total{result="`+result+`"} `) {
				return strings.TrimPrefix(line, `floodgate_config_reloads_total{result="`+result+`"} `)
			}
		}
		return "0"
	}
	hup := func(result, want string) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for reloads(result) != want {
			if time.Now().After(deadline) {
				t.Fatalf("floodgate_config_reloads_total{result=%q} = %s after SIGHUP, want %s; log:\n%s", result, reloads(result), want, logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{"go_goroutines ", "process_cpu_seconds_total "} {
		if !strings.Contains(string(b), "\n"+series) {
			t.Errorf("/metrics lacks the process's %s", series)
		}
	}
	hup("ok", "1")
	if strings.Contains(logs.String(), "restart") {
		t.Errorf("a reload of an unchanged file (serve given --listen) warns of a restart:\n%s", logs)
	}
	// A bad Envoy rule file: the attempt is an error, the config applies.
	writeRules(t, rules, "-1")
	hup("error", "1")
	if !strings.Contains(logs.String(), "envoy rules reload failed") {
		t.Errorf("no word of the failed envoy reload:\n%s", logs)
	}
	writeRules(t, rules, "5")
	// A bad config file.
	writeFile(t, dir, "floodgate.yaml", "rules: [\n")
	hup("error", "2")
	// The log level applies: at error, a reload logs no info line.
	writeFile(t, dir, "floodgate.yaml", cfgText("error", "text"))
	hup("ok", "2")
	if !strings.Contains(logs.String(), "log level changed") {
		t.Fatalf("no word of the level change:\n%s", logs)
	}
	before := strings.Count(logs.String(), "config reloaded")
	hup("ok", "3")
	if after := strings.Count(logs.String(), "config reloaded"); after != before {
		t.Errorf("at log level error, a reload still logged %d info lines", after-before)
	}
	// A format change needs a restart, and says so (at warn, so at level
	// warn it shows).
	writeFile(t, dir, "floodgate.yaml", cfgText("warn", "json"))
	hup("ok", "4")
	if !strings.Contains(logs.String(), "take effect on restart only") || !strings.Contains(logs.String(), "log.format") {
		t.Errorf("a log.format change is not reported as needing a restart:\n%s", logs)
	}
	if strings.Contains(logs.String(), "changed=listen") || strings.Contains(logs.String(), "listen,") {
		t.Errorf("--listen reported as a changed setting:\n%s", logs)
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCheckURLToken: --token-file sends the file's token (trimmed) as a
// bearer token, and a refusal comes back as an error naming the status.
func TestCheckURLToken(t *testing.T) {
	const token = "s3cret-token"
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"title":"Unauthorized","status":401,"detail":"a bearer token is required"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"allowed":true,"limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":60000,"rule":"login"}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()
	file := writeFile(t, t.TempDir(), "token", token+"\n")
	if out, stderr, code := cli(t, "check", "--url", base, "--token-file", file, "--rule", "login", "--key", "k"); code != 0 || !strings.Contains(out, "remaining 4") {
		t.Errorf("with the token: exit %d %s %s", code, out, stderr)
	}
	if _, stderr, code := cli(t, "check", "--url", base, "--rule", "login", "--key", "k"); code != 1 || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "bearer token is required") {
		t.Errorf("without the token: exit %d %s", code, stderr)
	}
	if _, stderr, code := cli(t, "check", "--token-file", file, "--rule", "login", "--key", "k"); code != 2 || !strings.Contains(stderr, "--url only") {
		t.Errorf("--token-file without --url: exit %d %s", code, stderr)
	}
}

// TestCheckURLMutualTLS: check --url https:// reaches a server with mutual
// TLS and tokens with --ca-file, --cert-file and --key-file, over real
// handshakes; without the client certificate, or trusting another CA, it
// fails saying so.
func TestCheckURLMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "floodgate-test")
	srvCert := ca.Issue("server", tlstest.Leaf{CommonName: "localhost", Server: true, DNSNames: []string{"localhost"}})
	client := ca.Issue("client", tlstest.Leaf{CommonName: "ingress"})
	other := tlstest.NewCA(t, "stranger")
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", "ingress decide "+tokStrong+"\n")
	tokenFile := writeFile(t, dir, "token", tokStrong+"\n")
	cfg := writeFile(t, dir, "floodgate.yaml", fmt.Sprintf("listen: 127.0.0.1:0\nauth:\n  tokens_file: %s\ntls:\n  cert_file: %s\n  key_file: %s\n  client_ca_file: %s\nrules:\n  - {name: login, algorithm: fixed_window, limit: 5, window: 1m}\n",
		tokens, srvCert.CertFile, srvCert.KeyFile, ca.CertFile))
	_, banner := startBinary(t, nil, "--config", cfg)
	port := find(t, banner, `listening on https://127\.0\.0\.1:(\d+)`)
	base := "https://localhost:" + port
	ask := func(extra ...string) (string, string, int) {
		return cli(t, append([]string{"check", "--url", base, "--token-file", tokenFile, "--rule", "login", "--key", "k"}, extra...)...)
	}
	for _, c := range []struct {
		name  string
		flags []string
		code  int
		want  string
	}{
		{"CA and client certificate", []string{"--ca-file", ca.CertFile, "--cert-file", client.CertFile, "--key-file", client.KeyFile}, 0, "remaining 4"},
		{"no client certificate", []string{"--ca-file", ca.CertFile}, 1, "asking " + base},
		{"another CA", []string{"--ca-file", other.CertFile, "--cert-file", client.CertFile, "--key-file", client.KeyFile}, 1, "certificate"},
		{"no CA: the system's roots", nil, 1, "certificate"},
		{"a missing CA file", []string{"--ca-file", filepath.Join(dir, "none.pem")}, 1, "--ca-file " + filepath.Join(dir, "none.pem") + ": no such file"},
		{"a certificate without its key", []string{"--ca-file", ca.CertFile, "--cert-file", client.CertFile}, 2, "--cert-file and --key-file go together"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := ask(c.flags...)
			if code != c.code || !strings.Contains(out+stderr, c.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s%s", code, c.code, c.want, out, stderr)
			}
		})
	}
	if _, stderr, code := cli(t, "check", "--url", "http://127.0.0.1:"+port, "--ca-file", ca.CertFile, "--rule", "login", "--key", "k"); code != 2 || !strings.Contains(stderr, "https:// --url only") {
		t.Errorf("--ca-file with an http URL: exit %d %s", code, stderr)
	}
}

// TestConfigValidateWarnsAsServe: config validate prints each warning serve
// prints as it starts, and exits 0 with them.
func TestConfigValidateWarnsAsServe(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules/ok.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	const rule = "rules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n"
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"listen beyond loopback without tokens", "listen: 0.0.0.0:8080\n" + rule,
			[]string{"listen 0.0.0.0:8080 is reachable beyond this machine and needs no token", "set auth.tokens_file"}},
		{"grpc_listen beyond loopback without tokens", "listen: 127.0.0.1:0\ngrpc_listen: 0.0.0.0:8081\nenvoy_config: " + filepath.Dir(rules) + "\n",
			[]string{"grpc_listen 0.0.0.0:8081 is reachable beyond this machine", "the Envoy rate-limit service decides on the in-process memory store"}},
		{"Redis TLS without hostname verification", "store:\n  type: redis\n  addrs: [127.0.0.1:6380]\n  tls: true\n  tls_skip_hostname_verification: true\n" + rule,
			[]string{"line 5: store.tls_skip_hostname_verification: TLS hostname verification is off"}},
		{"tokens file others can read", "auth:\n  tokens_file: " + writeWorldReadable(t, dir) + "\n" + rule,
			[]string{"is readable by every user of this machine"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "floodgate.yaml", c.yaml)
			out, stderr, code := cli(t, "config", "validate", path)
			if code != 0 || !strings.Contains(out, "ok") {
				t.Fatalf("exit %d:\n%s%s", code, out, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, "warning: ") || !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	// serve prints the same words at start, naming the address it bound.
	path := writeFile(t, dir, "open.yaml", "listen: 0.0.0.0:0\n"+rule)
	_, stderr, _ := cli(t, "config", "validate", path)
	_, want, ok := strings.Cut(strings.TrimSpace(stderr), "warning: listen 0.0.0.0:0 ")
	if !ok {
		t.Fatalf("validate does not warn of listen:\n%s", stderr)
	}
	p, _ := startBinary(t, nil, "--config", path)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.stderr.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve lacks %q:\n%s", want, p.stderr)
		}
	}
}

// writeWorldReadable writes a tokens file of mode 0644.
func writeWorldReadable(t *testing.T, dir string) string {
	t.Helper()
	path := writeFile(t, dir, "tokens", "ingress decide "+tokStrong+"\n")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

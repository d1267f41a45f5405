package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// startServe runs `floodgate serve args...` in-process and returns its base
// URL, its log, and a stop function that cancels it and returns run's error.
func startServe(t *testing.T, args ...string) (base string, logs *syncbuf.Buffer, stop func() error) {
	t.Helper()
	base, _, logs, stop = startServeRLS(t, false, args...)
	return base, logs, stop
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sendStatus sends a request with a JSON body (none if empty) and the header
// pairs given, and returns its status, the body read and closed.
func sendStatus(t *testing.T, method, url, body string, header ...string) int {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestServeBuiltInPolicy(t *testing.T) {
	base, _, stop := startServe(t)
	for i := range 5 {
		if code, body := post(t, base+"/v1/check", `{"rule":"login","key":"user-42"}`); code != 200 {
			t.Fatalf("request %d: %d %s", i+1, code, body)
		}
	}
	if code, _ := post(t, base+"/v1/check", `{"rule":"login","key":"user-42"}`); code != 429 {
		t.Fatalf("6th login: %d, want 429", code)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v on shutdown", err)
	}
}

func TestServeReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	write := func(limit string) {
		cfg := "rules:\n  - name: r\n    algorithm: fixed_window\n    limit: " + limit + "\n    window: 1h\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	base, logs, _ := startServe(t, "--config", path)
	post(t, base+"/v1/check", `{"rule":"r","key":"k"}`)
	if code, _ := post(t, base+"/v1/check", `{"rule":"r","key":"k"}`); code != 429 {
		t.Fatalf("limit 1: second request %d", code)
	}
	hup := func(wantLog string) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), wantLog) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", wantLog, logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	write("5")
	hup("config reloaded")
	if code, body := post(t, base+"/v1/check", `{"rule":"r","key":"k"}`); code != 200 {
		t.Fatalf("after reload to limit 5: %d %s", code, body)
	}
	// --listen overrides the file's listen: not a change that needs a restart.
	if strings.Contains(logs.String(), "restart") {
		t.Errorf("a reload of the same store and listen settings warns of a restart:\n%s", logs)
	}
	// A bad file keeps the running config and says why.
	if err := os.WriteFile(path, []byte("rules:\n  - name: r\n    algorithm: nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup("reload failed")
	if !strings.Contains(logs.String(), "nope") {
		t.Errorf("the reload error does not say what is wrong:\n%s", logs)
	}
	if code, _ := post(t, base+"/v1/check", `{"rule":"r","key":"k2"}`); code != 200 {
		t.Fatalf("after a bad reload the old rule should still work: %d", code)
	}
	metrics, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	if want := `floodgate_config_reloads_total{result="error"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %q", want)
	}
	// A changed store is applied on restart only, and says so.
	if err := os.WriteFile(path, []byte("store:\n  max_keys: 5000\nrules:\n  - name: r\n    algorithm: fixed_window\n    limit: 5\n    window: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup("take effect on restart only")
}

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte("rules:\n  - name: x\n    algorithm: fixed_window\n    limit: 0\n    window: 1s\n"), 0o600)
	good := filepath.Join(dir, "good.yaml")
	_ = os.WriteFile(good, []byte("rules:\n  - name: x\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n"), 0o600)
	noRules := filepath.Join(dir, "no-rules.yaml")
	_ = os.WriteFile(noRules, []byte("listen: 127.0.0.1:0\n"), 0o600)
	envoyDir := filepath.Join(dir, "envoy")
	_ = os.Mkdir(envoyDir, 0o700)
	_ = os.WriteFile(filepath.Join(envoyDir, "config.yaml"), []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n"), 0o600)
	cases := []struct {
		name    string
		args    []string
		wantErr error // nil, errUsage, errDenied, or errAny
		out     string
	}{
		{"help", []string{"help"}, nil, "Commands:"},
		{"version", []string{"version"}, nil, "floodgate "},
		{"unknown command", []string{"frobnicate"}, errUsage, ""},
		{"serve help", []string{"serve", "--help"}, flagHelp, ""},
		{"check allowed", []string{"check", "--rule", "login", "--key", "k"}, nil, "allowed"},
		{"check json", []string{"check", "--rule", "api", "--key", "k", "--json"}, nil, `"allowed":true`},
		{"check cost over limit", []string{"check", "--rule", "login", "--key", "k", "--cost", "9"}, errAny, ""},
		{"check unknown rule", []string{"check", "--rule", "nope", "--key", "k"}, errAny, ""},
		{"check no rule", []string{"check", "--key", "k"}, errUsage, ""},
		{"config validate good", []string{"config", "validate", good}, nil, "ok"},
		{"config validate bad", []string{"config", "validate", bad}, errAny, ""},
		{"config validate no rules", []string{"config", "validate", noRules}, errAny, ""},
		{"config validate no rules, Envoy's from a folder", []string{"config", "validate", "--envoy-config", envoyDir, noRules}, nil, "envoy rules for 1 domains"},
		{"config example", []string{"config", "example"}, nil, "sliding_window_log"},
		{"scripts all", []string{"scripts"}, nil, "-- ==== token_bucket.lua ===="},
		{"scripts one", []string{"scripts", "sliding_window_log"}, nil, "KEYS[1]"},
		{"scripts list", []string{"scripts", "--list"}, nil, "  fixed_window.lua"},
		{"scripts unknown", []string{"scripts", "leaky"}, errUsage, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), c.args, &out, &errOut)
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("error %v; stderr %s", err, errOut.String())
			case c.wantErr == errAny && err == nil:
				t.Fatal("no error")
			case c.wantErr != nil && c.wantErr != errAny && !errors.Is(err, c.wantErr):
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if !strings.Contains(out.String(), c.out) {
				t.Fatalf("stdout %q lacks %q", out.String(), c.out)
			}
		})
	}
	// --out writes files that match the embedded scripts byte for byte.
	outDir := filepath.Join(dir, "lua")
	if err := run(context.Background(), []string{"scripts", "--out", outDir}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	written, _ := filepath.Glob(filepath.Join(outDir, "*.lua"))
	if len(written) != 5 {
		t.Fatalf("scripts --out wrote %v, want 5 files", written)
	}
	// The bad config's error names the line, the field and the value.
	err := run(context.Background(), []string{"config", "validate", bad}, io.Discard, io.Discard)
	for _, want := range []string{"line 4", "rules[0].limit", "0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config validate error %v lacks %q", err, want)
		}
	}
}

var (
	errAny   = errors.New("any error")
	flagHelp = errHelp()
)

func errHelp() error {
	err := run(context.Background(), []string{"version", "-h"}, io.Discard, io.Discard)
	return err
}

// TestServeShutdownFinishesInFlight: a request in flight when shutdown
// begins still gets its answer.
func TestServeShutdownFinishesInFlight(t *testing.T) {
	base, _, stop := startServe(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"rule":"api","key":"in-flight"}`
	half := len(body) / 2
	if _, err := io.WriteString(conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body[:half]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the server start reading the body
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("shutdown finished (%v) while a request was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := io.WriteString(conn, body[half:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("in-flight request got no response: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("in-flight request: %d", resp.StatusCode)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

// TestPeerArgs: started as envoyproxy/ratelimit's binary, by its name or as
// the image entrypoint's argument, floodgate serves with the peer's
// environment.
func TestPeerArgs(t *testing.T) {
	for _, c := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"serve", "--envoy-env"}},
		{"ratelimit", []string{"--log-level", "debug"}, []string{"serve", "--envoy-env", "--log-level", "debug"}},
		{"/usr/local/bin/floodgate", []string{"/bin/ratelimit"}, []string{"serve", "--envoy-env"}},
		{"/usr/local/bin/floodgate", []string{"serve", "--config", "f.yaml"}, []string{"serve", "--config", "f.yaml"}},
		{"floodgate", []string{"ratelimit"}, []string{"ratelimit"}}, // not the peer's path: an unknown command, as before
		{"floodgate", nil, nil},
	} {
		if got := peerArgs(c.argv0, c.args); !slices.Equal(got, c.want) {
			t.Errorf("peerArgs(%q, %q) = %q, want %q", c.argv0, c.args, got, c.want)
		}
	}
}

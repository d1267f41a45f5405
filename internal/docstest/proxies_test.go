package docstest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// needProxy returns the path of a proxy's program, skipping the test when
// it is not installed (failing under FLOODGATE_REQUIRE_PROXIES=1).
func needProxy(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
			if p := filepath.Join(dir, name); fileExists(p) {
				return p
			}
		}
		if os.Getenv("FLOODGATE_REQUIRE_PROXIES") == "1" {
			t.Fatalf("%s is not installed and FLOODGATE_REQUIRE_PROXIES=1 (apt-get install nginx-light caddy)", name)
		}
		t.Skipf("%s is not installed (apt-get install nginx-light caddy; FLOODGATE_REQUIRE_PROXIES=1 makes this a failure)", name)
	}
	return path
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startFloodgate serves PROXIES.md's floodgate.yaml (limit 3 instead of
// 100, the given deny status) on loopback, and returns its address and a
// function that stops it, so that it is unreachable.
func startFloodgate(t *testing.T, denyStatus string) (addr string, stop func()) {
	t.Helper()
	yaml := replaceAll(t, taggedBlock(t, readDoc(t, "docs/PROXIES.md"), "docs/PROXIES.md", "floodgate.yaml"),
		"limit: 100", "limit: 3", "deny_status: 429", "deny_status: "+denyStatus)
	cfg, err := config.Parse([]byte(yaml), "PROXIES.md floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(memory.New(), policy, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = hs.Close()
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// startApp serves the protected service: 200 "app" on every path.
func startApp(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "app\n")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// startProcess runs a proxy until the test ends and waits until addr
// accepts connections.
func startProcess(t *testing.T, addr string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("%s exited: %v\n%s", name, waitErr, logs.String())
		default:
		}
		// A connection, not a request: a request would spend quota.
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer on %s within 30s: %v\n%s", name, addr, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get asks the proxy for /api/x.
func get(t *testing.T, addr string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/x", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// checkRecipe holds a proxy in front of floodgate to what PROXIES.md says:
// three requests pass with their RateLimit headers, the fourth is 429 with
// Retry-After and the RateLimit headers; with floodgate stopped, requests
// pass (fail open) or are refused with 503 and Retry-After (fail closed).
func checkRecipe(t *testing.T, proxy string, stopFloodgate func(), failOpen bool) {
	t.Helper()
	for i := range 3 {
		code, h, body := get(t, proxy)
		want := fmt.Sprintf(";r=%d;", 2-i)
		if code != 200 || body != "app\n" || !strings.Contains(h.Get("RateLimit"), want) || h.Get("RateLimit-Policy") == "" {
			t.Fatalf("request %d: %d %q, RateLimit %q, RateLimit-Policy %q; want 200 from the service with r=%d",
				i+1, code, body, h.Get("RateLimit"), h.Get("RateLimit-Policy"), 2-i)
		}
	}
	code, h, body := get(t, proxy)
	if code != 429 || h.Get("Retry-After") == "" || !strings.Contains(h.Get("RateLimit"), ";r=0;") || h.Get("RateLimit-Policy") == "" {
		t.Fatalf("4th request: %d %q, headers %v; want 429 with Retry-After, RateLimit and RateLimit-Policy", code, body, h)
	}
	if !strings.Contains(h.Get("Content-Type"), "problem+json") {
		t.Errorf("the 429 is %q, not problem details", h.Get("Content-Type"))
	}
	stopFloodgate()
	for i := range 3 {
		code, h, body := get(t, proxy)
		switch {
		case failOpen && (code != 200 || body != "app\n"):
			t.Fatalf("floodgate down, fail open, request %d: %d %q, want the service's 200", i+1, code, body)
		case !failOpen && (code != 503 || h.Get("Retry-After") != "5"):
			t.Fatalf("floodgate down, fail closed, request %d: %d %q (Retry-After %q), want 503 with Retry-After 5", i+1, code, body, h.Get("Retry-After"))
		}
	}
}

func TestNginxRecipe(t *testing.T) {
	nginx := needProxy(t, "nginx")
	for _, failOpen := range []bool{true, false} {
		t.Run(map[bool]string{true: "fail open", false: "fail closed"}[failOpen], func(t *testing.T) {
			fg, stop := startFloodgate(t, "403")
			app, listen := startApp(t), freePort(t)
			block := replaceAll(t, taggedBlock(t, readDoc(t, "docs/PROXIES.md"), "docs/PROXIES.md", "nginx"),
				"server 127.0.0.1:8080;", "server "+fg+";",
				"proxy_pass http://127.0.0.1:9000;", "proxy_pass http://"+app+";",
				"listen 80;", "listen "+listen+";")
			if !failOpen {
				block = replaceAll(t, block, "return 204;", "return 503;")
			}
			dir := t.TempDir()
			conf := fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s}
`, dir, block)
			if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil { // nginx's workers may run as nobody
				t.Fatal(err)
			}
			if out, err := exec.Command(nginx, "-t", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf")).CombinedOutput(); err != nil {
				t.Fatalf("nginx -t: %v\n%s", err, out)
			}
			startProcess(t, listen, nil, nginx, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf"))
			checkRecipe(t, listen, stop, failOpen)
		})
	}
}

func TestCaddyRecipe(t *testing.T) {
	caddy := needProxy(t, "caddy")
	for _, failOpen := range []bool{true, false} {
		t.Run(map[bool]string{true: "fail open", false: "fail closed"}[failOpen], func(t *testing.T) {
			fg, stop := startFloodgate(t, "429")
			app, listen, fallback := startApp(t), freePort(t), freePort(t)
			block := replaceAll(t, taggedBlock(t, readDoc(t, "docs/PROXIES.md"), "docs/PROXIES.md", "caddy"),
				"forward_auth 127.0.0.1:8080 127.0.0.1:8099", "forward_auth "+fg+" "+fallback,
				"http://127.0.0.1:8099", "http://"+fallback,
				"reverse_proxy 127.0.0.1:9000 {", "reverse_proxy "+app+" {",
				"example.com {", "http://"+listen+" {")
			if !failOpen {
				block = replaceAll(t, block, "respond 204", "respond 503")
			}
			dir := t.TempDir()
			caddyfile := "{\n\tadmin off\n\tauto_https off\n}\n\n" + block
			path := filepath.Join(dir, "Caddyfile")
			if err := os.WriteFile(path, []byte(caddyfile), 0o644); err != nil {
				t.Fatal(err)
			}
			env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
			startProcess(t, listen, env, caddy, "run", "--adapter", "caddyfile", "--config", path)
			checkRecipe(t, listen, stop, failOpen)
		})
	}
}

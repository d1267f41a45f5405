package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeReloadAuth: a reload turns authentication on and rotates the
// tokens, but never turns it off.
func TestServeReloadAuth(t *testing.T) {
	dir := t.TempDir()
	path, tokens := filepath.Join(dir, "floodgate.yaml"), filepath.Join(dir, "tokens")
	rules := "rules:\n  - name: r\n    algorithm: fixed_window\n    limit: 100\n    window: 1h\n"
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(path, rules)
	base, logs, _ := startServe(t, "--config", path)
	checkWith := func(token string) int {
		t.Helper()
		if token == "" {
			return sendStatus(t, http.MethodPost, base+"/v1/check", `{"rule":"r","key":"k"}`)
		}
		return sendStatus(t, http.MethodPost, base+"/v1/check", `{"rule":"r","key":"k"}`, "Authorization", "Bearer "+token)
	}
	hup := func(wantLog string) {
		t.Helper()
		before := strings.Count(logs.String(), wantLog)
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); strings.Count(logs.String(), wantLog) == before; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", wantLog, logs)
			}
		}
	}
	if code := checkWith(""); code != 200 {
		t.Fatalf("no auth: %d", code)
	}
	write(tokens, "a decide "+tokDecide+"\n")
	write(path, "auth:\n  tokens_file: "+tokens+"\n"+rules)
	hup("tokens reloaded")
	if code := checkWith(""); code != 401 {
		t.Fatalf("auth turned on by a reload: no token %d, want 401", code)
	}
	if code := checkWith(tokDecide); code != 200 {
		t.Fatalf("auth turned on by a reload: token %d", code)
	}
	write(path, rules)
	hup("cannot turn authentication off")
	if code := checkWith(""); code != 401 {
		t.Fatalf("after a reload without auth: no token %d, want 401 (auth stays on until a restart)", code)
	}
	// A bad tokens file keeps the tokens in force.
	write(path, "auth:\n  tokens_file: "+tokens+"\n"+rules)
	write(tokens, "a decide short\n")
	hup("reload failed")
	if code := checkWith(tokDecide); code != 200 {
		t.Fatalf("after a bad tokens file: %d, want the old token still valid", code)
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckNeedsAKey: check without --key, or with an empty one, is a
// usage error (exit 2, with the usage), not a decision about the key "".
func TestCheckNeedsAKey(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--rule", "login"},
		{"check", "--rule", "login", "--key", ""},
		{"check", "--rule", "login", "--key="},
		{"check", "--url", "http://127.0.0.1:1", "--rule", "login"},
	} {
		out, stderr, code := cli(t, args...)
		if code != 2 || !strings.Contains(stderr, "--key is required") || !strings.Contains(stderr, "Usage: floodgate check") || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 saying --key is required, with the usage", args, code, out, stderr)
		}
	}
	if out, stderr, code := cli(t, "check", "--rule", "login", "--key", "alice"); code != 0 || !strings.Contains(out, `key "alice"`) {
		t.Errorf("check --key alice: exit %d %s %s", code, out, stderr)
	}
}

// TestValidateRefusesNothingToServe: a file with no rules and no Envoy
// service validates as serve reads it: refused with the line and the
// fix; with envoy_config (in the file or the flag) it serves Envoy alone.
func TestValidateRefusesNothingToServe(t *testing.T) {
	dir := t.TempDir()
	envoyDir := filepath.Join(dir, "envoy")
	writeFile(t, envoyDir, "a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	for _, c := range []struct{ name, yaml, want string }{
		{"empty list", "listen: 127.0.0.1:0\nrules: []\n", ": line 2: rules: no rules, and no envoy_config: serve would limit nothing"},
		{"null", "listen: 127.0.0.1:0\nrules:\n", ": line 2: rules: no rules, and no envoy_config"},
		{"left out", "listen: 127.0.0.1:0\n", ": line 1: rules: no rules, and no envoy_config"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(c.name, " ", "-")+".yaml", c.yaml)
			_, stderr, code := cli(t, "config", "validate", path)
			if code != 1 || !strings.Contains(stderr, path+c.want) || !strings.Contains(stderr, "add a rule under rules:") {
				t.Errorf("exit %d, stderr %q; want exit 1 with %q", code, stderr, path+c.want)
			}
			_, stderr, code = cli(t, "serve", "--config", path)
			if code != 1 || !strings.Contains(stderr, "no rules, and no envoy_config") {
				t.Errorf("serve: exit %d, stderr %q", code, stderr)
			}
		})
	}
	path := writeFile(t, dir, "envoy-only.yaml", "listen: 127.0.0.1:0\nenvoy_config: "+envoyDir+"\n")
	if out, stderr, code := cli(t, "config", "validate", path); code != 0 || !strings.Contains(out, "ok (0 rules") {
		t.Errorf("envoy only: exit %d %s %s", code, out, stderr)
	}
	// Store settings alone serve remote stores, with --store-api.
	path = writeFile(t, dir, "store-only.yaml", "listen: 127.0.0.1:0\nstore:\n  type: memory\n")
	if out, stderr, code := cli(t, "config", "validate", "--store-api", path); code != 0 || !strings.Contains(out, "ok (0 rules") {
		t.Errorf("store API only: exit %d %s %s", code, out, stderr)
	}
	if _, stderr, code := cli(t, "config", "validate", path); code != 1 || !strings.Contains(stderr, "serve --store-api (config validate --store-api)") {
		t.Errorf("store settings alone without --store-api: exit %d %s", code, stderr)
	}
}

// TestValidateListenerFlags: serve's flags are held to the same rule as
// the file: no two listeners on one port.
func TestValidateListenerFlags(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "f.yaml", "listen: 127.0.0.1:9000\nrules:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n")
	_, stderr, code := cli(t, "serve", "--config", path, "--grpc-listen", "127.0.0.1:9000")
	if code != 1 || !strings.Contains(stderr, "with serve's flags applied") || !strings.Contains(stderr, "grpc_listen: 127.0.0.1:9000 takes the same address as listen") {
		t.Errorf("serve --grpc-listen on listen's address: exit %d %s", code, stderr)
	}
}

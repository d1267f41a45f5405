package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServeKeys(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ingress decide 0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte("auth:\n  tokens_file: "+tokens+"\nmetrics_listen: 127.0.0.1:9090\nmax_connections: 50\nmax_in_flight: 10\nstore:\n  max_keys: 1000\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := c.Auth.Tokens()
	if err != nil || set.Len() != 1 || c.MaxConnectionsValue() != 50 || c.MaxInFlight != 10 || c.Store.MaxKeysValue() != 1000 {
		t.Fatalf("%+v %v", c, err)
	}
	if d, _ := Parse([]byte("listen: 127.0.0.1:1\n"), "f.yaml"); d.MaxConnectionsValue() != DefaultMaxConnections || d.Store.MaxKeysValue() != DefaultMaxKeys || d.Auth.Enabled() {
		t.Fatalf("defaults: %+v", d)
	}
	t.Setenv("FG_CONFIG_TEST_TOKENS", "a decide 0123456789abcdef0123456789abcdef; b admin 0123456789abcdef0123456789ab4567")
	if e, err := Parse([]byte("auth:\n  tokens_env: FG_CONFIG_TEST_TOKENS\n"), "f.yaml"); err != nil {
		t.Fatal(err)
	} else if set, err := e.Auth.Tokens(); err != nil || set.Len() != 2 {
		t.Fatalf("tokens from the environment: %v %v", set, err)
	}
}

func TestServeKeyErrors(t *testing.T) {
	dir := t.TempDir()
	weak := filepath.Join(dir, "weak")
	if err := os.WriteFile(weak, []byte("ingress decide short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	placeholder := filepath.Join(dir, "placeholder")
	if err := os.WriteFile(placeholder, []byte("ops admin replace-me-ops-token-openssl-rand-hex-32\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, yaml, want, not string }{
		{"placeholder token", "auth:\n  tokens_file: " + placeholder + "\n", `line 2: auth.tokens_file: ` + placeholder + `:1: token "ops" is a placeholder`, ""},
		{"token under 128 bits", "auth:\n  tokens_env: FG_CONFIG_TEST_WEAK\n", `token "a" holds at most 80 bits`, ""},
		{"missing tokens file", "auth:\n  tokens_file: " + filepath.Join(dir, "none") + "\n", "line 2: auth.tokens_file", ""},
		{"weak token", "auth:\n  tokens_file: " + weak + "\n", "shorter than 16", ""},
		{"both token sources", "auth:\n  tokens_file: " + weak + "\n  tokens_env: X\n", "auth.tokens_env", ""},
		{"unset token variable", "auth:\n  tokens_env: FG_SURELY_UNSET\n", "FG_SURELY_UNSET is not set", ""},
		{"key without cert", "tls:\n  key_file: k.pem\n", "tls.cert_file: is required with tls.key_file:", "client_ca_file"},
		{"client CA without cert", "tls:\n  client_ca_file: ca.pem\n", "tls.cert_file: is required with tls.client_ca_file:", "key_file"},
		{"key and client CA without cert", "tls:\n  key_file: k.pem\n  client_ca_file: ca.pem\n", "tls.cert_file: is required with tls.key_file and tls.client_ca_file:", ""},
		{"cert without key", "tls:\n  cert_file: c.pem\n", "tls.key_file", ""},
		{"unreadable cert", "tls:\n  cert_file: " + filepath.Join(dir, "c.pem") + "\n  key_file: k.pem\n", "line 2: tls.cert_file: " + filepath.Join(dir, "c.pem") + " no such file", ""},
		{"bad metrics address", "metrics_listen: nine-thousand\n", "line 1: metrics_listen", ""},
		{"metrics on the API's address", "listen: 127.0.0.1:8080\nmetrics_listen: 127.0.0.1:8080\n", "line 2: metrics_listen: 127.0.0.1:8080 takes the same address as listen (127.0.0.1:8080); give metrics_listen a port of its own", ""},
		{"negative connections", "max_connections: -1\n", "max_connections", ""},
		{"negative in flight", "max_in_flight: -5\n", "max_in_flight", ""},
		{"max_keys on redis", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  max_keys: 5\n", "store.max_keys", ""},
		{"tls_* without tls", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  tls_server_name: r\n", "store.tls_server_name", ""},
	}
	t.Setenv("FG_CONFIG_TEST_WEAK", "a decide 0123456789abcdef0123")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml), "f.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
			if c.not != "" && strings.Contains(err.Error(), c.not) {
				t.Fatalf("error %v names %s, which the file does not set", err, c.not)
			}
			if strings.Contains(err.Error(), "short\n") {
				t.Fatalf("the error shows a token: %v", err)
			}
		})
	}
}

func TestTokensFileReadableByOthers(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ingress decide 0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o640, false}, {0o440, false}, {0o644, true}, {0o604, true}} {
		if err := os.Chmod(tokens, c.mode); err != nil {
			t.Fatal(err)
		}
		cfg, err := Parse([]byte("auth:\n  tokens_file: "+tokens+"\n"), "f.yaml")
		if err != nil {
			t.Fatal(err)
		}
		w := strings.Join(cfg.Warnings(), "\n")
		if got := strings.Contains(w, "line 2: auth.tokens_file: "+tokens+" is readable by every user"); got != c.warn {
			t.Errorf("mode %04o: warnings %q, want a warning %v", c.mode, w, c.warn)
		}
	}
}

package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/tlstest"
)

// rule is one valid rule, for files whose subject is elsewhere.
const rule = "rules:\n  - name: a\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n"

// TestRedisKeysOnMemoryStore: every key only a Redis store reads is an
// error on the memory store, whether store.type says memory or is left
// out, naming the key, its line and the fix; so that replicas meant to
// share a Redis never each count alone.
func TestRedisKeysOnMemoryStore(t *testing.T) {
	t.Setenv("FLOODGATE_TEST_PW", "p")
	keys := []struct{ key, yaml string }{
		{"addrs", "addrs: [127.0.0.1:6379]"},
		{"master_name", "master_name: m"},
		{"username", "username: u"},
		{"password", "password: s3cret"},
		{"password_env", "password_env: FLOODGATE_TEST_PW"},
		{"sentinel_username", "sentinel_username: su"},
		{"sentinel_password", "sentinel_password: sp"},
		{"sentinel_password_env", "sentinel_password_env: FLOODGATE_TEST_PW"},
		{"tls", "tls: true"},
		{"tls_ca_file", "tls_ca_file: /etc/ca.pem"},
		{"tls_cert_file", "tls_cert_file: /etc/c.pem"},
		{"tls_key_file", "tls_key_file: /etc/k.pem"},
		{"tls_server_name", "tls_server_name: r"},
		{"tls_skip_hostname_verification", "tls_skip_hostname_verification: true"},
		{"db", "db: 2"},
		{"timeout", "timeout: 100ms"},
		{"key_prefix", `key_prefix: "x:"`},
		{"flush_delay", "flush_delay: -1ns"},
		{"require_at_start", "require_at_start: true"},
		{"max_in_flight", "max_in_flight: 10"},
		{"breaker_failures", "breaker_failures: 3"},
	}
	for _, typ := range []struct{ line, why string }{
		{"", "store.type is left out, so the store is memory"},
		{"  type: memory\n", "store.type is memory"},
	} {
		for _, k := range keys {
			t.Run(k.key+"/"+strings.TrimSpace(typ.line), func(t *testing.T) {
				src := "store:\n" + typ.line + "  max_keys: 100\n  " + k.yaml + "\n" + rule
				line := strings.Count(typ.line, "\n") + 3
				_, err := Parse([]byte(src), "f.yaml")
				if err == nil {
					t.Fatalf("Parse accepted %s on the memory store:\n%s", k.key, src)
				}
				msg := err.Error()
				want := "f.yaml: line " + strconv.Itoa(line) + ": store." + k.key + ": "
				for _, w := range []string{want, "applies to a Redis store only", typ.why, "set store.type: redis"} {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q lacks %q", msg, w)
					}
				}
				if n := strings.Count(msg, "store."+k.key+":"); n != 1 {
					t.Errorf("store.%s reported %d times: %s", k.key, n, msg)
				}
				if strings.Contains(msg, "s3cret") || strings.Contains(msg, "sp ") {
					t.Errorf("the error shows a password: %s", msg)
				}
			})
		}
	}
	// The tester's file: all of them reported, each at its line.
	src := "store:\n  addrs: [127.0.0.1:6379]\n  password_env: HOME\n  key_prefix: \"x:\"\n  timeout: 100ms\n" + rule
	_, err := Parse([]byte(src), "f.yaml")
	for _, w := range []string{"line 2: store.addrs", "line 3: store.password_env", "line 4: store.key_prefix", "line 5: store.timeout"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	// What the memory store does read stays valid.
	if _, err := Parse([]byte("store:\n  type: memory\n  max_keys: 10\n  over_limit_cache:\n    max_entries: 5\n"+rule), "f.yaml"); err != nil {
		t.Errorf("memory store keys: %v", err)
	}
	// master_name is the sentinels' only.
	if _, err := Parse([]byte("store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  master_name: m\n"+rule), "f.yaml"); err == nil ||
		!strings.Contains(err.Error(), "line 4: store.master_name: m applies only with store.type: redis-sentinel") {
		t.Errorf("master_name on type redis: %v", err)
	}
}

// TestListenerErrors: validate refuses what serve could not listen on,
// as serve reads it, and without a DNS lookup: hosts that are not IP
// addresses or localhost, and two listeners on one port.
func TestListenerErrors(t *testing.T) {
	envoy := "envoy_config: /etc/floodgate/envoy\n"
	cases := []struct{ name, yaml, want string }{
		{"grpc on listen's address", "listen: 127.0.0.1:9000\ngrpc_listen: 127.0.0.1:9000\n",
			"line 2: grpc_listen: 127.0.0.1:9000 takes the same address as listen (127.0.0.1:9000); give grpc_listen a port of its own"},
		{"grpc on every interface at listen's port", "listen: 127.0.0.1:9000\ngrpc_listen: :9000\n" + envoy, "line 2: grpc_listen: :9000 takes the same port on every interface as listen"},
		{"metrics beside grpc", "grpc_listen: 0.0.0.0:9001\nmetrics_listen: 10.0.0.2:9001\n" + envoy, "line 2: metrics_listen: 10.0.0.2:9001 takes the same port on every interface as grpc_listen"},
		{"metrics at localhost on listen's address", "listen: 127.0.0.1:9000\nmetrics_listen: localhost:9000\n", "metrics_listen: localhost:9000 takes the same address as listen"},
		{"grpc default on listen's", "listen: 127.0.0.1:8081\n" + envoy, "grpc_listen: 127.0.0.1:8081 takes the same address as listen"},
		{"service name and number", "listen: 127.0.0.1:http\nmetrics_listen: 127.0.0.1:80\n", "metrics_listen: 127.0.0.1:80 takes the same address as listen"},
		{"shorthand zero", "listen: \"0:18520\"\n", `line 1: listen: 0:18520 has host "0", a shorthand of 0.0.0.0 that serve does not read as an address; write 0.0.0.0:18520`},
		{"shorthand loopback", "listen: \"127.1:18520\"\n", "write 127.0.0.1:18520"},
		{"host name", "listen: floodgate.internal:8080\n", `line 1: listen: floodgate.internal:8080 has host "floodgate.internal", a host name`},
		{"grpc host name", "grpc_listen: rls.example:8081\n", "line 1: grpc_listen: rls.example:8081 has host"},
		{"metrics host name", "metrics_listen: metrics.example:9090\n", "line 1: metrics_listen: metrics.example:9090 has host"},
		{"metrics without port", "metrics_listen: nine-thousand\n", "line 1: metrics_listen: nine-thousand is not a listen address"},
		{"rule header with a space", "forward_auth:\n  rule_header: \"bad header\"\n", `line 2: forward_auth.rule_header: "bad header" is not a header field name`},
		{"rule header with a colon", "forward_auth:\n  rule_header: \"X-Rule:\"\n", "forward_auth.rule_header"},
		{"ipv6 prefix zero", "client_ip:\n  ipv6_prefix: 0\n", "line 2: client_ip.ipv6_prefix: 0 must be from 1 to 128; write 64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml+rule), "f.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
		})
	}
	for _, ok := range []string{
		"listen: 127.0.0.1:8081\n", // the default grpc_listen, unused without the Envoy service
		"listen: 127.0.0.1:0\ngrpc_listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n" + envoy,
		"listen: 127.0.0.1:9000\nmetrics_listen: 10.0.0.2:9000\n",
		"listen: \"[::1]:9000\"\nmetrics_listen: 0.0.0.0:9000\n", // IPv4's every interface, IPv6 loopback
		"listen: localhost:9000\nforward_auth:\n  rule_header: X-My_Rule.v2\nclient_ip:\n  ipv6_prefix: 128\n",
	} {
		if _, err := Parse([]byte(ok+rule), "f.yaml"); err != nil {
			t.Errorf("Parse refused:\n%s: %v", ok, err)
		}
	}
}

// TestSmallerErrors: each error once, at the line of the field at fault,
// with its key said once.
func TestSmallerErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "edge")
	srv := ca.Issue("srv", tlstest.Leaf{CommonName: "srv", Server: true})
	other := ca.Issue("other", tlstest.Leaf{CommonName: "other", Server: true})
	cert, key, otherKey := srv.CertFile, srv.KeyFile, other.KeyFile
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, yaml string
		want       []string
		once       string // said exactly once
	}{
		{"unknown store type once", "store:\n  type: mysql\n", []string{"line 2: store.type: mysql is not one of"}, "store.type"},
		{"missing cert", "tls:\n  cert_file: /nonexistent/c.pem\n  key_file: " + key + "\n", []string{"line 2: tls.cert_file: /nonexistent/c.pem no such file"}, "tls.cert_file"},
		{"cert file not PEM", "tls:\n  cert_file: " + notPEM + "\n  key_file: " + key + "\n", []string{"line 2: tls.cert_file: " + notPEM + " holds no PEM certificate"}, "tls.cert_file"},
		{"missing key", "tls:\n  cert_file: " + cert + "\n  key_file: /nonexistent/k.pem\n", []string{"line 3: tls.key_file: /nonexistent/k.pem no such file"}, "tls.key_file"},
		{"another certificate's key", "tls:\n  cert_file: " + cert + "\n  key_file: " + otherKey + "\n", []string{"line 3: tls.key_file: " + otherKey + " is not the key of the certificate in " + cert}, "tls.key_file:"},
		{"a certificate for a key", "tls:\n  cert_file: " + cert + "\n  key_file: " + cert + "\n", []string{"line 3: tls.key_file: " + cert + " is not the key of"}, "tls.key_file:"},
		{"client CA not PEM", "tls:\n  cert_file: " + cert + "\n  key_file: " + key + "\n  client_ca_file: " + notPEM + "\n", []string{"line 4: tls.client_ca_file: " + notPEM + " holds no PEM certificate"}, "tls.client_ca_file"},
		{"redis CA missing", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  tls: true\n  tls_ca_file: /nonexistent/ca.pem\n", []string{"line 5: store.tls_ca_file: /nonexistent/ca.pem no such file"}, "store.tls_ca_file"},
		{"redis client key missing", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  tls: true\n  tls_cert_file: " + cert + "\n  tls_key_file: /nonexistent/k.pem\n", []string{"line 6: store.tls_key_file: /nonexistent/k.pem no such file"}, "store.tls_key_file"},
		{"redis client cert without key", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  tls: true\n  tls_cert_file: " + cert + "\n", []string{"store.tls_key_file: is required with store.tls_cert_file"}, "store.tls_key_file"},
		{"tokens file a folder", "auth:\n  tokens_file: " + dir + "\n", []string{"line 2: auth.tokens_file: " + dir + " is a folder; name the tokens file in it"}, "auth.tokens_file"},
		{"tokens file missing", "auth:\n  tokens_file: /nonexistent/tokens\n", []string{"line 2: auth.tokens_file: /nonexistent/tokens: no such file"}, "auth.tokens_file"},
		{"tokens env unset", "auth:\n  tokens_env: FG_SURELY_UNSET\n", []string{"line 2: auth.tokens_env: the environment variable FG_SURELY_UNSET is not set"}, "auth.tokens_env"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml+rule), "f.yaml")
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", c.yaml)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), c.once); n != 1 {
				t.Errorf("%q said %d times in %q", c.once, n, err)
			}
		})
	}
}

// TestYAMLSyntaxErrors: the parser's complaints come with the line and
// the fix (the helper is yamlfield.Parse, which Envoy's rule files share),
// and quoted booleans are refused alike, whichever field.
func TestYAMLSyntaxErrors(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"tab", "store:\n\ttype: memory\n" + rule, "f.yaml: line 2: is not valid YAML: found character that cannot start any token; YAML indents with spaces, not tabs"},
		{"indentation", "store:\n  type: memory\n   x: 1\n" + rule, "f.yaml: line 3: is not valid YAML: mapping values are not allowed in this context; a key is indented more"},
		{"rule indented too little", "rules:\n  - name: a\n    algorithm: fixed_window\n   limit: 1\n", "f.yaml: line 4: is not valid YAML"},
		{"Latin-1", "# caf\xe9\n" + rule, "f.yaml: line 1: byte 6 of the line (offset 5 in the file, 0xE9) is not UTF-8; save the file as UTF-8"},
		{"no-break space", "store:\n\u00a0\u00a0type: memory\n" + rule, "f.yaml: line 2: has a no-break space (U+00A0) in its indentation"},
		{"quoted no", rule + "    shadow: \"no\"\n", `f.yaml: line 6: rules[0].shadow: "no" is a quoted string, not a boolean; write true or false without quotes`},
		{"quoted true", rule + "    shadow: \"true\"\n", `line 6: rules[0].shadow: "true" is a quoted string, not a boolean; write true or false without quotes`},
		{"plain yes", rule + "    shadow: yes\n", `line 6: rules[0].shadow: "yes" is not true or false; write true or false (yes, no, on and off are strings in YAML 1.2`},
		{"quoted local_cache", rule + "    local_cache: \"true\"\n", `line 6: rules[0].local_cache: "true" is a quoted string, not a boolean; write true or false without quotes`},
		{"local_cache word", rule + "    local_cache: nope\n", `line 6: rules[0].local_cache: "nope" is not true or false`},
		{"quoted tls", "store:\n  type: redis\n  addrs: [127.0.0.1:6379]\n  tls: \"on\"\n" + rule, `line 4: store.tls: "on" is a quoted string, not a boolean`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml), "f.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v\nwant one with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "*bool") {
				t.Errorf("error %v names a Go type", err)
			}
		})
	}
	for _, ok := range []string{rule + "    shadow: true\n    local_cache: false\n", rule + "    shadow: False\n"} {
		if _, err := Parse([]byte(ok), "f.yaml"); err != nil {
			t.Errorf("Parse refused\n%s: %v", ok, err)
		}
	}
}

package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestWarnExposed: a listener beyond loopback without tokens is warned
// about with fixes that work in the mode serve runs in; under --envoy-env,
// which has no setting for tokens, the peer's variables and --config.
func TestWarnExposed(t *testing.T) {
	cfgL, cfgFix := configListeners("0.0.0.0:8080", "10.0.0.5:8081")
	envL, envFix := envoyListeners("0.0.0.0:8080", "[::]:8081")
	udsL, udsFix := envoyListeners("127.0.0.1:8080", "/var/run/rls.sock")
	tests := []struct {
		name      string
		auth      bool
		listeners []exposable
		fix       string
		want      []string // each warning line, in order
		wantNot   []string
	}{
		{"config file", false, cfgL, cfgFix, []string{
			"WARNING: listen 0.0.0.0:8080 is reachable beyond this machine and needs no token: anyone who reaches it can decide, reset and list limits. " +
				"To keep it on this machine set listen to a loopback address (127.0.0.1:PORT); to require tokens set auth.tokens_file (docs/SECURITY.md).",
			"WARNING: grpc_listen 10.0.0.5:8081 is reachable beyond this machine and needs no token: anyone who reaches it can decide, reset and list limits. " +
				"To keep it on this machine set grpc_listen to a loopback address (127.0.0.1:PORT); to require tokens set auth.tokens_file (docs/SECURITY.md).",
		}, nil},
		{"envoy-env", false, envL, envFix, []string{
			"WARNING: HOST/PORT 0.0.0.0:8080 is reachable beyond this machine and needs no token: anyone who reaches it can decide, reset and list limits. " +
				"To keep it on this machine set HOST=127.0.0.1; to require tokens run floodgate serve --config FILE with auth.tokens_file instead of --envoy-env, " +
				"which has no setting for tokens (and give Envoy the decide token in its gRPC service's initial_metadata) (docs/SECURITY.md).",
			"WARNING: GRPC_HOST/GRPC_PORT [::]:8081 is reachable beyond this machine and needs no token: anyone who reaches it can decide, reset and list limits. " +
				"To keep it on this machine set GRPC_HOST=127.0.0.1, or GRPC_UDS to a unix socket's path for an Envoy on this machine; to require tokens run " +
				"floodgate serve --config FILE with auth.tokens_file instead of --envoy-env, which has no setting for tokens (and give Envoy the decide token " +
				"in its gRPC service's initial_metadata) (docs/SECURITY.md).",
		}, []string{"Set auth.tokens_file", "listen "}},
		{"envoy-env on loopback and a unix socket", false, udsL, udsFix, nil, nil},
		{"tokens on", true, cfgL, cfgFix, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			warnExposed(&stderr, slog.New(slog.DiscardHandler), tt.auth, tt.listeners, tt.fix)
			var got []string
			if s := strings.TrimSuffix(stderr.String(), "\n"); s != "" {
				got = strings.Split(s, "\n")
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines, want %d:\n%s", len(got), len(tt.want), stderr.String())
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], tt.want[i])
				}
			}
			for _, s := range tt.wantNot {
				if strings.Contains(stderr.String(), s) {
					t.Errorf("the warning says %q:\n%s", s, stderr.String())
				}
			}
		})
	}
}

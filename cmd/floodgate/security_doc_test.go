package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/authtoken"
	"github.com/floodgate-rl/floodgate/internal/filebound"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/storekey"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

// TestSecurityBoundsDocumented: docs/SECURITY.md's table of bounds says
// what the code does: each row holds the figures of the constants behind
// it, so changing one without the table fails here.
func TestSecurityBoundsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // first cell -> the whole row
	for line := range strings.Lines(string(data)) {
		if cells := strings.Split(line, " | "); strings.HasPrefix(line, "| ") && len(cells) >= 4 {
			rows[strings.TrimPrefix(cells[0], "| ")] = line
		}
	}
	kb := func(n int) string { return fmt.Sprintf("%d KB", n>>10) }
	mb := func(n int64) string { return fmt.Sprintf("%d MB", n>>20) }
	dur := func(d time.Duration) string {
		if d < time.Second {
			return fmt.Sprintf("%d ms", d.Milliseconds())
		}
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	thousands := func(n int) string { // 1000000 -> 1,000,000
		s := fmt.Sprint(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	cases := []struct {
		row  string
		want []string
	}{
		{"request headers", []string{kb(maxHeaderBytes) + ", within " + dur(readHeaderTimeout)}},
		{"TLS handshake", []string{dur(readHeaderTimeout)}},
		{"whole request / response", []string{dur(readTimeout) + " each", dur(writeTimeout)}},
		{"request body", []string{kb(server.MaxBodyBytes)}},
		{"idle keep-alive", []string{dur(idleTimeout)}},
		{"connections per listener", []string{"`max_connections`", thousands(config.DefaultMaxConnections), "after " + dur(readHeaderTimeout), "after " + dur(idleTimeout)}},
		{"API requests waiting on the store", []string{"`max_in_flight`", fmt.Sprint(server.DefaultMaxInFlight)}},
		{"gRPC calls in progress", []string{"`max_in_flight`", fmt.Sprint(server.DefaultMaxInFlight)}},
		{"gRPC messages and streams", []string{kb(grpcMaxMessage) + " a message", kb(maxHeaderBytes) + " of headers", fmt.Sprint(grpcMaxStreams) + " concurrent streams"}},
		{"gRPC keepalive", []string{"after " + dur(grpcPingAfter), "within " + dur(grpcPingTimeout), "every " + dur(grpcMinPing)}},
		{"store calls", []string{"`store.timeout`", dur(redisstore.DefaultTimeout)}},
		{"store calls in flight per Redis node", []string{"`store.max_in_flight`", fmt.Sprint(redisstore.DefaultMaxInFlight)}},
		{"a failing Redis node", []string{"`store.breaker_failures`", fmt.Sprintf("%d failures", redisstore.DefaultBreakerFailures)}},
		{"files read", []string{"config " + mb(filebound.MaxConfig), "tokens " + mb(filebound.MaxTokens), "CA " + mb(filebound.MaxPEM), "rule file " + mb(filebound.MaxRules)}},
		{"token strength", []string{fmt.Sprintf("%d bits", authtoken.MinTokenBits), fmt.Sprintf("%d characters", authtoken.MinTokenLen)}},
		{"per-connection errors", []string{"one log line per " + dur(connErrorLogInterval)}},
		{"5xx answers", []string{fmt.Sprintf("%d base32 characters (%d bits)", len(problem.NewRequestID()), 5*len(problem.NewRequestID()))}},
		{"key length", []string{fmt.Sprintf("%d bytes", storekey.MaxLen)}},
		{"memory store keys", []string{"`store.max_keys`", thousands(config.DefaultMaxKeys)}},
		{"idle memory", []string{map[time.Duration]string{time.Minute: "every minute"}[sweepEvery]}},
		{"start-up", []string{"get " + dur(shutdownGrace)}},
	}
	for _, c := range cases {
		row, ok := rows[c.row]
		if !ok {
			t.Errorf("docs/SECURITY.md has no row %q", c.row)
			continue
		}
		for _, w := range c.want {
			if w == "" || !strings.Contains(row, w) {
				t.Errorf("docs/SECURITY.md's row %q lacks %q, what the code does:\n%s", c.row, w, row)
			}
		}
	}
}

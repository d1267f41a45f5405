package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeEnvoyEnvForceStart: with FORCE_START_WITHOUT_INITIAL_CONFIG and
// a rule folder that does not load, floodgate starts, and, as the peer
// (src/service/ratelimit.go), fails every call over gRPC with code Unknown
// "no rate limit configuration loaded" (so Envoy's failure_mode_deny
// denies), a malformed request still with its own error; once the folder
// is fixed and loads, it decides normally.
func TestServeEnvoyEnvForceStart(t *testing.T) {
	srv := redistest.Spawn(t)
	root := t.TempDir()
	rules := writeFile(t, root, "ratelimit/config/rules.yaml", "domain: force\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: lots}\n")
	for k, v := range map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "USE_STATSD": "false", "LOG_LEVEL": "info",
	} {
		t.Setenv(k, v)
	}
	base, grpcAddr, logs, stop := startServeRLS(t, true, "--envoy-env")
	defer func() { _ = stop() }()
	c, _ := rlsClient(t, grpcAddr)
	call := func(domain string, entries ...*ratelimitv3.RateLimitDescriptor_Entry) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := &rlsv3.RateLimitRequest{Domain: domain}
		if len(entries) > 0 {
			req.Descriptors = []*ratelimitv3.RateLimitDescriptor{{Entries: entries}}
		}
		return c.ShouldRateLimit(ctx, req)
	}
	entry := &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"}
	tests := []struct {
		name     string
		domain   string
		entries  []*ratelimitv3.RateLimitDescriptor_Entry
		wantCode codes.Code
		wantMsg  string
	}{
		{"a domain of the broken file", "force", []*ratelimitv3.RateLimitDescriptor_Entry{entry}, codes.Unknown, "no rate limit configuration loaded"},
		{"another domain", "other", []*ratelimitv3.RateLimitDescriptor_Entry{entry}, codes.Unknown, "no rate limit configuration loaded"},
		{"no descriptors: the request's own error first, as the peer", "force", nil, codes.InvalidArgument, "descriptor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 3 { // every call, not only the first
				r, err := call(tt.domain, tt.entries...)
				if st := status.Convert(err); err == nil || st.Code() != tt.wantCode || !strings.Contains(st.Message(), tt.wantMsg) {
					t.Fatalf("answer %v, error %v: want code %v with %q", r, err, tt.wantCode, tt.wantMsg)
				}
			}
		})
	}
	// POST /json, the same service: the error as application/problem+json.
	res, err := http.Post(base+"/json", "application/json", strings.NewReader(`{"domain":"force","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusInternalServerError || res.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(body), "no rate limit configuration loaded") {
		t.Errorf("POST /json: %d %s %s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if !strings.Contains(logs.String(), "FORCE_START_WITHOUT_INITIAL_CONFIG") {
		t.Errorf("no warning about the rules that did not load:\n%s", logs)
	}

	// The folder fixed: the watch loads it, and calls are decided.
	if err := os.WriteFile(rules, []byte("domain: force\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := call("force", entry)
		if err == nil {
			if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
				t.Fatalf("first answer after the load %v", r)
			}
			break
		}
		if st := status.Convert(err); st.Code() != codes.Unknown && st.Code() != codes.Unavailable {
			t.Fatalf("error %v while the fixed folder loads", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %v after the fix; log:\n%s", err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := call("force", entry); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second answer %v, %v: want OVER_LIMIT (1 an hour)", r, err)
	}
	if r, err := call("other", entry); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unknown domain after the load: %v, %v: want OK", r, err)
	}
}

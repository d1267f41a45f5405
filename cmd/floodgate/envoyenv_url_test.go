package main

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeEnvoyEnvRedisURL runs `floodgate serve --envoy-env` with
// REDIS_URL=redis://user:password@host:port/db on a Redis of its own whose
// ACL user needs that password: the connections log in as that user on
// that database, and decide. Started again with a wrong password, the
// store is unavailable, and neither password is in the log.
func TestServeEnvoyEnvRedisURL(t *testing.T) {
	const secret, wrong = "Url-s3cret-9f2", "Wr0ng-s3cret-7c1"
	srv := redistest.Spawn(t)
	if err := srv.Do(t, "ACL", "SETUSER", "rl", "on", ">"+secret, "~*", "&*", "+@all").Error(); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeFile(t, root, "ratelimit/config/rules.yaml", "domain: url\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	serve := func(password string) (func(string) (*rlsv3.RateLimitResponse, error), func() string) {
		for k, v := range map[string]string{
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis://rl:" + password + "@" + srv.Addr + "/1", "REDIS_TIMEOUT": "2s",
			"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "USE_STATSD": "false", "LOG_LEVEL": "debug",
		} {
			t.Setenv(k, v)
		}
		_, grpcAddr, logs, stop := startServeRLS(t, true, "--envoy-env")
		c, _ := rlsClient(t, grpcAddr)
		call := func(value string) (*rlsv3.RateLimitResponse, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "url", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}},
			}})
		}
		return call, func() string {
			if err := stop(); err != nil {
				t.Error(err)
			}
			return logs.String()
		}
	}

	call, stop := serve(secret)
	deadline := time.Now().Add(15 * time.Second)
	var codes []rlsv3.RateLimitResponse_Code
	for len(codes) < 3 {
		r, err := call("a")
		if err != nil { // the store connects in the background
			if time.Now().After(deadline) {
				t.Fatalf("no answer: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		codes = append(codes, r.GetOverallCode())
	}
	if codes[0] != rlsv3.RateLimitResponse_OK || codes[1] != rlsv3.RateLimitResponse_OK || codes[2] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("codes %v, want OK, OK, OVER_LIMIT (2 an hour)", codes)
	}
	clients, err := srv.Do(t, "CLIENT", "LIST").ToString()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(clients, " db=1 ") || !strings.Contains(clients, " user=rl ") {
		t.Errorf("no connection as user rl on db 1:\n%s", clients)
	}
	if keys, _ := srv.Do(t, "INFO", "keyspace").ToString(); !strings.Contains(keys, "db1:keys=") {
		t.Errorf("no key in db 1: %s", keys)
	}
	if logs := stop(); strings.Contains(logs, secret) {
		t.Errorf("the log shows the password:\n%s", logs)
	}

	call, stop = serve(wrong)
	for range 3 {
		if r, err := call("b"); err == nil {
			t.Errorf("answer %v with a wrong password, want the store's outage (failure mode error)", r)
		}
	}
	logs := stop()
	if !strings.Contains(logs, "WRONGPASS") {
		t.Errorf("the log does not say the login failed:\n%s", logs)
	}
	if strings.Contains(logs, wrong) || strings.Contains(logs, secret) {
		t.Errorf("the log shows a password:\n%s", logs)
	}
}

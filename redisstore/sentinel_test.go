package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestSentinelAuth: sentinels with a password of their own, apart from
// Redis's (SentinelPassword; REDIS_SENTINEL_AUTH under serve --envoy-env),
// on a real primary and Sentinel spawned for the test.
func TestSentinelAuth(t *testing.T) {
	primary := redistest.Spawn(t, "--requirepass", "redis-pw")
	sentinel := redistest.SpawnSentinel(t, primary, "m", "requirepass sentinel-pw", "sentinel auth-pass m redis-pw")
	cfg := Config{
		Addrs: []string{sentinel.Addr}, Mode: ModeSentinel, SentinelMaster: "m",
		Password: "redis-pw", SentinelPassword: "sentinel-pw", Timeout: 2 * time.Second,
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("with the sentinels' password: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	limit := floodgate.PerMinute(1)
	for i, want := range []bool{true, false} {
		d, err := s.Allow(ctx, "sentinel-auth", limit)
		if err != nil || d.Allowed != want {
			t.Fatalf("request %d: %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	cfg.SentinelPassword = ""
	if s, err := New(cfg); err == nil {
		s.Close()
		t.Fatal("without the sentinels' password New succeeded")
	} else if !strings.Contains(strings.ToLower(err.Error()), "auth") {
		t.Errorf("without the sentinels' password: %v, want an error about authentication", err)
	}
}

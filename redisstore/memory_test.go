package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/storetest"
)

// memoryUsage returns MEMORY USAGE key SAMPLES 0 (every element counted)
// and the key's encoding.
func memoryUsage(t testing.TB, client rueidis.Client, key string) (int64, string) {
	t.Helper()
	n, err := doKey(t, client, "MEMORY USAGE", key, "SAMPLES", "0").AsInt64()
	if err != nil {
		t.Fatalf("MEMORY USAGE %s: %v", key, err)
	}
	enc, _ := doKey(t, client, "OBJECT ENCODING", key).ToString()
	return n, enc
}

// TestMemoryUsage logs MEMORY USAGE per key for every algorithm (the log at
// 10, 100 and 1,000 entries), and checks that log entries stay compact while
// the ZSET is a listpack: at most 24 bytes per entry. The figures go into
// docs/PERFORMANCE.md.
func TestMemoryUsage(t *testing.T) {
	client := newClient(t, redistest.StandaloneAddr(t))
	clock := clocktest.NewManual(storetest.Epoch.Add(time.Hour + 123456*time.Microsecond))
	s := testStore(t, client, clock)
	ctx := t.Context()

	usage := map[int]int64{}
	for _, entries := range []int{10, 100, 1000} {
		l := floodgate.NewLimit(floodgate.SlidingWindowLog, 1000, time.Hour)
		id := "log" + strconv.Itoa(entries)
		for range entries / 10 {
			if d, err := s.AllowN(ctx, id, l, 10); err != nil || !d.Allowed {
				t.Fatalf("AllowN = %+v, %v", d, err)
			}
			clock.Advance(time.Second + 1234*time.Microsecond)
		}
		n, enc := memoryUsage(t, client, s.Key(id, l.Algorithm))
		usage[entries] = n
		t.Logf("sliding_window_log, %4d entries: %6d bytes (%s, %.1f B/entry)", entries, n, enc, float64(n)/float64(entries))
	}
	perEntry := float64(usage[100]-usage[10]) / 90
	t.Logf("sliding_window_log: %.1f bytes per added entry from 10 to 100 entries (listpack)", perEntry)
	maxListpack, _ := do(t, client, "CONFIG", "GET", "zset-max-listpack-entries").AsStrMap()
	if lp, _ := strconv.Atoi(maxListpack["zset-max-listpack-entries"]); lp >= 100 && perEntry > 24 {
		t.Errorf("log entries take %.1f bytes each in a listpack, want at most 24", perEntry)
	}

	others := []floodgate.Limit{
		floodgate.NewTokenBucket(100, 3, time.Second),
		floodgate.NewLimit(floodgate.SlidingWindowCounter, 100, time.Minute),
		floodgate.NewLimit(floodgate.FixedWindow, 100, time.Minute),
	}
	for _, l := range others {
		if d, err := s.AllowN(ctx, "k", l, 7); err != nil || !d.Allowed {
			t.Fatalf("%s: AllowN = %+v, %v", l.Algorithm, d, err)
		}
		n, enc := memoryUsage(t, client, s.Key("k", l.Algorithm))
		t.Logf("%-22s: %6d bytes (%s)", l.Algorithm, n, enc)
	}
	for _, entries := range []int{10, 100, 1000} {
		_ = s.Reset(ctx, "log"+strconv.Itoa(entries), floodgate.PerHour(1))
	}
	for _, l := range others {
		_ = s.Reset(ctx, "k", l)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name       string
		args       []string
		wantErr    error    // nil: success
		wantStdout []string // substrings
		wantStderr []string
	}{
		{
			name:       "table",
			args:       []string{"--pattern", "boundary-burst", "--duration", "3m"},
			wantStdout: []string{"boundary-burst", "sliding_window_log", "fixed_window", "max/W", "100 requests per 1m0s"},
		},
		{
			name:       "some algorithms and a plot",
			args:       []string{"--pattern", "boundary-burst,poisson-3x", "--algorithm", "fixed_window, sliding_window_log", "--limit", "10", "--window", "10s", "--duration", "30s", "--plot", dir},
			wantStdout: []string{"poisson-3x", "fixed_window"},
			wantStderr: []string{"wrote " + filepath.Join(dir, "boundary-burst.png"), "worst-window.svg"},
		},
		{name: "unknown pattern", args: []string{"--pattern", "nope"}, wantErr: errUsage, wantStderr: []string{`unknown pattern "nope"`, "Usage: floodgate simulate"}},
		{name: "unknown algorithm", args: []string{"--algorithm", "leaky_bucket"}, wantErr: errUsage, wantStderr: []string{`"leaky_bucket"`}},
		{name: "bad format", args: []string{"--format", "xml"}, wantErr: errUsage, wantStderr: []string{`--format "xml"`}},
		{name: "bad store", args: []string{"--store", "etcd"}, wantErr: errUsage, wantStderr: []string{`--store "etcd"`}},
		{name: "short duration", args: []string{"--duration", "1m"}, wantErr: errUsage, wantStderr: []string{"at least two windows"}},
		{name: "zero limit", args: []string{"--limit", "0"}, wantErr: errUsage, wantStderr: []string{"--limit 0 must be at least 1"}},
		{name: "zero window", args: []string{"--window", "0s"}, wantErr: errUsage, wantStderr: []string{"--window 0s must be positive"}},
		{name: "huge log", args: []string{"--limit", "2000000", "--window", "1h", "--duration", "2h"}, wantErr: errUsage, wantStderr: []string{"Quota 2000000"}},
		{name: "stray argument", args: []string{"extra"}, wantErr: errUsage, wantStderr: []string{`unexpected argument "extra"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"simulate"}, tt.args...), &stdout, &stderr)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("run = %v, want %v; stderr:\n%s", err, tt.wantErr, stderr.String())
			}
			for _, s := range tt.wantStdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.wantStderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
		})
	}
	for _, f := range []string{"boundary-burst.png", "boundary-burst.svg", "boundary-burst-zoom.png", "worst-window.png", "worst-window.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("--plot: %s: %v", f, err)
		}
	}
}

// TestSimulateJSON parses the JSON output and checks the boundary-burst
// result the seed predicts, and that the same seed prints the same bytes.
func TestSimulateJSON(t *testing.T) {
	args := []string{"simulate", "--format", "json", "--limit", "50", "--window", "30s", "--duration", "2m", "--seed", "9"}
	var out1, out2, stderr bytes.Buffer
	if err := run(context.Background(), args, &out1, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if err := run(context.Background(), args, &out2, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if out1.String() != out2.String() {
		t.Error("two runs with --seed 9 printed different JSON")
	}
	var rep struct {
		Limit   int64  `json:"limit"`
		Seed    uint64 `json:"seed"`
		Results []struct {
			Pattern     string `json:"pattern"`
			Algorithm   string `json:"algorithm"`
			Admitted    int    `json:"admitted"`
			MaxInWindow int    `json:"max_in_window"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out1.Bytes(), &rep); err != nil {
		t.Fatalf("JSON output does not parse: %v\n%s", err, out1.String())
	}
	if rep.Limit != 50 || rep.Seed != 9 || len(rep.Results) != 6*4 {
		t.Fatalf("limit %d, seed %d, %d results; want 50, 9, 24", rep.Limit, rep.Seed, len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Pattern != "boundary-burst" {
			continue
		}
		switch r.Algorithm {
		case "fixed_window":
			if r.MaxInWindow != 100 {
				t.Errorf("fixed window: max in window %d, want 2N = 100", r.MaxInWindow)
			}
		case "sliding_window_log":
			if r.MaxInWindow != 50 {
				t.Errorf("log: max in window %d, want N = 50", r.MaxInWindow)
			}
		}
	}
}

// TestSimulateRedis runs the boundary attack through the Redis stores of
// scripts/redis-harness.sh (skipped when they do not answer).
func TestSimulateRedis(t *testing.T) {
	tests := []struct {
		store string
		flags func(testing.TB) []string
	}{
		{"redis", func(t testing.TB) []string { return []string{"--redis-addr", redistest.StandaloneAddr(t)} }},
		{"redis-cluster", func(t testing.TB) []string {
			return []string{"--redis-addrs", strings.Join(redistest.ClusterAddrs(t), ",")}
		}},
		{"redis-sentinel", func(t testing.TB) []string {
			sentinels, master := redistest.SentinelAddrs(t)
			return []string{"--sentinel-addrs", strings.Join(sentinels, ","), "--sentinel-master", master}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.store, func(t *testing.T) {
			args := append([]string{"simulate", "--store", tt.store, "--pattern", "boundary-burst", "--limit", "20", "--duration", "2m", "--format", "json"}, tt.flags(t)...)
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
			var rep struct {
				Store   string `json:"store"`
				Results []struct {
					Algorithm    string `json:"algorithm"`
					MaxInWindow  int    `json:"max_in_window"`
					MemoryPerKey int64  `json:"memory_per_key_bytes"`
				} `json:"results"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("JSON output does not parse: %v\n%s", err, stdout.String())
			}
			if rep.Store != tt.store || len(rep.Results) != 4 {
				t.Fatalf("store %q, %d results; want %q, 4", rep.Store, len(rep.Results), tt.store)
			}
			want := map[string]int{"sliding_window_log": 20, "fixed_window": 40}
			for _, r := range rep.Results {
				if w, ok := want[r.Algorithm]; ok && r.MaxInWindow != w {
					t.Errorf("%s: max in window %d, want %d", r.Algorithm, r.MaxInWindow, w)
				}
				if r.MemoryPerKey <= 0 {
					t.Errorf("%s: memory per key %d, want MEMORY USAGE > 0", r.Algorithm, r.MemoryPerKey)
				}
			}
		})
	}
}

func TestSimulateRedisUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"simulate", "--store", "redis", "--redis-addr", addr}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("run against a closed port = %v, want an error naming %s", err, addr)
	}
}

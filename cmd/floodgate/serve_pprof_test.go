package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestPprofListen checks --pprof-listen serves the profiles' index on a
// loopback address and refuses any other.
func TestPprofListen(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:6060", "example.com:6060"} {
		if _, _, err := startPprof(addr, logger); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("startPprof(%q) = %v, want an error asking for a loopback address", addr, err)
		}
	}
	addr, stop, err := startPprof("127.0.0.1:0", logger)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("GET /debug/pprof/ = %s, %.200q; want the profiles' index", resp.Status, body)
	}
}

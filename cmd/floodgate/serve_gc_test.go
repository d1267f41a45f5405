package main

import (
	"context"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		live, floor uint64
		want        int
	}{
		{0, 32 * mib, 100},            // no sample yet
		{16 * mib, 32 * mib, 100},     // half the floor: GOGC 100 reaches it
		{100 * mib, 32 * mib, 100},    // above the floor: GOGC 100
		{8 * mib, 32 * mib, 300},      // 8 × 4 = 32
		{10 * mib, 32 * mib, 250},     // 220 rounded up: 10 × 3.5 = 35
		{15 * mib, 32 * mib, 150},     // 113 rounded up
		{1 * mib, 32 * mib, 2000},     // 3100, capped
		{32 * mib / 3, 32 * mib, 250}, // a hair over 200
		{32 * mib / 4, 32 * mib, 300}, // exactly 300
	}
	for _, tt := range tests {
		got := gcPercentFor(tt.live, tt.floor)
		if got != tt.want {
			t.Errorf("gcPercentFor(%d MiB, %d MiB) = %d, want %d", tt.live/mib, tt.floor/mib, got, tt.want)
		}
		if goal := tt.live * uint64(100+got) / 100; tt.live > 0 && got < maxGCPercent && goal < tt.floor {
			t.Errorf("gcPercentFor(%d, %d) = %d: heap goal %d below the floor", tt.live, tt.floor, got, goal)
		}
	}
}

// TestKeepHeapFloorHonoursGOGC checks that a GOGC in the environment is left
// alone: keepHeapFloor returns at once, before touching the collector.
func TestKeepHeapFloorHonoursGOGC(t *testing.T) {
	done := make(chan struct{})
	go func() {
		keepHeapFloor(context.Background(), func(k string) string {
			if k == "GOGC" {
				return "50"
			}
			return ""
		}, heapFloor, time.Hour)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("keepHeapFloor kept running with GOGC set")
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestCPUCap runs a busy process in a capped cgroup and checks that the
// kernel throttled it, then that lifting the cap stops the throttling.
func TestCPUCap(t *testing.T) {
	c, err := newCPUCap(fmt.Sprintf("rlsbench-test-%d", os.Getpid()))
	if err != nil {
		t.Skipf("no cgroup to cap a process with here: %v", err)
	}
	defer c.remove()
	if err := c.set(0.2); err != nil {
		t.Fatal(err)
	}
	name, args := c.wrap("sh", []string{"-c", "while :; do :; done"})
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for _, thr := c.periods(); thr == 0; _, thr = c.periods() {
		if time.Now().After(deadline) {
			t.Fatal("a busy process capped at 0.2 cores was never throttled")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.set(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a period in flight may still throttle
	_, before := c.periods()
	time.Sleep(300 * time.Millisecond)
	if _, after := c.periods(); after != before {
		t.Fatalf("throttled in %d more periods after the cap was lifted", after-before)
	}
}

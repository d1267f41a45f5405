package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuCap is a cgroup whose processes share a CPU quota: as a pod's CPU
// limit, it makes the server the bottleneck of a load whose client and
// Redis run on the same machine.
type cpuCap struct {
	dir string
	v2  bool
}

// cpuPeriod is the quota's period in microseconds: short, so that a capped
// server is paused for at most a few milliseconds at a time.
const cpuPeriod = 10000

// newCPUCap makes a cgroup named name, under cgroup v2 or v1's cpu
// controller (whichever the machine mounts), with no quota yet (set).
func newCPUCap(name string) (*cpuCap, error) {
	c := &cpuCap{}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		c.v2, c.dir = true, filepath.Join("/sys/fs/cgroup", name)
	} else if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		c.dir = filepath.Join("/sys/fs/cgroup/cpu", name)
	} else {
		return nil, errors.New("-server-cpus: no cgroup CPU controller mounted at /sys/fs/cgroup")
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("-server-cpus needs root (a cgroup of its own): %w", err)
	}
	if !c.v2 {
		if err := os.WriteFile(filepath.Join(c.dir, "cpu.cfs_period_us"), fmt.Appendf(nil, "%d", cpuPeriod), 0o644); err != nil {
			c.remove()
			return nil, fmt.Errorf("-server-cpus: %w", err)
		}
	}
	return c, nil
}

// set gives the cgroup a quota of cores CPUs; 0 lifts the quota. The cap
// changes at once; Go's GOMAXPROCS, which follows a cgroup's quota since
// Go 1.25, never goes below 2 for it, so on a 2-core machine both servers
// keep 2 whatever the cap.
func (c *cpuCap) set(cores float64) error {
	quota := int(cores * cpuPeriod)
	var err error
	switch {
	case c.v2 && cores == 0:
		err = os.WriteFile(filepath.Join(c.dir, "cpu.max"), fmt.Appendf(nil, "max %d", cpuPeriod), 0o644)
	case c.v2:
		err = os.WriteFile(filepath.Join(c.dir, "cpu.max"), fmt.Appendf(nil, "%d %d", quota, cpuPeriod), 0o644)
	case cores == 0:
		err = os.WriteFile(filepath.Join(c.dir, "cpu.cfs_quota_us"), []byte("-1"), 0o644)
	default:
		err = os.WriteFile(filepath.Join(c.dir, "cpu.cfs_quota_us"), fmt.Appendf(nil, "%d", quota), 0o644)
	}
	if err != nil {
		return fmt.Errorf("-server-cpus: setting the quota of %s: %w", c.dir, err)
	}
	return nil
}

// wrap returns the command line that runs bin with args inside the cgroup
// (a shell that joins it, then becomes bin, keeping its process id).
func (c *cpuCap) wrap(bin string, args []string) (string, []string) {
	return "sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(c.dir, "cgroup.procs"), bin}, args...)
}

// periods returns how many of the quota's periods have passed with the
// cgroup's processes runnable, and in how many of them they were throttled
// (cpu.stat's nr_periods and nr_throttled, the same in v1 and v2).
func (c *cpuCap) periods() (periods, throttled int64) {
	b, _ := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		}
	}
	return periods, throttled
}

// remove deletes the cgroup, once its processes have ended.
func (c *cpuCap) remove() { _ = os.Remove(c.dir) }

//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used,
// every thread counted, or -1 when it cannot be read.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

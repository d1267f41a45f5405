//go:build !linux

package bench

import "time"

// machineCPU is not measured here: -1s.
func machineCPU() (idle, steal time.Duration) { return -1, -1 }

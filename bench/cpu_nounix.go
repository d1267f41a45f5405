//go:build !unix

package bench

import "time"

// processCPU is not measured here: -1.
func processCPU() time.Duration { return -1 }

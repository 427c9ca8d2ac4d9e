//go:build !unix

package dedup

import "time"

// processCPU is not measured outside Unix: cpuMeter reports nothing there.
func processCPU() time.Duration { return 0 }

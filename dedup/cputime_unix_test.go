//go:build unix

package dedup

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used, all threads (the
// garbage collector's too), user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build unix

package payload

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used: the
// benchmarks report it per operation beside ns/op, which on a busy
// machine also counts the time spent waiting for a CPU.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

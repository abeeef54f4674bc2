//go:build !unix

package sqsconsumer

import "time"

// processCPU is not measured on this platform (0: benchmarks leave the
// figure out).
func processCPU() time.Duration { return 0 }

//go:build !unix

package payload

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }

package sqsconsumer

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoffDelay is the n-th delay (0-based) of an exponential backoff: base
// doubled n times, never above limit. A negative n gives base. Pure; every
// retry schedule in the package is built on it.
func backoffDelay(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 0; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// between returns a uniformly random duration in [lo, hi] (lo if hi < lo).
// Jitter spreads the retries of many callers that failed together.
func between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}

// sleepCtx waits d or until ctx ends, reporting whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

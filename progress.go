package sqsconsumer

import (
	"sync/atomic"
	"time"
)

// Run's stages, for Health.
const (
	runNotStarted int32 = iota
	runStarting
	runRunning
	runDraining
	runStopped
)

// progress is what a Consumer last completed, for Health: unix
// nanoseconds, 0 for never.
type progress struct {
	stage    atomic.Int32
	begun    atomic.Int64 // Run was called
	answered atomic.Int64 // SQS first answered a call (the queue's attributes included)
	// firstPoll is when Run's first receive went out, if SQS had
	// answered nothing before (0: none yet), -1 once it failed: a first
	// long poll within its wait is progress, though nothing answered yet
	// (Health's startup limit).
	firstPoll atomic.Int64
	receive   atomic.Int64
	renewal   atomic.Int64
	delete    atomic.Int64
	// resumed restarts the stall clock: Run began running, the breaker
	// closed, Pause or Resume was called, or (ahead of time) a
	// Throttled's pause ends. Written only by resumeAt, which keeps the
	// latest of these instants.
	resumed atomic.Int64
	recvErr atomic.Pointer[string]
}

// answer records that SQS answered a call.
func (p *progress) answer() {
	if p.answered.Load() == 0 {
		p.answered.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// resumeAt restarts Health's stall clock at t (now, or the end of a
// Throttled's pause, ahead of time), unless it already restarts later:
// a Pause, a Resume or the breaker's closing within a Throttled's pause
// leaves its end, when receiving resumes, in place. Safe for concurrent
// use.
func (p *progress) resumeAt(t time.Time) {
	n := t.UnixNano()
	for {
		cur := p.resumed.Load()
		if cur >= n || p.resumed.CompareAndSwap(cur, n) {
			return
		}
	}
}

// resume restarts Health's stall clock now (see resumeAt).
func (p *progress) resume() { p.resumeAt(time.Now()) }

func stamp(a *atomic.Int64) { a.Store(time.Now().UnixNano()) }

func timeOf(a *atomic.Int64) time.Time {
	if n := a.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Package broken holds test-only switches that make the library misbehave
// on purpose, one known bug at a time, so that a test suite (the explorer,
// package explore) can show that its checks catch each one: a negative
// control. Nothing outside the module's tests sets a switch; with none set
// every check is one atomic load.
//
// The switches are process-wide: a test that sets one must not run in
// parallel with tests that expect a working library.
package broken

import "sync/atomic"

// Mode names one deliberate bug. Each constant's doc says what it breaks;
// the code that honours it names the constant.
type Mode uint8

// The deliberate bugs. Add one beside the code path it breaks, with a
// check in the explorer that must catch it.
const (
	none Mode = iota
	// modes are added below, one line each

	// FIFOBatchShutdownHang (issue 35 case 2): a Batch handler's batch
	// (without middleware) that fails on a FIFO queue leaves the later
	// members of its group, failed without running, unsettled: they hold
	// their slots and leases for good, and at a shutdown Run never
	// returns (batchrun.go, batcher.run).
	FIFOBatchShutdownHang

	// BatchShutdownBackoff (issue 35 case 1b): when the shutdown cancels a
	// running Batch handler's call through one member, the members it has
	// not cancelled yet settle as ordinary failures (released after their
	// backoff, counted by the breaker) instead of as messages the shutdown
	// cut (released at once) (batchrun.go, batcher.run).
	BatchShutdownBackoff

	// ShutdownStrandsReceive (issue 35 case 1, its Consumer-side race):
	// the pollers are told to quit before the lanes close, so the release
	// of a message that a receive in flight brings after the shutdown
	// ended may wait for a parked poller that is leaving; it then waits
	// for its lease's end, the message stays hidden, and Run returns a
	// lease later (run.go, run.run). The race needs a parked poller
	// descheduled at its quit while the release is submitted; the mode
	// holds every parked poller there for 100 ms as well (receive.go,
	// poll), so that a shutdown during a receive that brings messages
	// shows it in virtual time.
	ShutdownStrandsReceive

	// UnguardedBodies (issue 35 case 1, its cause): the per-call guard of
	// the request bodies (clienthttp.go, guardBodies) does nothing, so the
	// SDK's own HTTP client can lose a receive's answer and retry (the
	// messages stay hidden for the receive's visibility, never seen). Only
	// a real socket shows it: the chaos suite's stranding scenario sets it
	// in its worker process (-broken unguarded-bodies).
	UnguardedBodies

	modes
)

var on atomic.Uint64 // bit m set: Mode m is on

// Is reports whether m is switched on.
func Is(m Mode) bool { return on.Load()&(1<<m) != 0 }

// Set switches m on and returns the function that switches it off again.
func Set(m Mode) (restore func()) {
	if m == none || m >= modes || m >= 64 {
		panic("broken: unknown mode")
	}
	bit := uint64(1) << m
	for {
		old := on.Load()
		if on.CompareAndSwap(old, old|bit) {
			break
		}
	}
	return func() {
		for {
			old := on.Load()
			if on.CompareAndSwap(old, old&^bit) {
				return
			}
		}
	}
}

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
	// DeleteFailed deletes a message whose handler failed (settle.go).
	DeleteFailed
	// FIFOHandBackSkipped lets the next message of a FIFO group start
	// after an earlier one was not done, instead of handing the rest of
	// the group back (registry.go, leave).
	FIFOHandBackSkipped
	// ReleaseReportedEarly reports EventReleased before the release's
	// call is made (lease.go, Release).
	ReleaseReportedEarly
	// RenewalWithoutCall reports a renewal without making its call
	// (heartbeat.go, renew).
	RenewalWithoutCall
	// AdoptionSkipped runs a redelivery of a message still handled here
	// as a delivery of its own, beside the first (receive.go, deliver).
	AdoptionSkipped
	// HealthIgnoresReceives judges the stall limit without the receives'
	// answers, so an idle Consumer turns unhealthy (health.go).
	HealthIgnoresReceives
	// BreakerCountsNeutral counts every handler error as a failure of
	// the downstream (breaker.go, outcomeOf).
	BreakerCountsNeutral
	// ShutdownKeepsUnstarted ends the shutdown's unstarted deliveries
	// without releasing their messages (run.go, shutdown).
	ShutdownKeepsUnstarted
	// RunSkipsHandlers lets the shutdown stop waiting for handlers that
	// outlive their cancelled context (run.go, shutdown and run).
	RunSkipsHandlers
	// GroupLimitIgnored drops WithGroupLimit's cap (run.go, makeFlow).
	GroupLimitIgnored
	// StatsSkipUnstarted leaves the deliveries that never started out of
	// Stats.ReleasedUnstarted (settle.go, finish).
	StatsSkipUnstarted
	// ResumeKeepsFlowPaused lets Resume clear Paused() but leave the
	// flow paused, so nothing is received again (consumer.go, Resume).
	ResumeKeepsFlowPaused
	// TransientReceiveFatal ends Run on a receive error that can heal
	// (throttling, 5xx) as on a permanent one (receive.go, poll).
	TransientReceiveFatal

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

	// ThrottlePauseIgnored: a Throttled without WithAdaptiveConcurrency
	// (or at its floor) pauses nothing: receives and starts go on
	// (backpressure.go, throttled).
	ThrottlePauseIgnored
	// ThrottledCountsForBreaker: the breaker counts a Throttled as a
	// failure of the downstream (errors.go, outcomeOf).
	ThrottledCountsForBreaker
	// RetryAfterIgnored: a failure's release ignores the delay RetryAfter
	// or Throttled asked for and takes the backoff (settle.go, decide).
	RetryAfterIgnored
	// AdaptiveLimitIgnored: the flow fills every slot of WithConcurrency
	// whatever WithAdaptiveConcurrency's limit (backpressure.go, slots).
	AdaptiveLimitIgnored
	// ByteBoundIgnored: receives are sized without WithMaxBytes's bound
	// (bytebound.go, capLocked).
	ByteBoundIgnored
	// CallLimitIgnored: the pollers take calls up to their number,
	// whatever the limit on calls in flight that follows the HTTP
	// client's pool (flow.go, limitLocked).
	CallLimitIgnored
	// PauseKeepsReceiving: a paused Consumer goes on receiving (flow.go,
	// nextLocked).
	PauseKeepsReceiving
	// FirstContactRetried: a first contact that cannot succeed (no such
	// host, access denied, ...) is retried as one that can heal
	// (firstcontact.go, cannotSucceed).
	FirstContactRetried
	// BundleReversed: Options applies its options last to first, so the
	// earlier value wins inside a bundle (bundle.go, apply).
	BundleReversed
	// WindDownReleased releases a redelivery of a message whose lease
	// is gone while its handler has not returned (visibility: the
	// backoff), instead of making it wait behind that delivery in its
	// FIFO group: the group's later messages may then run first
	// (receive.go, deliver).
	WindDownReleased

	modes
)

var names = [...]string{
	DeleteFailed:           "delete-failed",
	FIFOHandBackSkipped:    "fifo-hand-back-skipped",
	ReleaseReportedEarly:   "release-reported-early",
	RenewalWithoutCall:     "renewal-without-call",
	AdoptionSkipped:        "adoption-skipped",
	HealthIgnoresReceives:  "health-ignores-receives",
	BreakerCountsNeutral:   "breaker-counts-neutral",
	ShutdownKeepsUnstarted: "shutdown-keeps-unstarted",
	RunSkipsHandlers:       "run-skips-handlers",
	GroupLimitIgnored:      "group-limit-ignored",
	StatsSkipUnstarted:     "stats-skip-unstarted",
	ResumeKeepsFlowPaused:  "resume-keeps-flow-paused",
	TransientReceiveFatal:  "transient-receive-fatal",
	FIFOBatchShutdownHang:  "fifo-batch-shutdown-hang",
	BatchShutdownBackoff:   "batch-shutdown-backoff",
	ShutdownStrandsReceive: "shutdown-strands-receive",
	UnguardedBodies:        "unguarded-bodies",

	ThrottlePauseIgnored:      "throttle-pause-ignored",
	ThrottledCountsForBreaker: "throttled-counts-for-breaker",
	RetryAfterIgnored:         "retry-after-ignored",
	AdaptiveLimitIgnored:      "adaptive-limit-ignored",
	ByteBoundIgnored:          "byte-bound-ignored",
	CallLimitIgnored:          "call-limit-ignored",
	PauseKeepsReceiving:       "pause-keeps-receiving",
	FirstContactRetried:       "first-contact-retried",
	BundleReversed:            "bundle-reversed",
	WindDownReleased:          "wind-down-released",
}

// String is the mode's name, as a control's name.
func (m Mode) String() string {
	if int(m) < len(names) && names[m] != "" {
		return names[m]
	}
	return "none"
}

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

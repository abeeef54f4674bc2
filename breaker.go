package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// Breaker configures the circuit breaker WithBreaker turns on. A zero
// field takes its default; the zero Breaker is a usable configuration.
//
// The breaker protects the messages' receive counts from an outage: when
// handlers keep failing (a database down, a downstream API refusing), every
// further receive would spend a receive count on each message and drive
// the queue into its dead-letter queue through the redrive policy. Open,
// the Consumer stops receiving, hands back (visibility 0) the messages it
// holds but has not started, and keeps the leases of running handlers
// renewed; no receive count grows while it is open. After the pause it is
// half-open: it probes with one message at a time (or with Probe, when
// set, without any message), and the first success closes it. A failed
// probe opens it again for twice the pause, up to MaxPause.
//
// A failure is a handler error that is neither Permanent (the message's
// fault, not the outage's) nor a consequence of the lease ending (lost,
// expired, ceiling, shutdown). A handler timeout is a failure.
type Breaker struct {
	// Failures is how many handler failures in a row open the breaker.
	// Range 1 to 100,000; default 5.
	Failures int
	// Ratio, when above 0, also opens the breaker when at least this
	// share of the last Window handled messages failed (judged once
	// Window outcomes are in). Range 0 (off, the default) to 1.
	Ratio float64
	// Window is how many recent outcomes Ratio looks at. Range 2 to
	// 100,000; default 20. Only with Ratio.
	Window int
	// CallFailures is the renewal-health gate: how many
	// ChangeMessageVisibilityBatch or DeleteMessageBatch calls in a row
	// may fail as a whole (throttling, server errors, timeouts; not the
	// failures of single entries, such as a stale receipt handle) before
	// the breaker opens, so that no new message is taken while the
	// Consumer cannot keep or settle the ones it has. A successful call
	// resets the count. Range 1 to 100,000; default 3.
	CallFailures int
	// Pause is how long the breaker stays open before it probes. Range
	// 1 s to 12 h; default 30 s.
	Pause time.Duration
	// MaxPause caps the pause, which doubles after each failed probe and
	// after an opening that follows a closing by less than MaxPause.
	// Range Pause to 12 h; default 5 minutes (the longest a recovered
	// downstream waits for the next probe). A message whose handler fails
	// while the breaker is not closed (the failure that opens it
	// included) is released for twice MaxPause (or its backoff, if
	// longer), so that successive probes try different messages rather
	// than spend one message's receive counts.
	MaxPause time.Duration
	// Probe, when set, replaces the probe message: once the pause is over
	// the Consumer calls Probe (with a context cancelled after Pause, or
	// at shutdown) and closes the breaker when it returns nil, without
	// receiving anything while open. It is called from one goroutine at a
	// time, and never after Run's context is cancelled (a Probe still
	// running then has its context cancelled, and Run waits for it to
	// return). A panic in it is a failed probe. Default: nil, probe with
	// one message.
	Probe func(ctx context.Context) error
}

// Breaker defaults.
const (
	defaultBreakerFailures     = 5
	defaultBreakerWindow       = 20
	defaultBreakerCallFailures = 3
	defaultBreakerPause        = 30 * time.Second
	defaultBreakerMaxPause     = 5 * time.Minute
)

// breakerState is where a breaker stands.
type breakerState int

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func (s breakerState) String() string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// outcome kinds a breaker is told of.
const (
	outcomeNeutral = iota // says nothing about the downstream
	outcomeSuccess
	outcomeFailure
)

// breaker is the state machine behind Breaker. Its methods are safe for
// concurrent use. Of the Consumer's hooks it calls, onOpen and runProbe
// are called with its lock held (so that none starts after stop) and only
// start a goroutine; wake and onClose are called without it.
type breaker struct {
	cfg Breaker

	// Hooks, set before use. onOpen hands back what the Consumer holds
	// unstarted and runProbe runs cfg.Probe; both are called with mu
	// held (so none starts after stop) and must only start a goroutine.
	// wake, called without mu, tells the flow receiving may resume;
	// onClose, also without mu, is called instead of it at a closing.
	onOpen   func(reason string)
	runProbe func()
	wake     func()
	onClose  func()

	mu       sync.Mutex // guards the fields below
	state    breakerState
	streak   int    // handler failures in a row
	window   []bool // recent outcomes, true = failed, ring of cfg.Window when Ratio > 0
	next     int    // next slot of window
	filled   int    // outcomes in window
	failed   int    // failures in window
	calls    int    // whole-call failures in a row
	probeOK  bool   // half-open: a handler succeeded while calls still failed
	pause    time.Duration
	until    time.Time // open: when the pause ends
	closedAt time.Time
	timer    *time.Timer
	stopped  bool
	reason   string // why it last opened
	opens    int    // times it opened
}

func newBreaker(cfg Breaker) *breaker {
	b := &breaker{cfg: cfg, pause: cfg.Pause}
	if cfg.Ratio > 0 {
		b.window = make([]bool, cfg.Window)
	}
	return b
}

// limit is the flow's receive gate: the most messages the next receive
// may ask for given held (running + waiting + asked for), -1 for no
// limit. Half-open allows one message at a time, and none with a Probe.
func (b *breaker) limit(held int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerOpen:
		return 0
	case breakerHalfOpen:
		if b.cfg.Probe != nil || held > 0 {
			return 0
		}
		return 1
	}
	return -1
}

// refusing reports whether a newly received message must be handed back
// at once: the breaker is open.
func (b *breaker) refusing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == breakerOpen
}

// status returns the state, why it last opened and how often it opened.
func (b *breaker) status() (state breakerState, reason string, opens int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.reason, b.opens
}

// outcomeOf sorts a handler's result for the breaker, given why its lease
// ended (nil while it lives) and whether the shutdown cancelled it. A
// message failed without running because an earlier message of its FIFO
// group failed says nothing of the downstream.
func outcomeOf(err error, leaseErr error, shutdown bool) int {
	switch {
	case err == nil:
		return outcomeSuccess
	case broken.Is(broken.BreakerCountsNeutral):
		return outcomeFailure
	case IsPermanent(err), leaseErr != nil, shutdown, errors.Is(err, ErrShutdown), errors.Is(err, errEarlierFailed):
		return outcomeNeutral
	}
	return outcomeFailure
}

// record takes one handler outcome.
func (b *breaker) record(o int) {
	b.mu.Lock()
	if o == outcomeNeutral {
		b.mu.Unlock()
		return
	}
	failed := o == outcomeFailure
	if failed {
		b.streak++
	} else {
		b.streak = 0
	}
	if b.window != nil {
		if b.filled == len(b.window) {
			if b.window[b.next] {
				b.failed--
			}
		} else {
			b.filled++
		}
		b.window[b.next] = failed
		if failed {
			b.failed++
		}
		b.next = (b.next + 1) % len(b.window)
	}
	switch b.state {
	case breakerClosed:
		switch {
		case b.streak >= b.cfg.Failures:
			b.openLocked(fmt.Sprintf("%d handler failures in a row", b.streak), false)
		case b.window != nil && b.filled == len(b.window) && float64(b.failed) >= b.cfg.Ratio*float64(len(b.window)):
			b.openLocked(fmt.Sprintf("%d of the last %d handlers failed", b.failed, len(b.window)), false)
		default:
			b.mu.Unlock()
			return
		}
	case breakerHalfOpen:
		switch {
		case failed:
			b.openLocked("a probe failed", true)
		case b.calls >= b.cfg.CallFailures:
			b.probeOK = true // wait for a call to succeed as well
			b.mu.Unlock()
			return
		default:
			b.closeLocked()
			return
		}
	default: // open: a handler that was running finished
		b.mu.Unlock()
		return
	}
}

// recordCall takes the result of one ChangeMessageVisibilityBatch or
// DeleteMessageBatch call as a whole.
func (b *breaker) recordCall(err error) {
	b.mu.Lock()
	if err == nil {
		b.calls = 0
		if b.state == breakerHalfOpen && b.probeOK {
			b.closeLocked()
			return
		}
		b.mu.Unlock()
		return
	}
	if errors.Is(err, context.Canceled) {
		b.mu.Unlock() // abandoned by the Consumer itself
		return
	}
	b.calls++
	if b.calls >= b.cfg.CallFailures && b.state != breakerOpen {
		b.openLocked(fmt.Sprintf("%d renewal or delete calls in a row failed, the latest with: %v", b.calls, err), b.state == breakerHalfOpen)
		return
	}
	b.mu.Unlock()
}

// openLocked opens the breaker and unlocks b.mu. again: a probe failed.
func (b *breaker) openLocked(reason string, again bool) {
	now := time.Now()
	switch {
	case again:
		b.pause = min(2*b.pause, b.cfg.MaxPause)
	case !b.closedAt.IsZero() && now.Sub(b.closedAt) < b.cfg.MaxPause:
		b.pause = min(2*b.pause, b.cfg.MaxPause) // it closed only a moment ago
	default:
		b.pause = b.cfg.Pause
	}
	b.state, b.reason, b.probeOK = breakerOpen, reason, false
	b.opens++
	b.until = now.Add(b.pause)
	b.streak, b.filled, b.failed, b.next = 0, 0, 0, 0
	if b.stopped {
		b.mu.Unlock()
		return
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(b.pause, b.pauseOver)
	} else {
		b.timer.Reset(b.pause)
	}
	if b.onOpen != nil {
		b.onOpen(reason)
	}
	b.mu.Unlock()
}

// closeLocked closes the breaker and unlocks b.mu.
func (b *breaker) closeLocked() {
	b.state, b.probeOK, b.streak = breakerClosed, false, 0
	b.closedAt = time.Now()
	wake := b.wake
	if b.onClose != nil {
		wake = b.onClose
	}
	b.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// pauseOver turns an open breaker half-open when its pause ends.
func (b *breaker) pauseOver() {
	b.mu.Lock()
	if b.state != breakerOpen || b.stopped || time.Now().Before(b.until) {
		b.mu.Unlock()
		return
	}
	b.state = breakerHalfOpen
	if b.cfg.Probe != nil {
		if b.runProbe != nil {
			b.runProbe()
		}
		b.mu.Unlock()
		return
	}
	wake := b.wake
	b.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// probed takes the result of cfg.Probe.
func (b *breaker) probed(err error) {
	b.mu.Lock()
	if b.state != breakerHalfOpen {
		b.mu.Unlock()
		return
	}
	if err != nil {
		b.openLocked(fmt.Sprintf("the probe failed: %v", err), true)
		return
	}
	b.closeLocked()
}

// holdFor is the least visibility for a message whose handler failed
// now: twice MaxPause while the breaker is not closed (so that the next
// probes, at most MaxPause apart, find other messages), else 0.
func (b *breaker) holdFor() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerClosed {
		return 0
	}
	return min(2*b.cfg.MaxPause, MaxVisibilityTimeout)
}

// stop ends the pause timer: no more wakes or probes.
func (b *breaker) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
}

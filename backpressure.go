package sqsconsumer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// Back pressure: what the Consumer does when a handler says the downstream
// is refusing work (Throttled). Without WithAdaptiveConcurrency it pauses:
// nothing is received and none of the messages it holds starts until the
// delay the handler gave has passed. With it, an adaptive concurrency
// limit bounds the handler slots the Consumer fills, and so what it asks
// SQS for: it falls at once on Throttled and rises slowly on successes.
// The flow (flow.go) asks the back pressure how many slots it may fill
// (slotsLocked) and whether a pause holds (throttledLocked); the settle
// door (settle.go) tells it each handler's outcome.

// AdaptiveConcurrency configures the adaptive concurrency limit that
// WithAdaptiveConcurrency turns on. A zero field takes its default; the
// zero AdaptiveConcurrency is a usable configuration.
type AdaptiveConcurrency struct {
	// Floor is the least the limit falls to, in handler slots. Range 1 to
	// WithConcurrency less one; default 1.
	Floor int
	// Initial is the limit Run starts from. Range Floor to
	// WithConcurrency; default 10, or Floor or WithConcurrency when 10 is
	// outside them. From it the limit grows by one slot per success (it
	// doubles with each round of handlers) until the first Throttled.
	Initial int
}

// defaultAdaptiveInitial is AdaptiveConcurrency.Initial's default (as
// Netflix's concurrency-limits starts its AIMD limit).
const defaultAdaptiveInitial = 10

// The adaptive limit's steps (see WithAdaptiveConcurrency).
const (
	// limitCut is the share of the limit a Throttled takes off at once.
	limitCut = 1.0 / 20
	// minGain is the least the limit grows per success: a percent of it
	// per round of handlers.
	minGain = 1.0 / 100
	// gainFall divides the growth per success at each fall.
	gainFall = 2
	// calmRounds and minCalm: after this long without a fall the growth
	// per success doubles again (up to one slot a success).
	calmRounds = 10
	minCalm    = 10 * time.Second
)

// WithAdaptiveConcurrency turns on an adaptive concurrency limit driven by
// the downstream's back pressure: the Consumer fills at most limit handler
// slots, limit moving between a.Floor and WithConcurrency, and receives
// only for those: each receive asks for the free slots under the limit and
// the read-ahead they need, as if WithConcurrency were the limit at that
// moment. A receive cannot be undone (each counts toward the queue's
// maxReceiveCount, and a message handed back unhandled has spent one), so
// the limit bounds what is asked for, not only what starts. Default: off.
//
// It is an AIMD limit (additive increase, multiplicative decrease, as
// TCP's congestion window and Netflix's concurrency-limits' AIMDLimit),
// fed by each handler's outcome (see Throttled and Neutral for what counts
// as what):
//
//   - Throttled lowers it at once, before the next receive, by a
//     twentieth. Each further Throttled of a message that started before
//     that fall takes one more slot off (that many were in excess); the
//     next fall waits for a message started after it. At the floor, a
//     Throttled pauses the Consumer for its delay instead (nothing
//     received or started until then), as without this option, and the
//     limit starts again from the floor as from Initial: a slot a success
//     until the next Throttled.
//   - A success while every slot the limit allows is taken raises it: by
//     one slot per success from Initial until the first Throttled (the
//     limit doubles with every round of handlers), then by half that
//     after each fall, down to 1/100 slot per success (a percent per
//     round), so that the limit stays just under what the downstream
//     takes and probes above it about once in a hundred messages. After
//     10 s (or 10 rounds of handlers, if longer) without a fall, the
//     growth doubles again, so that a downstream that recovers is found.
//   - Failures, and neutral outcomes, leave it.
//
// Measured in virtual time against a downstream that admits R requests a
// second and answers 429 above it (bench/backpressure): see the README's
// "Back pressure" (under "Measured").
//
// How it combines: the limit counts handler slots, so with a Batch
// handler each message of a batch counts one, batches shrink to the limit
// (they go when their window runs out), and a refused batch call takes as
// many slots off as it had members; WithRateLimit's token bucket
// still bounds receives on its own; the breaker (WithBreaker) never counts
// Throttled, and its gate bounds receives on its own; on a FIFO queue a
// throttled message's group waits for it, as after any failure; in a
// fleet the Consumer claims only its limit from the shared budget, and the
// rest goes to the other queues; WithGroupLimit still caps a group within
// the limit. The scaling signal's capacity (WithScaling) stays
// WithConcurrency over the time a message holds a slot: a downstream's
// limit is no reason for more replicas, which would only share it.
// Pause, the breaker's opening and the shutdown hand back what waits, as
// without it. Stats.ConcurrencyLimit is the limit now. a.Floor must be below
// WithConcurrency and a.Initial within [a.Floor, WithConcurrency]: New
// refuses them otherwise, naming both options.
func WithAdaptiveConcurrency(a AdaptiveConcurrency) Option {
	return option(func(s *settings) {
		a := a // each application fills in its own copy: the Option may be shared
		if a.Floor == 0 {
			a.Floor = 1
		}
		ok := true
		if a.Floor < 1 || a.Floor > 100_000 {
			s.fail("WithAdaptiveConcurrency: Floor %d must be from 1 to 100000", a.Floor)
			ok = false
		}
		if a.Initial < 0 || a.Initial > 100_000 {
			s.fail("WithAdaptiveConcurrency: Initial %d must be 0 (the default) or from Floor to 100000", a.Initial)
			ok = false
		}
		if ok {
			s.adaptive, s.adaptiveFloor, s.adaptiveInitial = true, a.Floor, a.Initial
		}
	})
}

// adaptiveConflicts checks WithAdaptiveConcurrency against
// WithConcurrency, once every option is applied, and fills in Initial's
// default.
func (s *settings) adaptiveConflicts() []error {
	if !s.adaptive {
		return nil
	}
	floor, initial := s.adaptiveFloor, s.adaptiveInitial
	var errs []error
	if floor >= s.concurrency {
		errs = append(errs, fmt.Errorf("%w: WithAdaptiveConcurrency's Floor %d must be below WithConcurrency(%d): the limit moves between them", ErrInvalidOption, floor, s.concurrency))
	}
	switch {
	case initial == 0:
		s.adaptiveInitial = min(max(defaultAdaptiveInitial, floor), s.concurrency)
	case initial < floor:
		errs = append(errs, fmt.Errorf("%w: WithAdaptiveConcurrency's Initial %d is below its Floor %d", ErrInvalidOption, initial, floor))
	case initial > s.concurrency:
		errs = append(errs, fmt.Errorf("%w: WithAdaptiveConcurrency's Initial %d is above WithConcurrency(%d)", ErrInvalidOption, initial, s.concurrency))
	}
	return errs
}

// backPressure is a run's answer to Throttled: the pause it keeps, and,
// under WithAdaptiveConcurrency, the limit. Safe for concurrent use; its
// mu is a leaf. The flow asks it, under the flow's own lock, through
// atomics (slots, pausedUntil), which take no lock: the limit's whole
// slots and the pause's end, written under mu.
type backPressure struct {
	adaptive    bool // WithAdaptiveConcurrency
	floor, ceil int  // the limit's range (ceil: WithConcurrency)

	// Hooks, set before use, called without mu. wake: a pause ended or
	// the limit rose by a slot: start what waits, receive. paused: a pause
	// began or was pushed back, to until.
	wake   func()
	paused func(until time.Time, extended bool, d time.Duration)

	slotsNow atomic.Int32 // int(limit), for the flow
	untilNs  atomic.Int64 // until in Unix nanoseconds (0: none), for the flow

	mu      sync.Mutex // guards the fields below
	until   time.Time  // the pause: nothing received or started before it
	timer   *time.Timer
	stopped bool
	// The adaptive limit: limit (in slots, fractional) grows by gain per
	// success while every slot it allows is taken. A fall at cutAt set
	// it from cutFrom; a Throttled of a message started before cutAt takes
	// one more slot off. calmAt: when gain last changed.
	limit, gain     float64
	cutAt, calmAt   time.Time
	round           time.Duration // smoothed handler time of the successes
	throttles, cuts int64
}

func newBackPressure(s *settings) *backPressure {
	b := &backPressure{ceil: s.concurrency}
	if s.adaptive {
		b.adaptive, b.floor = true, s.adaptiveFloor
		b.limit, b.gain = float64(s.adaptiveInitial), 1
		b.calmAt = time.Now()
		b.slotsNow.Store(int32(s.adaptiveInitial))
	}
	return b
}

// slots is how many handler slots may be filled: conc, or the limit.
func (b *backPressure) slots(conc int) int {
	if !b.adaptive || broken.Is(broken.AdaptiveLimitIgnored) {
		return conc
	}
	return min(conc, int(b.slotsNow.Load()))
}

// pausedUntil is when the pause ends (zero or past: none).
func (b *backPressure) pausedUntil() time.Time {
	if ns := b.untilNs.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// setLimitLocked makes l the limit, within [floor, ceil].
func (b *backPressure) setLimitLocked(l float64) {
	b.limit = min(max(l, float64(b.floor)), float64(b.ceil))
	b.slotsNow.Store(int32(b.limit))
}

// outcome takes the outcome of a handler that started at started, with
// running handlers (its own included) at its end, and after, the delay
// its message was released for.
func (b *backPressure) outcome(kind outcomeKind, started time.Time, running int, after time.Duration) {
	switch kind {
	case outcomeSuccess:
		if b.adaptive && b.grow(started, running) {
			b.wake()
		}
	case outcomeThrottled:
		b.throttled(started, after)
	}
}

// grow takes a success; it reports whether the limit rose by a slot.
func (b *backPressure) grow(started time.Time, running int) bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if held := now.Sub(started); b.round == 0 {
		b.round = held
	} else {
		b.round += (held - b.round) / 16
	}
	if b.gain < 1 && now.Sub(b.calmAt) >= max(minCalm, calmRounds*b.round) {
		b.gain, b.calmAt = min(1, 2*b.gain), now
	}
	before := int(b.limit)
	if running < before || before >= b.ceil {
		return false // the limit is not what holds the Consumer back
	}
	b.setLimitLocked(b.limit + b.gain)
	return int(b.limit) > before
}

// throttled takes a Throttled outcome: the limit falls, or, without the
// adaptive limit or with its slots at the floor, the Consumer pauses for
// after (and the limit, at its floor, starts slowly again when it ends:
// a slot a success, as at the start, until the next Throttled).
func (b *backPressure) throttled(started time.Time, after time.Duration) {
	now := time.Now()
	b.mu.Lock()
	b.throttles++
	if b.adaptive && int(b.limit) > b.floor {
		if started.Before(b.cutAt) {
			b.setLimitLocked(b.limit - 1) // one more of the same excess
		} else {
			b.setLimitLocked(b.limit * (1 - limitCut))
			b.gain = max(minGain, b.gain/gainFall)
			b.cutAt, b.calmAt = now, now
			b.cuts++
		}
		b.mu.Unlock()
		return
	}
	if b.adaptive {
		b.setLimitLocked(float64(b.floor))
		b.gain, b.calmAt = 1, now
	}
	if broken.Is(broken.ThrottlePauseIgnored) {
		b.mu.Unlock()
		return
	}
	until := now.Add(after)
	if after <= 0 || b.stopped || !until.After(b.until) {
		b.mu.Unlock()
		return
	}
	extended := now.Before(b.until)
	b.until = until
	b.untilNs.Store(until.UnixNano())
	if b.timer == nil {
		b.timer = time.AfterFunc(after, b.pauseOver)
	} else {
		b.timer.Reset(after)
	}
	b.mu.Unlock()
	b.paused(until, extended, after)
}

// pauseOver ends the pause when its time has come.
func (b *backPressure) pauseOver() {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	if wait := time.Until(b.until); wait > 0 {
		b.timer.Reset(wait) // pushed back meanwhile
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.wake()
}

// stop ends the pause's timer: no more wakes of its own.
func (b *backPressure) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
}

// stats fills Stats' back-pressure figures.
func (b *backPressure) stats(st *Stats) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st.ConcurrencyLimit = st.Concurrency
	if b.adaptive {
		st.ConcurrencyLimit = min(b.ceil, int(b.limit))
	}
	st.Throttled, st.LimitFalls = b.throttles, b.cuts
	if time.Now().Before(b.until) {
		st.ThrottledUntil = b.until
	}
}

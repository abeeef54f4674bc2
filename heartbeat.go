package sqsconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// heartbeatInterval is the rule for how often a lease renews: every
// configured interval (WithHeartbeatInterval), else a third of the lease,
// which leaves two thirds of the lease for a renewal, its retries and a
// stalled process before the deadline.
func heartbeatInterval(lease, configured time.Duration) time.Duration {
	if configured > 0 {
		return configured
	}
	return lease / 3
}

// ceilingGrace is how long before the maximum lease duration a handler is
// told to stop (ErrLeaseCeiling): WithCeilingGrace when it was given,
// else one heartbeat interval.
func ceilingGrace(interval, configured time.Duration, set bool) time.Duration {
	if set {
		return configured
	}
	return interval
}

// heartbeat is the lease's goroutine, started by a timer when it first has
// something to do (usually the first renewal, a third into the lease), so a
// message settled sooner never costs a goroutine. It renews visibility to the lease
// length whenever the time left falls to lease-interval (every interval when
// renewals succeed on time), retries transient failures with jittered
// backoff while the deadline allows, cancels the handler's context a grace
// period before the ceiling, and ends when the lease is settled, lost,
// expired or stopped. The schedule maths is in plan, a pure function.
func (l *Lease) heartbeat() {
	defer l.hbWG.Done()
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.hbRunning = true
	bg, cancel := context.WithCancel(context.Background())
	l.bgCancel = cancel
	kick := make(chan struct{}, 1)
	l.kick = kick
	l.mu.Unlock()
	defer cancel()
	stop := bg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for {
		p, _, ok := l.next(time.Now())
		if !ok {
			return
		}
		if p.fireCeiling {
			l.reachCeiling(nil)
		}
		if p.expired {
			l.expire(p.deadline)
			return
		}
		if !p.renewNow {
			timer.Reset(time.Until(p.wake))
			select {
			case <-stop:
				return
			case <-kick:
			case <-timer.C:
			}
			continue
		}

		// One call of this lease at a time: wait for a Release or Extend
		// in flight, then look again — it may have settled the lease or
		// moved the deadline. A pending delete is the exception: renewals
		// go on beside it, so a delete that answers late cannot let the
		// lease run out while SQS still accepts renewals (a refusal then
		// waits for the delete's own answer, see renew).
		token, ok := l.acquireRenewal(stop)
		if !ok {
			return
		}
		now := time.Now()
		p, h, ok := l.next(now)
		ended := !ok
		if ok && p.renewNow {
			ended = l.renew(bg, now, p, h, &failures)
		}
		if token {
			l.releaseCall()
		}
		if ended {
			return
		}
	}
}

// acquireRenewal takes the call token for a renewal, waiting until it is
// free and no Release is in flight, unless a delete is pending: then it
// returns at once without the token (token false). ok is false when done was closed first.
func (l *Lease) acquireRenewal(done <-chan struct{}) (token, ok bool) {
	for {
		l.mu.Lock()
		if l.deleting {
			l.mu.Unlock()
			return false, true
		}
		// A Release in flight, even between its attempts, holds renewals
		// off until it ends (endSettle wakes us): a renewal sent after
		// SQS applied the release would undo it.
		if !l.calling && !l.settling {
			l.calling = true
			l.mu.Unlock()
			return true, true
		}
		freed := l.callFreed.wait()
		l.mu.Unlock()
		select {
		case <-freed:
		case <-done:
			return false, false
		}
	}
}

// heldHandle is a receipt handle with its generation (handleGen when it
// was read): a later Adopt supersedes it, which the generation tells
// without comparing strings.
type heldHandle struct {
	handle string
	gen    uint32
}

// next plans the heartbeat's step at now; ok is false once the lease is
// no longer active.
func (l *Lease) next(now time.Time) (p step, h heldHandle, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != leaseActive {
		return step{}, heldHandle{}, false
	}
	return plan(now, l.schedLocked()), heldHandle{l.handle, l.handleGen}, true
}

// renew sends one renewal planned at now and judges its answer. The caller
// took the call token with acquireRenewal, or, while a delete of the lease
// is pending, renews beside it without the token. It reports whether the
// heartbeat should end.
func (l *Lease) renew(bg context.Context, now time.Time, p step, h heldHandle, failures *int) (ended bool) {
	// The call gets half the time left (at most 10 s), so a hung request
	// leaves room for retries before the deadline.
	callTimeout := min(p.deadline.Sub(now)/2, 10*time.Second)
	if p.late {
		callTimeout = min(l.cfg.interval, lateCallTimeout)
	}
	l.mu.Lock()
	l.asked = true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(bg, callTimeout)
	var err error
	if !broken.Is(broken.RenewalWithoutCall) {
		err = l.cfg.calls.changeVisibility(ctx, h.handle, int32(p.renewFor/time.Second))
	}
	cancel()
	if bg.Err() != nil {
		return true // stopped
	}
	// One look at the lease judges the answer: between two looks our own
	// delete could land and end the lease, and a refusal it caused would
	// then read as SQS's own.
	l.mu.Lock()
	stale := l.handleGen != h.gen || l.state != leaseActive
	ownDelete := l.deleting && l.deleteSent == h.handle
	l.mu.Unlock()
	if stale {
		return false // adopted or settled meanwhile: this answer no longer matters
	}
	if err == nil {
		*failures = 0
		l.confirmVisibility(now, p.renewFor)
		return false
	}
	kind := classify(err)
	if kind == kindLost && ownDelete {
		// Refused while our own delete of this handle is pending: most
		// likely it landed first. The delete's answer decides (a lost
		// handle fails it too); look again later. A delete not sent yet
		// (waiting for the call token) or sent with another handle
		// cannot explain the refusal: that is SQS's own.
		l.mu.Lock()
		l.nextRenew = time.Now().Add(l.retryDelay(*failures))
		l.mu.Unlock()
		return false
	}
	l.emit(EventRenewalFailed, p.renewFor, err)
	switch kind {
	case kindLost:
		l.lose(err)
		return true
	case kindCeiling:
		// SQS says the message is at its 12-hour limit: our clock and
		// its disagree. Stop asking; the deadline still stands.
		l.reachCeiling(err)
		return false
	}
	l.log(slog.LevelDebug, "sqsconsumer: renewal failed; retrying", "error", err, "attempt", *failures+1)
	delay := l.retryDelay(*failures)
	*failures++
	l.mu.Lock()
	if l.state == leaseActive && l.handleGen == h.gen {
		l.nextRenew = time.Now().Add(delay)
	}
	l.mu.Unlock()
	return false
}

// reachCeiling cancels the handler's context with ErrLeaseCeiling (once),
// and, when SQS itself refused (err != nil), stops further renewals.
func (l *Lease) reachCeiling(err error) {
	l.mu.Lock()
	if err != nil {
		l.noRenew = true
	}
	fired := l.ceilingFired
	l.ceilingFired = true
	cancel := l.cancel
	l.mu.Unlock()
	if fired {
		return
	}
	cause := ErrLeaseCeiling
	if err != nil {
		cause = fmt.Errorf("%w: %w", ErrLeaseCeiling, err)
	}
	if cancel != nil {
		cancel(cause)
	}
	l.emit(EventCeilingReached, 0, cause)
	l.log(slog.LevelWarn, "sqsconsumer: lease nears its maximum duration; the handler's context is cancelled")
}

// schedule is the lease's timing state as plan needs it.
type schedule struct {
	lease, interval, grace time.Duration
	ceiling                time.Time // latest receive + max lease
	deadline               time.Time
	nextRenew              time.Time
	ceilingFired           bool
	noRenew                bool
	asked                  bool // SQS was asked since the latest receive
}

func (l *Lease) schedLocked() schedule {
	return schedule{
		lease:        l.cfg.lease,
		interval:     l.cfg.interval,
		grace:        l.cfg.grace,
		ceiling:      l.receivedAt.Add(l.cfg.maxLease),
		deadline:     l.deadline,
		nextRenew:    l.nextRenew,
		ceilingFired: l.ceilingFired,
		noRenew:      l.noRenew,
		asked:        l.asked,
	}
}

// step is what the heartbeat does next.
type step struct {
	fireCeiling bool          // cancel the handler with ErrLeaseCeiling now
	expired     bool          // the deadline passed unrenewed
	renewNow    bool          // renew now, asking for renewFor
	renewFor    time.Duration // whole seconds, clipped to the ceiling
	late        bool          // renewNow past the estimated deadline: SQS was never asked
	wake        time.Time     // otherwise sleep until then
	deadline    time.Time
}

// plan decides the heartbeat's next step at now. It is pure: the whole
// renewal schedule (a third of the lease, clipped to the ceiling, the grace
// before it) is table-tested through it without any clock.
func plan(now time.Time, s schedule) step {
	st := step{deadline: s.deadline}
	graceAt := s.ceiling.Add(-s.grace)
	if !s.ceilingFired && !now.Before(graceAt) {
		st.fireCeiling = true
		s.ceilingFired = true
	}
	if !now.Before(s.deadline) {
		// A deadline nobody asked SQS about is only an estimate, and
		// estimates err early: renew at once, and let SQS's answer
		// decide whether the lease lives (a refused handle is lost).
		renewFor := min(s.lease, s.ceiling.Sub(now)-ceilingMargin).Truncate(time.Second)
		if !s.asked && !s.noRenew && renewFor >= time.Second {
			st.renewNow, st.renewFor, st.late = true, renewFor, true
			return st
		}
		st.expired = true
		return st
	}
	// The next renewal is due at nextRenew (or now, if that has passed). It
	// asks for the lease length clipped to the ceiling; one that would not
	// move the deadline later is pointless, and since a clipped renewal
	// always ends at the same instant, waiting would not help: at the
	// ceiling the lease just runs out.
	renewAt := now
	if s.nextRenew.After(now) {
		renewAt = s.nextRenew
	}
	renewFor := min(s.lease, s.ceiling.Sub(renewAt)-ceilingMargin).Truncate(time.Second)
	canRenew := !s.noRenew && renewFor >= time.Second && renewAt.Before(s.deadline) && renewAt.Add(renewFor).After(s.deadline)
	if canRenew && renewAt.Equal(now) {
		st.renewNow = true
		st.renewFor = renewFor
		return st
	}
	st.wake = s.deadline
	if canRenew && renewAt.Before(st.wake) {
		st.wake = renewAt
	}
	if !s.ceilingFired && graceAt.Before(st.wake) {
		st.wake = graceAt
	}
	return st
}

package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The lease's calls to SQS: one at a time (the call token), each retried
// with the newest receipt handle until it succeeds, fails for good, or the
// deadline passes, and its answer judged knowing every earlier one. Delete,
// Release and Extend (lease.go) and the heartbeat's renewals
// (heartbeat.go) go through here.

func (l *Lease) deleteCall(ctx context.Context, handle string) error {
	l.mu.Lock()
	l.deleteSent = handle
	l.mu.Unlock()
	return l.cfg.calls.deleteMessage(ctx, handle)
}

// deleteAsync is Delete for a Consumer's settlement, without the wait: it
// adds the delete to the next coalesced call and returns true, and done gets
// Delete's result once SQS answered. A first attempt that does not simply
// succeed continues as Delete would (retries, a newer handle) on a
// goroutine of its own, which calls done last; the coalesced calls count
// it (coalescedCalls.retries), and their close waits for it. It returns
// false, having done nothing, when the lease's calls are not coalesced,
// another call of the lease is in flight or the lease cannot be deleted:
// the caller then uses Delete.
func (l *Lease) deleteAsync(done func(*Lease, error)) bool {
	return l.deleteAsyncBy(done, time.Time{})
}

// deleteAsyncBy is deleteAsync with the first attempt's call bounded by by
// as well as by the lease's deadline (zero: by the deadline alone).
func (l *Lease) deleteAsyncBy(done func(*Lease, error), by time.Time) bool {
	bc, ok := l.cfg.calls.(*coalescedCalls)
	if !ok {
		return false
	}
	l.mu.Lock()
	if l.calling || l.state != leaseActive || l.settling || !time.Now().Before(l.deadline) {
		l.mu.Unlock()
		return false
	}
	l.calling, l.settling, l.deleting = true, true, true
	l.callFreed.fire() // a heartbeat waiting for the token renews beside the delete
	handle, deadline, gen := l.handle, l.deadline, l.handleGen
	l.deleteSent = handle
	l.mu.Unlock()
	if !by.IsZero() && by.Before(deadline) {
		deadline = by
	}
	if err := bc.del.Submit(delEntry{handle: handle, l: l, gen: gen, done: done}, deadline, deleteAnswered); err != nil {
		l.mu.Lock()
		l.settling, l.deleting, l.deleteSent = false, false, ""
		l.releaseCallLocked()
		l.mu.Unlock()
		return false
	}
	return true
}

// deleteAnswered takes SQS's answer to a delete of deleteAsync.
func deleteAnswered(e delEntry, err error) { e.l.asyncDeleted(e.gen, e.done, err) }

// asyncDeleted is the batch callback of deleteAsync, whose delete was
// submitted with the handle of generation gen.
func (l *Lease) asyncDeleted(gen uint32, done func(*Lease, error), err error) {
	l.mu.Lock()
	superseded := l.handleGen != gen
	l.releaseCallLocked()
	l.mu.Unlock()
	if err == nil && !superseded {
		if settleAnswered != nil {
			settleAnswered(l)
		}
		if l.endSettle(nil, gen, leaseDeleted, EventDeleted, 0) {
			done(l, nil)
			return
		}
		superseded = true // adopted since the answer: delete the newer handle
	}
	first := outcome{superseded: superseded, err: err, gen: gen}
	if bc, ok := l.cfg.calls.(*coalescedCalls); ok {
		bc.retries.Go(func() { l.deleteRetry(first, done) })
		return
	}
	go l.deleteRetry(first, done)
}

// deleteRetry carries on a deleteAsync whose first attempt did not simply
// succeed.
func (l *Lease) deleteRetry(first outcome, done func(*Lease, error)) {
	ctx := l.cfg.settleCtx
	if ctx == nil {
		ctx = context.Background()
	}
	done(l, l.settleWithRetry(ctx, "DeleteMessage", l.deleteCall, &first, leaseDeleted, EventDeleted, nil))
}

// confirmVisibility records a visibility SQS accepted at sent.
func (l *Lease) confirmVisibility(sent time.Time, set time.Duration) {
	l.mu.Lock()
	if l.state != leaseActive {
		l.mu.Unlock()
		return
	}
	l.deadline = sent.Add(set)
	l.nextRenew = l.deadline.Add(-(l.cfg.lease - l.cfg.interval))
	l.renewals++
	watchers, deadline := l.watcherList(), l.deadline
	l.mu.Unlock()
	l.wake()
	l.emit(EventRenewed, set, nil)
	notify(watchers, deadline)
}

// beginSettle marks a Delete (deleting) or Release as in flight.
func (l *Lease) beginSettle(deleting bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.stateErrLocked(true); err != nil {
		return err
	}
	if l.settling {
		return fmt.Errorf("%w: another Delete or Release is in flight", ErrLeaseSettled)
	}
	l.settling, l.deleting = true, deleting
	if deleting {
		l.callFreed.fire() // a heartbeat waiting for the token renews beside the delete
	}
	return nil
}

// settleAnswered, when set (by a test), is called after a Delete's or
// Release's call was answered and judged, before the lease settles: the
// moment a newer receive of the message may be adopted.
var settleAnswered func(*Lease)

// endSettle ends a Delete or Release whose last call, made with the handle
// of generation gen, returned err: on success the lease settles (to) and
// emits ev. It reports false, and ends nothing, when the call succeeded
// but a newer handle was adopted since it was judged: SQS applied the
// call to a receive that is no longer the message's, so the call must be
// made again with the newer handle (the caller does). The look at the
// handle and the change of state are one step under l.mu, so no Adopt
// can come between them unseen.
func (l *Lease) endSettle(err error, gen uint32, to leaseState, ev EventKind, vis time.Duration) bool {
	l.mu.Lock()
	if err == nil && l.state == leaseActive && l.handleGen != gen {
		l.mu.Unlock()
		return false
	}
	l.settling, l.deleting, l.deleteSent = false, false, ""
	ok := err == nil && l.state == leaseActive
	if ok {
		l.state = to
	}
	l.callFreed.fire() // a heartbeat held off by a Release looks again
	l.mu.Unlock()
	if ok {
		l.wake()
		l.emit(ev, vis, nil)
	}
	return true
}

// settleWithRetry runs a Delete's or Release's call (after a first attempt
// whose outcome is first, nil: none) until it succeeds with the handle the
// lease holds when it settles, or fails, and ends the settlement. vis
// gives the visibility the event reports (nil: 0).
func (l *Lease) settleWithRetry(ctx context.Context, op string, call func(context.Context, string) error, first *outcome, to leaseState, ev EventKind, vis func() time.Duration) error {
	for {
		gen, err := l.retryFrom(ctx, op, call, first)
		first = nil
		if settleAnswered != nil && err == nil {
			settleAnswered(l)
		}
		var v time.Duration
		if vis != nil {
			v = vis()
		}
		if l.endSettle(err, gen, to, ev, v) {
			return err
		}
	}
}

// callWithRetry runs call with the newest handle until it succeeds, fails
// for good, the lease's deadline passes or ctx ends. A success with a handle
// that was superseded meanwhile is repeated with the new one (SQS may
// answer a stale delete with success and delete nothing).
func (l *Lease) callWithRetry(ctx context.Context, op string, call func(context.Context, string) error) error {
	_, err := l.retryFrom(ctx, op, call, nil)
	return err
}

// outcome is what one attempt of a call came to.
type outcome struct {
	superseded bool   // the handle changed while the call was in flight
	final      bool   // err needs no judging (the lease had already ended)
	err        error  // the call's error
	gen        uint32 // the generation of the handle it was made with
}

// retryFrom is callWithRetry after a first attempt whose outcome is first
// (nil: none made yet). gen is the generation of the handle of the last
// attempt.
func (l *Lease) retryFrom(ctx context.Context, op string, call func(context.Context, string) error, first *outcome) (gen uint32, err error) {
	for attempt := 0; ; attempt++ {
		var o outcome
		token := false
		if first != nil {
			o, first = *first, nil
		} else {
			if !l.acquireCall(ctx.Done()) {
				return gen, fmt.Errorf("sqsconsumer: %s: %w", op, context.Cause(ctx))
			}
			o, token = l.attempt(ctx, call), true
		}
		gen = o.gen
		// Judge before giving the token back: a call waiting for it (a
		// Delete behind a refused Extend) must see the lease lost.
		again, backoff, err := l.judge(ctx, op, o)
		if token {
			l.releaseCall()
		}
		if !again {
			return gen, err
		}
		if backoff && !sleepCtx(ctx, l.retryDelay(attempt)) {
			return gen, fmt.Errorf("sqsconsumer: %s: %w (last error: %w)", op, context.Cause(ctx), o.err)
		}
	}
}

// judge decides what follows an attempt: the call's final result
// (again false), a repeat at once, or a repeat after a backoff. A lost
// handle marks the lease lost.
func (l *Lease) judge(ctx context.Context, op string, o outcome) (again, backoff bool, err error) {
	switch {
	case o.final:
		return false, false, o.err
	case o.err == nil:
		return o.superseded, false, nil
	case errors.Is(o.err, ErrLeaseCeiling):
		return false, false, o.err
	case ctx.Err() != nil:
		return false, false, fmt.Errorf("sqsconsumer: %s: %w", op, context.Cause(ctx))
	}
	switch classify(o.err) {
	case kindLost:
		if o.superseded {
			return true, false, nil
		}
		l.lose(o.err)
		return false, false, fmt.Errorf("%w: %s: %w", ErrLeaseLost, op, o.err)
	case kindPermanent, kindCeiling:
		return false, false, fmt.Errorf("sqsconsumer: %s: %w", op, o.err)
	}
	return true, true, nil
}

// acquireCall takes the call token, waiting until it is free or done is
// closed (then it returns false).
func (l *Lease) acquireCall(done <-chan struct{}) bool {
	for {
		l.mu.Lock()
		if !l.calling {
			l.calling = true
			l.mu.Unlock()
			return true
		}
		freed := l.callFreed.wait()
		l.mu.Unlock()
		select {
		case <-freed:
		case <-done:
			return false
		}
	}
}

// releaseCall gives the call token back.
func (l *Lease) releaseCall() {
	l.mu.Lock()
	l.releaseCallLocked()
	l.mu.Unlock()
}

func (l *Lease) releaseCallLocked() {
	l.calling = false
	l.callFreed.fire()
}

// attempt makes one call of callWithRetry; the caller holds the call token.
func (l *Lease) attempt(ctx context.Context, call func(context.Context, string) error) outcome {
	l.mu.Lock()
	// Settled counts too: an Extend that waited for the call token while
	// a Release or Delete went through must not undo it.
	if err := l.stateErrLocked(true); err != nil {
		l.mu.Unlock()
		return outcome{final: true, err: err}
	}
	handle, gen, deadline, asked := l.handle, l.handleGen, l.deadline, l.asked
	l.asked = true
	l.mu.Unlock()
	if now := time.Now(); !now.Before(deadline) {
		if asked {
			l.expire(deadline)
			return outcome{final: true, err: ErrLeaseExpired}
		}
		// Past the estimated deadline before SQS was ever asked: the
		// estimate errs early, so ask rather than give up.
		deadline = now.Add(lateCallTimeout)
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	err := call(cctx, handle)
	cancel()
	return outcome{superseded: l.supersededSince(gen), err: err, gen: gen}
}

// supersededSince reports whether a handle newer than generation gen was
// adopted.
func (l *Lease) supersededSince(gen uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handleGen != gen
}

// retryDelay is the jittered pause before retry attempt n (0-based) of a
// failed call: 200 ms doubling, capped at a quarter of the heartbeat
// interval (at least 200 ms), uniformly jittered in [d/2, d].
func (l *Lease) retryDelay(n int) time.Duration {
	d := backoffDelay(n, 200*time.Millisecond, max(l.cfg.interval/4, 200*time.Millisecond))
	return between(d/2, d)
}

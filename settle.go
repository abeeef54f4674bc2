package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// settleAction is what the settle door does with a delivery's message.
type settleAction int

const (
	// actSettled: the handler deleted or released the message itself;
	// nothing to call.
	actSettled settleAction = iota
	// actLeave: the lease ended (lost or expired): the handle is no
	// good, and SQS delivers the message again by itself.
	actLeave
	// actDelete: the handler succeeded.
	actDelete
	// actDeadLetter: a Permanent failure: move the message to the
	// dead-letter queue, then delete it; if the move cannot be made,
	// release it for after (as actRelease).
	actDeadLetter
	// actRelease: set the message's visibility to after (0: at once).
	actRelease
)

// settleInput is what decide knows of a delivery whose handling ended.
type settleInput struct {
	ran      bool          // its handler (or its batch) ran for it
	err      error         // the handler's result, when ran
	settled  bool          // the handler deleted or released the message itself
	leaseErr error         // why its lease ended (lost, expired) or is ending (ErrLeaseCeiling: the handle still holds), nil while it lives
	shutdown bool          // the shutdown cancelled its handler (ErrShutdown)
	backoff  time.Duration // WithBackoff's delay for its receive count (ran with an error)
	hold     time.Duration // the least visibility the breaker asks of a failure of the downstream now (0: closed, or the shutdown has begun)
}

// decide is the settle door's rule, for every path after a handler: what
// to do with the message, and the visibility it gets when it is released
// (after). It is pure, for table tests.
//
//   - A message the handler settled itself is left as it is.
//   - A message whose handler never ran is handed back at once (visibility
//     0), unless its lease ended meanwhile (then SQS hands it out again).
//   - A success is deleted.
//   - A failure whose lease ended (lost or expired) is left to SQS: its
//     handle is no good. A lease at its ceiling has not ended: its
//     handler was told to stop (ErrLeaseCeiling), but its handle holds
//     until the deadline, so its failure is released as any other, and
//     the lease clips the visibility to the ceiling.
//   - A message failed without running because an earlier message of its
//     FIFO group failed is handed back at once: no backoff, no breaker.
//   - A Permanent failure goes to the dead-letter queue.
//   - Any other failure is released for its RetryAfter delay (or its
//     Throttled delay, when it says one), else its backoff (at least a
//     second: never visible at once by default), then at least the
//     breaker's hold (given only for failures the breaker counts, and
//     none once the shutdown has begun: no probe follows), at most 12
//     hours, rounded up to whole seconds; at shutdown it is released at
//     once.
func decide(in settleInput) (act settleAction, after time.Duration) {
	ended := in.leaseErr != nil && !errors.Is(in.leaseErr, ErrLeaseCeiling)
	switch {
	case in.settled:
		return actSettled, 0
	case !in.ran && ended:
		return actLeave, 0
	case !in.ran:
		return actRelease, 0
	case in.err == nil:
		return actDelete, 0
	case ended:
		return actLeave, 0
	case errors.Is(in.err, errEarlierFailed):
		return actRelease, 0
	}
	after, ok := retryAfterOf(in.err)
	if broken.Is(broken.RetryAfterIgnored) {
		after, ok = 0, false
	}
	if !ok {
		after = max(in.backoff, time.Second)
	}
	after = max(after, in.hold) // later probes try other messages
	if in.shutdown {
		after = 0
	}
	after = min(after, MaxVisibilityTimeout)
	if after%time.Second != 0 {
		after = after.Truncate(time.Second) + time.Second
	}
	if IsPermanent(in.err) {
		return actDeadLetter, after
	}
	return actRelease, after
}

// settle is the one door after a handler: every delivery ends here,
// whatever happened to it. Its handler returned err (ran); or a batch gave
// it a result; or it failed without running because an earlier message of
// its FIFO group failed (errEarlierFailed); or it never ran (!ran: the
// shutdown, Pause, the breaker, its lease ending while it waited, its
// group handed back). The breaker hears what outcomeOf makes of the
// result; decide says what to do with the message; settle does it, then
// finish ends the delivery.
//
// A successful handler's delete is coalesced without the caller waiting:
// finish runs when SQS has answered, and meanwhile the handler slot takes
// the next ready message, which settle returns for the caller to run (nil:
// none). Settling uses its own context, not the handler's (which may be
// cancelled): the lease's deadline bounds every call, and the hard stop
// bounds them at shutdown, except for a handler that returns once the
// shutdown timeout has run out: its message's calls get one call timeout
// of their own from then (shutdownCallTimeout), which the hard stop does
// not cut, so that a handler that ignored its cancelled context past the
// hard stop still has its message released at once.
func (r *run) settle(d *delivery, err error, ran bool) (next *delivery) {
	l := &d.lease
	in := settleInput{ran: ran, err: err}
	in.settled, in.leaseErr = l.settleState()
	if ran && err != nil {
		in.shutdown = errors.Is(context.Cause(d.ctx), ErrShutdown)
		in.backoff = r.backoff(d.msg.ReceiveCount)
	}
	kind := outcomeNeutral
	if ran {
		kind = outcomeOf(err, in.leaseErr, in.shutdown)
	}
	if r.br != nil {
		r.br.record(kind)
		if kind == outcomeFailure && !r.shuttingDown() {
			// Once the shutdown has begun no probe of this process
			// follows: a failure (a handler that drained, Draining)
			// keeps its own delay.
			in.hold = r.br.holdFor()
		}
	}
	act, after := decide(in)
	if broken.Is(broken.DeleteFailed) && ran && act == actRelease {
		act = actDelete
	}
	r.throttleOutcome(kind, d, after)
	switch {
	case !ran:
	case err == nil:
		r.observe(EventSucceeded, d, nil)
	default:
		r.observe(EventFailed, d, err)
		r.logFailure(d, err, act, after)
	}
	ctx, by := r.settleCtx, time.Time{}
	if ran && r.late.Load() && act != actSettled && act != actLeave {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(r.lateCtx, shutdownCallTimeout)
		defer cancel() // an asynchronous delete is bounded by by instead
		by, _ = ctx.Deadline()
	} else if r.shuttingDown() {
		// An asynchronous delete added to the calls just as the shutdown
		// timeout runs out may land under lateCtx (calls.rebase), which
		// the hard stop does not cut: its first attempt ends at the hard
		// stop all the same, as settleCtx would end it.
		by = r.budgetEnd.Add(shutdownCallTimeout)
	}
	switch act {
	case actSettled:
		r.finish(d, l.deleted(), ran, err)
	case actLeave:
		if !ran {
			// Its lease ended before the handler could start: the handle
			// is no good, and SQS hands the message out again by itself.
			r.log(slog.LevelWarn, "sqsconsumer: a received message's lease ended before its handler could start; not starting it", "message_id", d.msg.ID, "error", in.leaseErr)
			err = in.leaseErr
		}
		r.finish(d, false, ran, err)
	case actDelete:
		return r.settleDelete(ctx, by, d, r.afterDelete)
	case actDeadLetter:
		moveCtx := ctx
		if ctx == r.settleCtx {
			// A move still going when the shutdown timeout runs out is
			// given up: the release that follows has until the hard
			// stop (a message whose move hung would stay hidden).
			moveCtx = r.budgetCtx
		}
		if r.moveToDeadLetter(moveCtx, d, err) {
			// The copy is in the dead-letter queue: the source's message
			// goes as a success's would (a FIFO group moves on). A rare
			// path: the closure's allocation does not matter.
			return r.settleDelete(ctx, by, d, func(l *Lease, derr error) { r.movedDeleted(d, derr, err) })
		}
		r.logFailure(d, err, actRelease, after) // the move failed: an ordinary failure after all
		fallthrough
	case actRelease:
		if after < r.pollWait && r.shuttingDown() {
			r.awaitReceives()
		}
		if rerr := l.Release(ctx, after); rerr != nil {
			what := "could not set the failed message's retry visibility"
			if !ran {
				what = "could not hand an unstarted message back"
			}
			r.log(slog.LevelWarn, "sqsconsumer: "+what, "message_id", d.msg.ID, "error", rerr)
		} else {
			d.retryAfter = after // SQS hides it that much longer
		}
		r.finish(d, false, ran, err)
	}
	return nil
}

// awaitReceives holds a release in the shutdown until no receive of the
// run is in flight: one still in flight would take the message as soon as
// it is visible and hand it back, once per poll, each receive counted
// towards the queue's maxReceiveCount. The lease is renewed meanwhile.
// None starts in the shutdown and each answers within its long-poll wait,
// which the shutdown timeout bounds; so it waits at most until the
// budget's end (a receive still in flight then is hung), when the release
// can still be sent before the hard stop.
func (r *run) awaitReceives() {
	wait := time.NewTimer(time.Until(r.budgetEnd))
	defer wait.Stop()
	select {
	case <-r.fl.receivesEnded():
	case <-wait.C:
	}
}

// throttleOutcome tells the back pressure of a handler's outcome once its
// message's fate is decided (after: the visibility it is released for).
func (r *run) throttleOutcome(kind outcomeKind, d *delivery, after time.Duration) {
	switch {
	case kind == outcomeThrottled:
		r.bp.outcome(kind, d.workStarted(), 0, after)
	case kind == outcomeSuccess && r.bp.adaptive:
		r.bp.outcome(kind, d.workStarted(), r.fl.runningNow(), 0)
	}
}

// logFailure logs a handler's failure and what becomes of its message, at
// Warn, at most failureLogBurst lines at once and failureLogRate a second
// after that (the lines it holds back are counted in the next one), so that
// a failing queue cannot flood the log. A message failed only because an
// earlier one of its FIFO group failed, and a Throttled one, are logged
// at Debug; a Permanent failure is logged by its move to the dead-letter
// queue.
func (r *run) logFailure(d *delivery, err error, act settleAction, after time.Duration) {
	if r.s.logger == nil || act == actDeadLetter {
		return
	}
	args := []any{"message_id", d.msg.ID, "receive_count", d.msg.ReceiveCount, "error", err}
	switch {
	case act == actLeave:
		r.failLog.log(r.ev, "sqsconsumer: handler failed after its lease ended; SQS delivers the message again", args...)
	case errors.Is(err, errEarlierFailed):
		r.log(slog.LevelDebug, "sqsconsumer: message released unhandled to keep its FIFO group's order", args...)
	case IsThrottled(err):
		// Back pressure, expected under a downstream's limit: the pause
		// (logged when it begins) or the adaptive limit answers it.
		r.log(slog.LevelDebug, "sqsconsumer: handler throttled by the downstream; message released for a retry", append(args, "retry_after", after.String())...)
	default:
		r.failLog.log(r.ev, "sqsconsumer: handler failed; message released for a retry", append(args, "retry_after", after.String())...)
	}
}

// Rate of logFailure's lines.
const (
	failureLogBurst = 10
	failureLogRate  = 1 // lines a second after the burst
)

// failureLog is logFailure's rate limit. The zero value is ready to use;
// safe for concurrent use.
type failureLog struct {
	mu      sync.Mutex // guards the fields below
	bucket  *tokenBucket
	skipped int // lines held back since the last one logged
}

// log logs msg at Warn if the rate allows, with the count of lines held
// back before it.
func (f *failureLog) log(ev *eventSink, msg string, args ...any) {
	now := time.Now()
	f.mu.Lock()
	if f.bucket == nil {
		f.bucket = newTokenBucket(failureLogRate, failureLogBurst)
	}
	if f.bucket.readyAt(now, 1).After(now) {
		f.skipped++
		f.mu.Unlock()
		return
	}
	f.bucket.take(now, 1)
	skipped := f.skipped
	f.skipped = 0
	f.mu.Unlock()
	if skipped > 0 {
		args = append(args, "failures_not_logged", skipped)
	}
	ev.log(slog.LevelWarn, msg, args...)
}

// settleAndStart is settle for a caller with nothing to run next: it
// starts the message settle's freed slot took, if any.
func (r *run) settleAndStart(d *delivery, err error, ran bool) {
	if next := r.settle(d, err, ran); next != nil {
		r.start(next)
	}
}

// settleDelete deletes the message of a delivery that is done with
// (handled, or moved to the dead-letter queue) and calls after (which
// finishes it) when SQS has answered. While SQS confirms the delete the
// handler slot can take the next message, which settleDelete returns for
// the caller to run: the lease keeps renewing until then. At most
// concurrency + max read-ahead such messages are held at once. ctx bounds
// a delete that waits, by (zero: none) the first attempt of one that does
// not (settle's).
func (r *run) settleDelete(ctx context.Context, by time.Time, d *delivery, after func(*Lease, error)) (next *delivery) {
	next, _ = r.fl.settleEarly(d)
	if !d.lease.deleteAsyncBy(after, by) {
		// A call of the lease is in flight (a renewal): this delete
		// waits for SQS, and the next message must not wait with it.
		if next != nil {
			r.start(next)
			next = nil
		}
		after(&d.lease, d.lease.Delete(ctx))
	} // else after runs when SQS answers
	return next
}

// deleted finishes a succeeded handler's message once its delete returned
// err, logging a failure.
func (r *run) deleted(l *Lease, err error) {
	d := l.holderOf().(*delivery)
	if err != nil {
		r.log(slog.LevelError, "sqsconsumer: handler succeeded but the message could not be deleted; it will be delivered again", "message_id", d.msg.ID, "error", err)
	}
	r.finish(d, err == nil, true, nil)
}

// movedDeleted finishes a message moved to the dead-letter queue once its
// delete from the source returned err; handlerErr is the handler's
// Permanent error, for EventDone.
func (r *run) movedDeleted(d *delivery, err, handlerErr error) {
	if err != nil {
		r.log(slog.LevelError, "sqsconsumer: message moved to the dead-letter queue but not deleted from the source; it will be delivered again", "message_id", d.msg.ID, "error", err)
	}
	r.finish(d, err == nil, true, handlerErr)
}

// finish ends a settled delivery: it stops the lease, records the figures,
// takes the delivery out of the flow (freeing its slot), and moves its
// FIFO group on: the next of the group starts when this one was done (its
// message deleted), and the rest of the group goes back when it was not.
func (r *run) finish(d *delivery, done, ran bool, doneErr error) {
	defer r.reg.done()
	d.lease.Stop()
	// SQS counted it as not visible from its receive to this call's
	// answer (and the retry visibility after): the scaling signal's time
	// in flight, whatever part was read-ahead, handler or settling.
	inFlight := time.Since(d.lease.arrivedAt())
	r.stats.notVisible(inFlight+d.retryAfter, ran)
	if ran {
		r.stats.settled(inFlight, d.lease.renewalCount())
	} else if !broken.Is(broken.StatsSkipUnstarted) {
		r.stats.unstarted()
	}
	r.observe(EventDone, d, doneErr)
	next, back := r.reg.leave(d, done)
	r.leaveFlow(d, ran)
	if ran {
		r.scaler.completed() // a fresh replica's figure may wait for it
	}
	r.returnLater(back)
	switch {
	case next == nil:
	case next.parked.Swap(false):
		// A redelivery parked behind d, its own message's older
		// delivery: it takes its slot only now.
		if !r.enqueue(next) {
			r.handBack([]*delivery{next})
		}
	case r.batch != nil:
		r.batch.advance(next) // it holds a slot or waits for one; its batch may take it now
	case !r.enqueue(next):
		r.handBack([]*delivery{next})
	}
}

// leaveFlow takes d out of the flow's counts; a slot it frees goes to the
// next ready message, which starts.
func (r *run) leaveFlow(d *delivery, ran bool) {
	if next, ok := r.fl.leave(d, ran); ok {
		r.start(next)
	}
}

// handBack hands ds back to SQS without running them (visibility 0) and
// waits for that: messages the caller holds that have not started (the
// ready messages at a pause, a shutdown or an opening of the breaker, the
// messages of a receive that came back while none was taken). Each
// release runs on a goroutine of its own, so that they coalesce into few
// calls. The later messages of their FIFO groups held here go back too
// (returnLater), and nothing of those groups starts until every hand-back
// is answered.
func (r *run) handBack(ds []*delivery) {
	if len(ds) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, d := range ds {
		later := r.reg.handBack(d)
		wg.Go(func() { r.settleAndStart(d, nil, false) })
		r.returnLater(later)
	}
	wg.Wait()
}

// returnLater hands back the later messages of a FIFO group whose earlier
// one will not be done: in single-message mode they wait, unstarted,
// behind it, and are released, each on a worker goroutine; a Batch
// handler's members are failed with errEarlierFailed by the batcher
// (laterFailed).
func (r *run) returnLater(ds []*delivery) {
	if len(ds) == 0 {
		return
	}
	if r.batch != nil {
		r.batch.laterFailed(ds)
		return
	}
	for _, d := range ds {
		r.goSettle(func() { r.settleAndStart(d, nil, false) })
	}
}

// unstarted is what the Consumer holds but has not started, to be handed
// back at a pause, a shutdown or an opening of the breaker: the ready
// messages (taken from the flow by the caller) and, in single-message
// mode, the FIFO messages waiting behind their group's first, which it
// marks as handed back. (A Batch handler's members that hold slots stay
// with their batches; its redeliveries parked behind a delivery of their
// own message that winds down go back, since they hold none.)
func (r *run) unstarted(ready []*delivery) []*delivery {
	if r.batch != nil {
		parked, later := r.reg.parkedBehind()
		r.returnLater(later)
		return append(parked, ready...)
	}
	return append(r.reg.tails(), ready...)
}

// backoff is WithBackoff's function for receiveCount. One that panics is
// a bug in the caller's code, not in the message: the panic is logged and
// DefaultBackoff used instead, rather than ending the process from a
// library goroutine.
func (r *run) backoff(receiveCount int) (d time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			r.log(slog.LevelError, "sqsconsumer: the WithBackoff function panicked; using DefaultBackoff", "panic", fmt.Sprint(v))
			d = DefaultBackoff(receiveCount)
		}
	}()
	return r.s.backoff(receiveCount)
}

// moveToDeadLetter moves a message whose handler returned the permanent
// error err to the dead-letter queue, within ctx. It reports false,
// having done nothing to the message, when the move could not be made:
// the caller then settles it as an ordinary failure.
func (r *run) moveToDeadLetter(ctx context.Context, d *delivery, err error) bool {
	m := &d.msg
	if !r.dlq.ready() {
		if r.dlqWarned.CompareAndSwap(false, true) {
			r.log(slog.LevelWarn, "sqsconsumer: a handler returned a permanent error but there is no dead-letter queue to move it to; such messages are retried as ordinary failures (logged once)",
				"message_id", m.ID, "reason", r.dlq.why)
		}
		return false
	}
	id, dropped, serr := r.dlq.move(ctx, m, err)
	if serr != nil {
		r.log(slog.LevelWarn, "sqsconsumer: could not move a permanently failing message to the dead-letter queue; retrying it as an ordinary failure",
			"message_id", m.ID, "dead_letter_queue", r.dlq.url, "error", serr)
		return false
	}
	args := []any{"message_id", m.ID, "receive_count", m.ReceiveCount, "dead_letter_queue", r.dlq.url, "dead_letter_message_id", id, "error", err}
	if len(dropped) > 0 {
		args = append(args, "attributes_left_out", dropped)
	}
	r.log(slog.LevelWarn, "sqsconsumer: moved a permanently failing message to the dead-letter queue", args...)
	r.observe(EventDeadLettered, d, err)
	return true
}

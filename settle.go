package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
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
	leaseErr error         // why its lease ended, nil while it lives
	shutdown bool          // the shutdown cancelled its handler (ErrShutdown)
	backoff  time.Duration // WithBackoff's delay for its receive count (ran with an error)
	hold     time.Duration // the least visibility the breaker asks of a failure now (0: closed)
}

// decide is the settle door's rule, for every path after a handler: what
// to do with the message, and the visibility it gets when it is released
// (after). It is pure, for table tests.
//
//   - A message the handler settled itself is left as it is.
//   - A message whose handler never ran is handed back at once (visibility
//     0), unless its lease ended meanwhile (then SQS hands it out again).
//   - A success is deleted.
//   - A failure whose lease ended is left to SQS.
//   - A message failed without running because an earlier message of its
//     FIFO group failed is handed back at once: no backoff, no breaker.
//   - A Permanent failure goes to the dead-letter queue.
//   - Any other failure is released for its RetryAfter delay, else its
//     backoff (at least a second: never visible at once by default),
//     then at least the breaker's hold, at most 12 hours, rounded up to
//     whole seconds; at shutdown it is released at once.
func decide(in settleInput) (act settleAction, after time.Duration) {
	switch {
	case in.settled:
		return actSettled, 0
	case !in.ran && in.leaseErr != nil:
		return actLeave, 0
	case !in.ran:
		return actRelease, 0
	case in.err == nil:
		return actDelete, 0
	case in.leaseErr != nil:
		return actLeave, 0
	case errors.Is(in.err, errEarlierFailed):
		return actRelease, 0
	}
	after, ok := retryAfterOf(in.err)
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
// group handed back). The breaker hears of real handler outcomes; decide
// says what to do with the message; settle does it, then finish ends the
// delivery.
//
// A successful handler's delete is coalesced without the caller waiting:
// finish runs when SQS has answered, and meanwhile the handler slot takes
// the next ready message, which settle returns for the caller to run (nil:
// none). Settling uses its own context, not the handler's (which may be
// cancelled): the lease's deadline bounds every call, and the hard stop
// bounds them at shutdown.
func (c *Consumer) settle(d *delivery, err error, ran bool) (next *delivery) {
	l := &d.lease
	in := settleInput{ran: ran, err: err}
	in.settled, in.leaseErr = l.settleState()
	if ran && err != nil {
		in.shutdown = errors.Is(context.Cause(d.ctx), ErrShutdown)
		in.backoff = c.backoff(d.msg.ReceiveCount)
	}
	if c.br != nil && ran {
		c.br.record(outcomeOf(err, in.leaseErr, in.shutdown))
		if err != nil {
			in.hold = c.br.holdFor()
		}
	}
	act, after := decide(in)
	switch {
	case !ran:
	case err == nil:
		c.observe(EventSucceeded, d, nil)
	default:
		c.observe(EventFailed, d, err)
		c.logFailure(d, err, act, after)
	}
	ctx := c.settleCtx
	switch act {
	case actSettled:
		c.finish(d, l.deleted(), ran, err)
	case actLeave:
		if !ran {
			// Its lease ended before the handler could start: the handle
			// is no good, and SQS hands the message out again by itself.
			c.log(slog.LevelWarn, "sqsconsumer: a received message's lease ended before its handler could start; not starting it", "message_id", d.msg.ID, "error", in.leaseErr)
			err = in.leaseErr
		}
		c.finish(d, false, ran, err)
	case actDelete:
		return c.settleDelete(d, c.afterDelete)
	case actDeadLetter:
		if c.moveToDeadLetter(d, err) {
			// The copy is in the dead-letter queue: the source's message
			// goes as a success's would (a FIFO group moves on). A rare
			// path: the closure's allocation does not matter.
			return c.settleDelete(d, func(l *Lease, derr error) { c.movedDeleted(d, derr, err) })
		}
		c.logFailure(d, err, actRelease, after) // the move failed: an ordinary failure after all
		fallthrough
	case actRelease:
		if rerr := l.Release(ctx, after); rerr != nil {
			what := "could not set the failed message's retry visibility"
			if !ran {
				what = "could not hand an unstarted message back"
			}
			c.log(slog.LevelWarn, "sqsconsumer: "+what, "message_id", d.msg.ID, "error", rerr)
		}
		c.finish(d, false, ran, err)
	}
	return nil
}

// logFailure logs a handler's failure and what becomes of its message, at
// Warn, at most failureLogBurst lines at once and failureLogRate a second
// after that (the lines it holds back are counted in the next one), so that
// a failing queue cannot flood the log. A message failed only because an
// earlier one of its FIFO group failed is logged at Debug; a Permanent
// failure is logged by its move to the dead-letter queue.
func (c *Consumer) logFailure(d *delivery, err error, act settleAction, after time.Duration) {
	if c.s.logger == nil || act == actDeadLetter {
		return
	}
	args := []any{"message_id", d.msg.ID, "receive_count", d.msg.ReceiveCount, "error", err}
	switch {
	case act == actLeave:
		c.failLog.log(c, "sqsconsumer: handler failed after its lease ended; SQS delivers the message again", args...)
	case errors.Is(err, errEarlierFailed):
		c.log(slog.LevelDebug, "sqsconsumer: message released unhandled to keep its FIFO group's order", args...)
	default:
		c.failLog.log(c, "sqsconsumer: handler failed; message released for a retry", append(args, "retry_after", after.String())...)
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
func (f *failureLog) log(c *Consumer, msg string, args ...any) {
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
	c.log(slog.LevelWarn, msg, args...)
}

// settleAndStart is settle for a caller with nothing to run next: it
// starts the message settle's freed slot took, if any.
func (c *Consumer) settleAndStart(d *delivery, err error, ran bool) {
	if next := c.settle(d, err, ran); next != nil {
		c.start(next)
	}
}

// settleDelete deletes the message of a delivery that is done with
// (handled, or moved to the dead-letter queue) and calls after (which
// finishes it) when SQS has answered. While SQS confirms the delete the
// handler slot can take the next message, which settleDelete returns for
// the caller to run: the lease keeps renewing until then. At most
// concurrency + max read-ahead such messages are held at once.
func (c *Consumer) settleDelete(d *delivery, after func(*Lease, error)) (next *delivery) {
	if d.place == placeSlot && c.fl.takeSettling() {
		var s slot
		next, s = c.fl.slotDone(d.slot, true)
		d.place = placeSettling
		if next != nil {
			next.place, next.slot = placeSlot, s
		}
	}
	if !d.lease.deleteAsync(after) {
		// A call of the lease is in flight (a renewal): this delete
		// waits for SQS, and the next message must not wait with it.
		if next != nil {
			c.start(next)
			next = nil
		}
		after(&d.lease, d.lease.Delete(c.settleCtx))
	} // else after runs when SQS answers
	return next
}

// deleted finishes a succeeded handler's message once its delete returned
// err, logging a failure.
func (c *Consumer) deleted(l *Lease, err error) {
	d := l.holderOf().(*delivery)
	if err != nil {
		c.log(slog.LevelError, "sqsconsumer: handler succeeded but the message could not be deleted; it will be delivered again", "message_id", d.msg.ID, "error", err)
	}
	c.finish(d, err == nil, true, nil)
}

// movedDeleted finishes a message moved to the dead-letter queue once its
// delete from the source returned err; handlerErr is the handler's
// Permanent error, for EventDone.
func (c *Consumer) movedDeleted(d *delivery, err, handlerErr error) {
	if err != nil {
		c.log(slog.LevelError, "sqsconsumer: message moved to the dead-letter queue but not deleted from the source; it will be delivered again", "message_id", d.msg.ID, "error", err)
	}
	c.finish(d, err == nil, true, handlerErr)
}

// finish ends a settled delivery: it stops the lease, records the figures,
// takes the delivery out of the flow (freeing its slot), and moves its
// FIFO group on: the next of the group starts when this one was done (its
// message deleted), and the rest of the group goes back when it was not.
func (c *Consumer) finish(d *delivery, done, ran bool, doneErr error) {
	defer c.handlers.done()
	d.lease.Stop()
	if ran {
		c.stats.settled(time.Since(d.lease.arrivedAt()), d.lease.renewalCount())
	} else {
		c.stats.unstarted()
	}
	c.observe(EventDone, d, doneErr)
	c.held.remove(d)
	next, back := c.order.leave(d, done)
	c.leaveFlow(d, ran)
	c.returnLater(back)
	switch {
	case next == nil:
	case c.batch != nil:
		c.batch.advance(next) // it holds a slot or waits for one; its batch may take it now
	case !c.enqueue(next):
		c.handBack([]*delivery{next})
	}
}

// leaveFlow takes d out of the flow's counts; a slot it frees goes to the
// next ready message, which starts.
func (c *Consumer) leaveFlow(d *delivery, ran bool) {
	switch d.place {
	case placeWaiting:
		c.fl.leaveWaiting()
	case placeSlot:
		if next, s := c.fl.slotDone(d.slot, ran); next != nil {
			next.place, next.slot = placeSlot, s
			c.start(next)
		}
	case placeSettling:
		c.fl.leaveSettling()
	}
	d.place = placeOut
}

// handBack hands ds back to SQS without running them (visibility 0) and
// waits for that: messages the caller holds that have not started (the
// ready messages at a pause, a shutdown or an opening of the breaker, the
// messages of a receive that came back while none was taken). Each
// release runs on a goroutine of its own, so that they coalesce into few
// calls. The later messages of their FIFO groups held here go back too
// (returnLater), and nothing of those groups starts until every hand-back
// is answered.
func (c *Consumer) handBack(ds []*delivery) {
	if len(ds) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, d := range ds {
		later := c.order.handBack(d)
		wg.Go(func() { c.settleAndStart(d, nil, false) })
		c.returnLater(later)
	}
	wg.Wait()
}

// returnLater hands back the later messages of a FIFO group whose earlier
// one will not be done: in single-message mode they wait, unstarted,
// behind it, and are released, each on a worker goroutine; a Batch
// handler's members are failed with errEarlierFailed by the batcher.
func (c *Consumer) returnLater(ds []*delivery) {
	if len(ds) == 0 {
		return
	}
	if c.batch != nil {
		c.batch.poison(ds)
		return
	}
	for _, d := range ds {
		c.goSettle(func() { c.settleAndStart(d, nil, false) })
	}
}

// unstarted is what the Consumer holds but has not started, to be handed
// back at a pause, a shutdown or an opening of the breaker: the ready
// messages (taken from the flow by the caller) and, in single-message
// mode, the FIFO messages waiting behind their group's first, which it
// marks as handed back. (A Batch handler's members that hold slots stay
// with their batches.)
func (c *Consumer) unstarted(ready []*delivery) []*delivery {
	if c.batch != nil {
		return ready
	}
	return append(c.order.tails(), ready...)
}

// backoff is WithBackoff's function for receiveCount. One that panics is
// a bug in the caller's code, not in the message: the panic is logged and
// DefaultBackoff used instead, rather than ending the process from a
// library goroutine.
func (c *Consumer) backoff(receiveCount int) (d time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			c.log(slog.LevelError, "sqsconsumer: the WithBackoff function panicked; using DefaultBackoff", "panic", fmt.Sprint(v))
			d = DefaultBackoff(receiveCount)
		}
	}()
	return c.s.backoff(receiveCount)
}

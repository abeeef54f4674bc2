package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sqskit/sqsconsumer/internal/broken"
)

// Running a batch: a due batch is sent (sendLocked), its call's context
// follows its members' (watchLocked), the BatchHandler runs (run), its
// result becomes one result per member (results, with the FIFO group
// rule), and each member goes to the settle door (settleMember).

// sendLocked takes bt for its runner: members whose context has ended
// leave it, the rest are fixed and running, and ctx is the context of the
// call of h. ok is false when there is nothing to send: another runner
// took it, no member is left, or the shutdown began (its members then
// leave with errGatheringAtShutdown).
func (b *batcher) sendLocked(bt *hbatch) (ctx context.Context, ok bool) {
	if bt.sent {
		return nil, false
	}
	if b.stopping {
		for _, mb := range slices.Clone(bt.members) {
			b.finishLocked(mb, errGatheringAtShutdown)
		}
	}
	if slices.ContainsFunc(bt.members, func(mb *member) bool { return mb.ctx.Err() != nil }) {
		for _, mb := range slices.Clone(bt.members) {
			if mb.ctx.Err() != nil {
				b.finishLocked(mb, context.Cause(mb.ctx))
			}
		}
	}
	bt.sent = true
	if b.forming == bt {
		b.forming = nil
	}
	if bt.timer != nil {
		bt.timer.Stop()
	}
	if len(bt.members) == 0 {
		return nil, false
	}
	for _, mb := range bt.members {
		mb.running = true
		if mb.unwatch != nil {
			mb.unwatch() // the call's watch takes over (see ended)
			mb.unwatch = nil
		}
	}
	bt.parent = batchCtx{Context: b.base, ev: b.ev, size: len(bt.members)}
	ctx, bt.cancel = context.WithCancelCause(&bt.parent)
	b.watchLocked(bt)
	return ctx, true
}

// watchLocked makes the call's context of bt follow its members': it is
// cancelled when a member's context ends for a reason that concerns the
// whole call (the shutdown's ErrShutdown, a handler timeout) or when
// every member's has ended. One member is watched at a time, the one
// whose context has the earliest deadline (the first to time out), or
// the first still live: a shutdown ends them all at once, and when the
// watched one ends otherwise the watch moves on to one still live.
func (b *batcher) watchLocked(bt *hbatch) {
	var w *member
	var wd time.Time
	wok := false
	for _, mb := range bt.members {
		if mb.ctx.Err() != nil {
			bt.lastCause = context.Cause(mb.ctx)
			if wholeCall(bt.lastCause) {
				bt.stopWatch = nil
				bt.cancel(bt.lastCause)
				return
			}
			continue
		}
		d, ok := mb.ctx.Deadline()
		if w == nil || ok && (!wok || d.Before(wd)) {
			w, wd, wok = mb, d, ok
		}
	}
	if w == nil {
		bt.stopWatch = nil
		bt.cancel(bt.lastCause)
		return
	}
	bt.stopWatch = context.AfterFunc(w.ctx, func() { b.watched(bt, w) })
}

// watched takes the end of the context of bt's watched member w.
func (b *batcher) watched(bt *hbatch, w *member) {
	cause := context.Cause(w.ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case bt.over:
	case wholeCall(cause):
		bt.cancel(cause)
	default:
		bt.lastCause = cause
		b.watchLocked(bt)
	}
}

// wholeCall reports whether a member's context ended for a reason that
// ends the whole call: the shutdown, or a handler timeout.
func wholeCall(cause error) bool {
	return errors.Is(cause, ErrShutdown) || errors.Is(cause, context.DeadlineExceeded)
}

// ended takes the end of the context of a joined member that is not
// running: it leaves its batch, failed with its context's cause (on FIFO
// queues the group's later members that have not run fail with it at
// once, earlierFailed). A running member's end is the call's watch's
// business (watchLocked).
func (b *batcher) ended(mb *member) {
	cause := context.Cause(mb.ctx)
	b.mu.Lock()
	if !mb.running {
		b.finishLocked(mb, cause)
	}
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
}

// runDirect sends bt, when direct, and settles its members: successes
// here (their deletes are batched without waiting), failures, and
// successes whose delete must wait for a call of their lease in flight,
// each on a goroutine of its own, since a release (or such a delete) waits
// for SQS. Then it returns the
// next batch that fell due meanwhile (pending), typically the one its own
// settling filled, for its worker to send next (serve): a steady stream of
// batches needs no goroutine hand-off at all.
func (b *batcher) runDirect(bt *hbatch) (next *hbatch, ok bool) {
	b.mu.Lock()
	ctx, sent := b.sendLocked(bt)
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
	if sent {
		b.run(bt, ctx, nil)
		b.mu.Lock()
		b.settlers++
		b.mu.Unlock()
		for _, mb := range bt.members {
			// A success whose lease has a call in flight (a renewal) is
			// deleted only once that call is answered: on a goroutine of
			// its own, like a failure, so that the members after it do
			// not wait for it and their deletes go out together.
			if mb.err == nil && !mb.d.lease.callInFlight() {
				b.settleMember(mb)
			} else {
				b.host.goSettle(func() { b.settleMember(mb) })
			}
		}
		b.mu.Lock()
		b.settlers--
	} else {
		b.mu.Lock()
	}
	var rest []*hbatch
	if len(b.pending) > 0 {
		next = b.pending[0]
		b.pending = b.pending[1:]
		if b.settlers == 0 {
			rest, b.pending = b.pending, nil // nobody else will send them
		}
	}
	b.mu.Unlock()
	for _, r := range rest {
		b.host.startBatch(r)
	}
	return next, next != nil
}

// settleMember settles a finished direct member, as Consumer.handle does
// once its handler returned.
func (b *batcher) settleMember(mb *member) {
	d := mb.d
	if mb.unwatch != nil {
		mb.unwatch()
	}
	d.inHandler.Store(false)
	b.host.settleAndStart(d, mb.err, true)
	if mb.cancel != nil {
		mb.cancel()
	}
}

// run calls h for bt, sent by sendLocked, and sets every member's result;
// self is the member whose goroutine runs it, if any (it needs no token).
func (b *batcher) run(bt *hbatch, ctx context.Context, self *member) {
	members := bt.members
	msgs := make([]*Message, len(members))
	for i, mb := range members {
		msgs[i] = mb.m
	}
	begun := time.Now()
	err := b.call(ctx, msgs)
	if errors.Is(context.Cause(ctx), ErrShutdown) && !broken.Is(broken.BatchShutdownBackoff) {
		// The shutdown cancels the held messages one at a time, and the
		// call ended with the first member it reached: the others were
		// cut by it as much, whether or not it has reached them yet. Each
		// member's context takes the shutdown's cause, so that each
		// settles as a message the shutdown cut (released at once, no
		// breaker failure), whatever the order of the cancels.
		for _, mb := range members {
			if mb.d != nil {
				mb.d.lease.abort(ErrShutdown)
			}
		}
	}
	results, err := b.results(members, err)
	b.ev.emitBatch(msgs, begun, err)

	b.mu.Lock()
	bt.over = true
	if bt.stopWatch != nil {
		bt.stopWatch()
	}
	// In order: on a FIFO queue a member whose group the order marks to
	// be handed back (an earlier member, in this batch or before it,
	// failed, lost its lease or was released by h itself; or it was
	// handed back meanwhile) does not count as done, whatever h said of
	// it; a member that fails marks its group at once, for the members
	// after it (groupFailedLocked).
	for i, mb := range members {
		var rerr error
		if results != nil {
			rerr = results[i]
		}
		switch d := mb.d; {
		case d == nil:
		case b.reg.returning(d):
			rerr = earlierFailed
		case rerr != nil || d.lease.undone():
			b.groupFailedLocked(d)
		}
		mb.finished, mb.err = true, rerr
		if mb.wake != nil && mb != self {
			signal(mb.wake)
		}
	}
	// A member that failed here failed its group's later members that
	// have joined and not run (groupFailedLocked): when direct they wait
	// in b.finished to be settled, like any member finished under b.mu.
	if broken.Is(broken.FIFOBatchShutdownHang) {
		b.mu.Unlock()
		bt.cancel(context.Canceled)
		return
	}
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
	bt.cancel(context.Canceled)
}

// results turns h's error into one per member; nil when all succeeded.
func (b *batcher) results(members []*member, err error) ([]error, error) {
	if err == nil {
		return nil, nil
	}
	out := make([]error, len(members))
	var bf BatchFailures
	switch {
	case errors.As(err, &bf):
		index := make(map[string]int, len(members))
		for i, mb := range members {
			index[mb.m.ID] = i
		}
		for id, e := range bf {
			i, ok := index[id]
			if !ok {
				err = fmt.Errorf("sqsconsumer: the batch handler reported message %q, which is not in its batch; failing the whole batch: %w", id, err)
				for i := range out {
					out[i] = err
				}
				return out, err
			}
			out[i] = e
		}
		return out, err
	}
	for i := range out {
		out[i] = err
	}
	return out, err
}

// call runs h, turning a panic into a *PanicError (protect), or into
// the PanicPolicy's error (for the whole batch) when one is set.
func (b *batcher) call(ctx context.Context, msgs []*Message) error {
	err := protect(func() error { return b.h(ctx, msgs) })
	if pe, ok := err.(*PanicError); ok && pe.recovered {
		if b.panicPolicy != nil {
			return police(ctx, nil, pe, b.panicPolicy, b.ev)
		}
		b.host.log(slog.LevelError, "sqsconsumer: batch handler panicked; the whole batch failed", "messages", len(msgs), "panic", fmt.Sprint(pe.Value), "at", pe.at)
	}
	return err
}

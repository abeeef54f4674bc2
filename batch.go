package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// BatchHandler processes several messages at once (one bulk INSERT, one
// downstream call for many records). It returns nil when every message
// succeeded, a BatchFailures naming the messages that failed (each with its
// own error, which RetryAfter and Permanent may wrap), or any other error to
// fail them all. A panic fails them all.
//
// ctx is cancelled when the Consumer stops waiting for the batch at shutdown
// (cause ErrShutdown), when a WithHandlerTimeout of one of its messages runs
// out, or when every message's lease is gone. A single message whose lease
// is lost, or expired, while the batch runs has a non-nil m.Lease.Err(); it
// is never deleted by this worker, whatever the handler reports.
//
// The slice and its order belong to the call: on FIFO queues the messages
// of one group appear in the order SQS delivered them. A BatchHandler is
// called from many goroutines at once.
type BatchHandler func(ctx context.Context, msgs []*Message) error

// BatchFailures is the error a BatchHandler returns when some of its
// messages failed: message ID (Message.ID) to that message's error. A nil
// entry counts as a success; a message not named succeeded. An ID that is
// not in the batch is a bug in the handler and fails the whole batch, so
// no message is deleted on a report nobody can trust. errors.As finds a
// BatchFailures that another error wraps.
type BatchFailures map[string]error

// Error summarises the failures, in message ID order.
func (f BatchFailures) Error() string {
	var b strings.Builder
	n := 0
	for _, id := range slices.Sorted(maps.Keys(f)) {
		if f[id] == nil {
			continue
		}
		if n > 0 {
			b.WriteString("; ")
		}
		n++
		fmt.Fprintf(&b, "%s: %v", id, f[id])
	}
	return fmt.Sprintf("sqsconsumer: %d message(s) of the batch failed: %s", n, b.String())
}

// Batch turns a BatchHandler into a Handler for New: each message runs
// through the Consumer's middleware on its own (so NewIdempotent's middleware skips a
// duplicate, which then counts as succeeded, and ties each claim to its own
// lease), then joins a batch; h gets up to size messages, gathered for at
// most window after the first one joined. Each message keeps its lease and
// heartbeat and is settled on its own, exactly as after a single Handler:
// a success is deleted (batched), a failure is released after the backoff
// for its receive count or its RetryAfter delay. A message whose lease
// ends, or whose WithHandlerTimeout runs out, while it gathers leaves the
// batch with that error, as if its handler had returned it (without
// middleware: when its batch is sent, or at once if the batch has
// gathered for 100 ms or more). The Consumer reads at least one batch ahead (up to
// WithMaxReadAhead), so that a batch that returns is followed by a full
// one.
//
// On FIFO queues a batch may hold several messages of a group, in order;
// a group's later messages join no batch while an earlier one is in a
// batch that runs or has not finished its middleware. When a message of a
// group fails (in the batch, in middleware, or by losing its lease) every
// later message of that group this Consumer holds fails too, without
// running, and is released at once (RetryAfter 0): SQS then hands the
// group out again from the failed message.
//
// When the Consumer's shutdown begins, no batch forms any more: messages
// still gathering are handed back at once (visibility 0, their result
// ErrShutdown), like messages that never started; batches already sent
// run on under the shutdown budget. At its end the call's context is
// cancelled (cause ErrShutdown), and every message of the batch that did
// not succeed is released at once (visibility 0), not after its backoff,
// and is no breaker failure, as for a single handler the shutdown cut.
//
// size is 1 to 10,000 and must not exceed the Consumer's concurrency (each
// message in a batch holds a handler slot); window is 0 (send a batch as
// soon as its first message joined, with whatever joined meanwhile) to 5
// minutes. Observers see each message's own events and one EventBatch per
// call of h. The Handler belongs to one Consumer: New refuses it a second
// time. Bad arguments return an error wrapping ErrInvalidOption.
func Batch(h BatchHandler, size int, window time.Duration) (Handler, error) {
	var errs []error
	if h == nil {
		errs = append(errs, fmt.Errorf("%w: Batch: handler is nil", ErrInvalidOption))
	}
	if size < 1 || size > maxBatchHandlerSize {
		errs = append(errs, fmt.Errorf("%w: Batch: size %d: must be from 1 to %d", ErrInvalidOption, size, maxBatchHandlerSize))
	}
	if window < 0 || window > maxBatchWindow {
		errs = append(errs, fmt.Errorf("%w: Batch: window %v: must be from 0 to %v", ErrInvalidOption, window, maxBatchWindow))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &batcher{h: h, size: size, window: window}, nil
}

const (
	maxBatchHandlerSize = 10_000          // Lambda's largest batch for a standard queue
	maxBatchWindow      = 5 * time.Minute // Lambda's largest batching window
)

// earlierFailed is the result of a batch member that must not count
// because an earlier message of its FIFO group failed (errEarlierFailed):
// it is released at once.
var earlierFailed = RetryAfter(errEarlierFailed, 0)

// errGatheringAtShutdown is the result of a message still gathering for a
// batch when the Consumer's shutdown began: its batch handler never ran,
// so, like any unstarted message, it is handed back to SQS at once
// (visibility 0) rather than waiting out the shutdown budget.
var errGatheringAtShutdown = RetryAfter(fmt.Errorf("%w: still gathering for a batch", ErrShutdown), 0)

// shutdown stops forming batches: the members of the forming batch leave
// it with errGatheringAtShutdown, and so does any message that joins
// later or whose batch has not been sent yet. Batches already sent run to
// the end under the shutdown budget.
func (b *batcher) shutdown() {
	b.mu.Lock()
	b.stopping = true
	if bt := b.forming; bt != nil {
		for _, mb := range slices.Clone(bt.members) {
			b.finishLocked(mb, errGatheringAtShutdown)
		}
	}
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
}

// batcher is the Handler Batch returns. Messages join the forming batch;
// one goroutine runs h for a batch that is due (full, or its window ran
// out) and hands each member its result.
//
// A message reaches the batcher in one of two ways. With middleware, the
// Consumer's worker for the message runs the middleware, which calls
// HandleMessage: the message joins and its goroutine parks until its
// result is in. The member whose joining makes a batch due sends it at
// once on its own goroutine; a batch that falls due otherwise (its window
// ran out, an earlier FIFO member left) wakes its members, and the first
// to look sends it. Without middleware (direct) there is nothing to run
// per message before it joins: the Consumer hands a message to join when
// it gets its handler slot, with no goroutine of its own, and one
// Consumer worker runs each due batch and settles its members: one
// goroutine hand-off for a batch instead of two for each message.
//
// The contexts of the members are watched so that a member whose context
// ends (its lease is lost, its handler timeout runs out) leaves its batch
// before it is sent: by the member's own goroutine, or, when direct, at
// the latest when the batch is sent, and at once after it has gathered for
// watchGatheringAfter. Once sent, the call's context follows one member's
// context at a time (watchLocked).
//
// On FIFO queues the run's registry keeps each group's order: a
// member joins the forming batch only behind every earlier message of its
// group (advanceLocked), and a member that leaves without running takes
// the later members of its group along (finishLocked).
type batcher struct {
	h      BatchHandler
	size   int
	window time.Duration

	owned  atomic.Bool     // set by New: the batcher has its Consumer
	direct bool            // set by New: no middleware, see join
	host   batchHost       // the Consumer's run, from bind at Run
	reg    *registry       // the run's registry: FIFO group order
	ev     *eventSink      // the Consumer's events
	base   context.Context // the parent of each call's context (it carries Draining)

	// panicPolicy is the Consumer's WithPanicPolicy, nil for none; set by
	// New.
	panicPolicy func(context.Context, *Message, *PanicError) error

	// mu guards the fields below, the batches (hbatch) and the members
	// (member, and delivery.bm). Lock order: mu before the registry's
	// and a Lease's locks.
	mu sync.Mutex
	// forming is the batch messages join: from its first member until it
	// is sent or full. Once due (its window ran out, or there is none) it
	// still takes the messages that join before its runner sends it.
	forming *hbatch
	// stopping is set when the Consumer's shutdown begins: no batch is
	// formed or sent any more, and messages still gathering leave at once.
	stopping bool
	// Work found under mu and done once it is released (takeLocked,
	// handOff), when direct: batches that fell due and need a runner, and
	// members that finished without running and need settling.
	due      []*hbatch
	finished []*member
	// settlers counts the Consumer workers settling the members of their
	// batch (runDirect); while there is one, a batch that falls due waits
	// in pending for it rather than waking another worker: settling frees
	// the slots that fill the next batch, and the worker that settles
	// sends it next.
	settlers int
	pending  []*hbatch
}

// watchGatheringAfter is how long a batch gathers, when direct, before
// the context of each of its members is watched (a context.AfterFunc
// each): a member whose context ends then leaves at once. Until then, and
// in a batch sent sooner, it leaves when the batch is sent. An AfterFunc
// per message cost about 4 % of a Consumer's CPU per message (round trip
// 0, BenchmarkBatchVsSingle), for batches that fill in a few hundred
// microseconds at that rate.
const watchGatheringAfter = 100 * time.Millisecond

// hbatch is a set of members sent to h together.
type hbatch struct {
	members []*member
	closed  bool // due: its window ran out, or it is full
	sent    bool // taken by its runner: its members are fixed
	// timer ends its window; when direct it first starts watching its
	// members (watching) after watchGatheringAfter.
	timer    *time.Timer
	watching bool
	// From the send: the call's context's cancel; the watch on one
	// member's context (watchLocked) and the cause of the latest member
	// context that ended; over once h returned.
	cancel    context.CancelCauseFunc
	stopWatch func() bool
	lastCause error
	over      bool
	// parent is the call's context's parent, set at the send: it answers
	// Value(ctxKey{}) for Logger.
	parent batchCtx
}

// batchCtx is the parent of a BatchHandler call's context: background,
// answering Value(ctxKey{}) with itself, what Logger needs to log about
// the call. It lives in the hbatch, so it costs no allocation.
type batchCtx struct {
	context.Context
	ev   *eventSink // the Consumer's: its logger and queue URL
	size int        // the messages of the call
}

// Value answers ctxKey with c, and asks the parent otherwise.
func (c *batchCtx) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// member is one message's place in the batcher, from when it joins.
type member struct {
	m        *Message        // the message as the batch handler gets it (its middleware's)
	d        *delivery       // the Consumer's delivery of it; nil outside a Consumer
	ctx      context.Context // the handler's context
	joined   bool            // reached the batcher (its middleware ran)
	b        *hbatch         // the batch it is in, nil while waiting
	running  bool            // its batch was sent
	finished bool            // result set
	err      error
	// wake, for a member whose goroutine waits in HandleMessage, gets a
	// token when its result is in or its batch falls due; nil when direct.
	wake chan struct{}
	// unwatch stops the AfterFunc watching a direct member's context
	// while it gathers; nil if none.
	unwatch func() bool
	cancel  context.CancelFunc // a direct member's WithHandlerTimeout
}

// attach gives b to a Consumer; false if one already has it. direct: the
// Consumer has no middleware, so messages join without a goroutine of
// their own; policy: its WithPanicPolicy, nil for none.
func (b *batcher) attach(direct bool, policy func(context.Context, *Message, *PanicError) error) bool {
	if !b.owned.CompareAndSwap(false, true) {
		return false
	}
	b.direct, b.panicPolicy = direct, policy
	return true
}

// batchHost is what the batcher needs of the run it serves (run.go,
// worker.go, settle.go): its handler slots' workers and its settle door.
type batchHost interface {
	// settleAndStart settles d (its handler's result err, ran: it ran)
	// and starts the message its freed slot took, if any.
	settleAndStart(d *delivery, err error, ran bool)
	// goSettle runs settle on a worker goroutine of the run's.
	goSettle(settle func())
	// startBatch hands a due batch to a worker (direct only).
	startBatch(bt *hbatch)
	// startHandler marks d's handler as called and returns its context.
	startHandler(d *delivery) (context.Context, context.CancelFunc)
	// shuttingDown reports whether the shutdown has begun.
	shuttingDown() bool
	log(level slog.Level, msg string, args ...any)
}

// bind gives b to the run of its Consumer, before the run's first
// receive: host, its registry, its events and the parent of each call's
// context (never cancelled; it carries the run's drain signal).
func (b *batcher) bind(host batchHost, reg *registry, ev *eventSink, base context.Context) {
	b.host, b.reg, b.ev, b.base = host, reg, ev, base
}

// maxSize is the most messages a batch holds (Batch's size).
func (b *batcher) maxSize() int { return b.size }

// joinsDirectly reports whether messages join without a goroutine of
// their own (no middleware: see join).
func (b *batcher) joinsDirectly() bool { return b.direct }

// laterFailed fails the members among ds, later messages of a FIFO group
// that the registry's order already marks to be handed back (an earlier
// one will not be done), as laterFailLocked does.
func (b *batcher) laterFailed(ds []*delivery) {
	b.mu.Lock()
	b.laterFailLocked(ds)
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
}

// advance lets the joined members of d's FIFO group into the forming
// batch as far as their order allows (an earlier message of the group
// left).
func (b *batcher) advance(d *delivery) {
	b.mu.Lock()
	b.advanceLocked(d)
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
}

// finishLocked sets the result of a member that is not running and takes
// it out of its batch, and tells it: a waiting goroutine by its token, a
// direct member that has joined by queueing it to be settled (one that
// has not joined yet is settled when it joins). Every result here is a
// failure to run: on a FIFO queue its group fails from it on
// (groupFailedLocked).
func (b *batcher) finishLocked(mb *member, err error) {
	if mb.finished {
		return
	}
	if mb.d != nil {
		defer b.groupFailedLocked(mb.d)
	}
	if bt := mb.b; bt != nil && !bt.sent {
		bt.members = slices.DeleteFunc(bt.members, func(x *member) bool { return x == mb })
		if len(bt.members) == 0 {
			// Nothing left to send; a runner it was handed to finds it empty.
			bt.closed = true
			if bt.timer != nil {
				bt.timer.Stop()
			}
			if b.forming == bt {
				b.forming = nil
			}
		}
		mb.b = nil
	}
	mb.finished, mb.err = true, err
	switch {
	case mb.wake != nil:
		signal(mb.wake)
	case b.direct && mb.joined:
		b.finished = append(b.finished, mb)
	}
}

// signal puts a token in ch unless one is there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// The one FIFO failure path of a Batch handler: when a member fails (its
// batch handler's result, a failure to run, its lease ending), its group
// is marked in the registry's order at that moment (groupFailedLocked):
// it and every later message of the group held here are to be handed
// back. Every later member's fate then comes from the order: one that has
// joined and not run leaves its batch at once (laterFailLocked); one in a
// batch that runs gets earlierFailed when the batch returns (run); one
// that joins later fails as it joins (join). A message not done for
// another reason (its delete failed) marks its group when it leaves the
// registry, and its later members fail the same way (laterFailed).

// groupFailedLocked marks d's FIFO group as failing from d on, and fails
// the later members that have joined and not run (nothing on a standard
// queue).
func (b *batcher) groupFailedLocked(d *delivery) {
	b.laterFailLocked(b.reg.handBack(d))
}

// laterFailLocked fails with earlierFailed the members among ds, already
// marked to be handed back, that have joined and not run; and hands back
// those parked behind an older delivery of their own message (they hold
// no slot and will not join).
func (b *batcher) laterFailLocked(ds []*delivery) {
	for _, d := range ds {
		if mb := d.bm; mb != nil && mb.joined && !mb.running {
			b.finishLocked(mb, earlierFailed)
		} else if d.parked.Swap(false) {
			h := b.host
			h.goSettle(func() { h.settleAndStart(d, nil, false) })
		}
	}
}

// advanceLocked admits the joined members of d's FIFO group to the
// forming batch, in order, as far as every earlier member is in that batch
// too.
func (b *batcher) advanceLocked(d *delivery) {
	for _, x := range b.reg.group(d) {
		mb := x.bm
		if mb == nil || !mb.joined || mb.running || mb.finished {
			return // an earlier member is not in the forming batch
		}
		if mb.b == nil {
			b.admitLocked(mb)
		}
		if mb.b == nil || mb.b != b.forming {
			return // its batch was sent or filled: later ones wait for it
		}
	}
}

// admitLocked adds mb to the forming batch, starting one if none is.
func (b *batcher) admitLocked(mb *member) {
	if b.stopping {
		b.finishLocked(mb, errGatheringAtShutdown) // no batch forms after the shutdown began
		return
	}
	bt := b.forming
	if bt == nil {
		bt = &hbatch{members: make([]*member, 0, min(b.size, 16))}
		b.forming = bt
		switch {
		case b.direct && b.window > watchGatheringAfter:
			bt.timer = time.AfterFunc(watchGatheringAfter, func() { b.expire(bt) })
		case b.window > 0:
			bt.timer = time.AfterFunc(b.window, func() { b.expire(bt) })
		}
	}
	bt.members = append(bt.members, mb)
	mb.b = bt
	if bt.watching {
		b.watchMemberLocked(mb)
	}
	if bt.closed && mb.wake != nil {
		// Joins a batch already due that no member sent yet: it may have
		// to send it (the members woken at its closing may all leave).
		signal(mb.wake)
	}
	if len(bt.members) >= b.size {
		b.forming = nil
		b.closeLocked(bt)
	} else if b.window == 0 {
		b.closeLocked(bt) // due at once; it takes members until it is sent
	}
}

// watchMemberLocked watches a gathering direct member's context: when it
// ends, the member leaves (ended).
func (b *batcher) watchMemberLocked(mb *member) {
	if mb.unwatch == nil {
		mb.unwatch = context.AfterFunc(mb.ctx, func() { b.ended(mb) })
	}
}

// expire makes bt due when its window runs out; when direct and the
// window is longer than watchGatheringAfter it is first called then, and
// starts watching the members' contexts.
func (b *batcher) expire(bt *hbatch) {
	b.mu.Lock()
	switch {
	case bt.sent || len(bt.members) == 0:
	case b.direct && !bt.watching && b.window > watchGatheringAfter:
		bt.watching = true
		for _, mb := range bt.members {
			b.watchMemberLocked(mb)
		}
		bt.timer.Reset(b.window - watchGatheringAfter)
	default:
		b.closeLocked(bt)
	}
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
}

// closeLocked makes bt due and has it run: when direct, by a Consumer
// worker (handOff); otherwise its members are woken and the first to look
// sends it, unless the member that made it due sends it at once.
func (b *batcher) closeLocked(bt *hbatch) {
	if bt.closed {
		return
	}
	bt.closed = true
	if bt.timer != nil {
		bt.timer.Stop()
	}
	b.due = append(b.due, bt)
}

// batchWork is what takeLocked found to do once b.mu is released.
type batchWork struct {
	due      []*hbatch // when direct: to run on a Consumer worker
	finished []*member // when direct: to settle
}

// takeLocked takes the work found under b.mu. Members waiting in
// HandleMessage for a batch that fell due (and that no member sent
// meanwhile) are woken here.
func (b *batcher) takeLocked() batchWork {
	if !b.direct {
		for _, bt := range b.due {
			if !bt.sent {
				for _, mb := range bt.members {
					signal(mb.wake)
				}
			}
		}
		b.due = b.due[:0]
		return batchWork{}
	}
	if b.settlers > 0 {
		b.pending = append(b.pending, b.due...)
		b.due = b.due[:0]
	}
	w := batchWork{due: b.due, finished: b.finished}
	b.due, b.finished = nil, nil
	return w
}

// handOff does the work takeLocked found, with b.mu released.
func (b *batcher) handOff(w batchWork) {
	for _, bt := range w.due {
		b.host.startBatch(bt)
	}
	for _, mb := range w.finished {
		b.host.goSettle(func() { b.settleMember(mb) })
	}
}

// HandleMessage joins m to a batch and returns its result in the batch.
// It is the way in with middleware; see batcher.
func (b *batcher) HandleMessage(ctx context.Context, m *Message) error {
	var d *delivery
	if m.Lease != nil {
		d, _ = m.Lease.holderOf().(*delivery)
	}
	mb := &member{m: m, d: d, ctx: ctx, joined: true, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	b.enterLocked(mb)
	done := ctx.Done()
	for {
		if mb.finished {
			err := mb.err
			b.mu.Unlock()
			return err
		}
		var callCtx context.Context
		bt := mb.b
		if bt != nil && bt.closed {
			callCtx, _ = b.sendLocked(bt)
		}
		b.takeLocked()
		b.mu.Unlock()
		if callCtx != nil {
			b.run(bt, callCtx, mb)
		} else {
			select {
			case <-mb.wake:
			case <-done:
				done = nil
				b.ended(mb)
			}
		}
		b.mu.Lock()
	}
}

// enterLocked takes a member that has joined: into the forming batch, in
// its FIFO group's order, or out at once when the shutdown has begun or
// an earlier message of its group will not be done.
func (b *batcher) enterLocked(mb *member) {
	if mb.d != nil {
		mb.d.bm = mb
	}
	switch {
	case b.stopping:
		b.finishLocked(mb, errGatheringAtShutdown)
	case mb.d != nil && b.reg.returning(mb.d):
		b.finishLocked(mb, earlierFailed)
	case mb.d != nil && b.reg.ordered(mb.d):
		b.advanceLocked(mb.d)
	default:
		b.admitLocked(mb)
	}
}

// join starts d, which holds a handler slot, when direct (no middleware):
// it joins a batch with no goroutine of its own. Like Consumer.handle it
// marks the handler's start, and a Consumer that is stopping hands it
// back instead.
func (b *batcher) join(d *delivery) {
	h := b.host
	if h.shuttingDown() {
		h.goSettle(func() { h.settleAndStart(d, nil, false) })
		return
	}
	ctx, cancel := h.startHandler(d)
	mb := &member{m: &d.msg, d: d, ctx: ctx, cancel: cancel, joined: true}
	b.mu.Lock()
	b.enterLocked(mb)
	w := b.takeLocked()
	b.mu.Unlock()
	b.handOff(w)
}

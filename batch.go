package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
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
// for its receive count or its RetryAfter delay.
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
// run on under the shutdown budget.
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
	return &batcher{h: h, size: size, window: window, fifo: map[*Lease]*member{}, groups: map[string][]*member{}}, nil
}

const (
	maxBatchHandlerSize = 10_000          // Lambda's largest batch for a standard queue
	maxBatchWindow      = 5 * time.Minute // Lambda's largest batching window
)

// errEarlierFailed is the error of a FIFO message that did not run because
// an earlier message of its group failed: it is released at once.
var errEarlierFailed = errors.New("sqsconsumer: an earlier message of its FIFO group failed; released without running to keep the group's order")

// errGatheringAtShutdown is the result of a message still gathering for a
// batch when the Consumer's shutdown began: its batch handler never ran,
// so, like any unstarted message, it is handed back to SQS at once
// (visibility 0) rather than waiting out the shutdown budget.
var errGatheringAtShutdown = RetryAfter(fmt.Errorf("%w: still gathering for a batch", ErrShutdown), 0)

// shutdown stops forming batches: the members of the forming batch leave
// it with errGatheringAtShutdown, and so does any message that joins
// later. Batches already sent run to the end under the shutdown budget.
func (b *batcher) shutdown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopping = true
	if bt := b.forming; bt != nil {
		for _, mb := range slices.Clone(bt.members) {
			b.finishLocked(mb, errGatheringAtShutdown)
		}
		b.closeLocked(bt)
	}
}

// batcher is the Handler Batch returns: HandleMessage joins the message to
// a forming batch and waits for its result. One goroutine among the
// members of a batch (the first to see it due) runs h for all of them.
type batcher struct {
	h      BatchHandler
	size   int
	window time.Duration

	owner    atomic.Pointer[Consumer] // set by New
	observer Observer
	logger   *slog.Logger
	queueURL string

	mu      sync.Mutex
	forming *hbatch
	// stopping is set when the Consumer's shutdown begins: no batch is
	// formed any more, and messages still gathering leave at once.
	stopping bool
	// FIFO: each held message of a group, in delivery order, from
	// dispatch until its lease ends.
	fifo   map[*Lease]*member
	groups map[string][]*member
}

// hbatch is a set of members sent to h together.
type hbatch struct {
	members []*member
	due     chan struct{} // closed when the batch should be sent
	closed  bool
	sent    bool
	timer   *time.Timer
}

// member is one message's place in the batcher.
type member struct {
	m        *Message
	ctx      context.Context // the handler's context, once joined
	joined   bool            // reached the batcher (its middleware ran)
	b        *hbatch         // the batch it is in, nil while waiting
	poisoned bool            // an earlier message of its group failed
	running  bool            // its batch was sent
	finished bool            // result set, done closed
	err      error
	done     chan struct{}
	wake     chan struct{} // gets a token when it is admitted to a batch
}

func newMember(m *Message) *member {
	return &member{m: m, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// attach binds b to the Consumer c; false if another has it.
func (b *batcher) attach(c *Consumer) bool {
	if !b.owner.CompareAndSwap(nil, c) {
		return false
	}
	b.observer, b.logger, b.queueURL = c.s.observer, c.s.logger, c.queueURL
	return true
}

// enter records a FIFO message at dispatch, in delivery order. Its
// member leaves the group when the lease ends (context cancelled).
func (b *batcher) enter(l *Lease) {
	mb := newMember(l.msg)
	b.mu.Lock()
	b.fifo[l] = mb
	b.groups[l.msg.GroupID] = append(b.groups[l.msg.GroupID], mb)
	b.mu.Unlock()
	context.AfterFunc(l.ctx, func() { b.gone(l, mb) })
}

// gone removes a FIFO member whose lease ended. Unless its message was
// deleted, the group's later members fail.
func (b *batcher) gone(l *Lease, mb *member) {
	l.mu.Lock()
	deleted := l.state == leaseDeleted
	l.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.fifo, l)
	g := mb.m.GroupID
	q := b.groups[g]
	i := slices.Index(q, mb)
	if i < 0 {
		return
	}
	if !mb.running {
		b.finishLocked(mb, context.Cause(l.ctx))
	}
	if !deleted {
		for _, later := range q[i+1:] {
			b.poisonLocked(later)
		}
	}
	q = slices.Delete(q, i, i+1)
	if len(q) == 0 {
		delete(b.groups, g)
		return
	}
	b.groups[g] = q
	b.advanceLocked(g)
}

// poisonLocked fails a member whose group's earlier message failed: at
// once unless its batch runs (the result then says so).
func (b *batcher) poisonLocked(mb *member) {
	mb.poisoned = true
	if !mb.running {
		b.finishLocked(mb, RetryAfter(errEarlierFailed, 0))
	}
}

// finishLocked sets a member's result and takes it out of a forming batch.
func (b *batcher) finishLocked(mb *member, err error) {
	if mb.finished {
		return
	}
	if mb.b != nil && !mb.b.sent {
		mb.b.members = slices.DeleteFunc(mb.b.members, func(x *member) bool { return x == mb })
		if len(mb.b.members) == 0 {
			b.closeLocked(mb.b) // nothing left to send; a waiting runner finds it empty
		}
		mb.b = nil
	}
	mb.finished, mb.err = true, err
	close(mb.done)
}

// advanceLocked admits a group's joined members to the forming batch, in
// order, as far as every earlier member is in that batch too.
func (b *batcher) advanceLocked(g string) {
	for _, mb := range b.groups[g] {
		if mb.poisoned && !mb.running {
			continue // failed already, leaving
		}
		if !mb.joined || mb.running || mb.finished {
			return // an earlier member is not in the forming batch
		}
		if mb.b == nil {
			b.admitLocked(mb)
		}
		if mb.b != b.forming {
			return // its batch was sent as it filled: later ones wait for it
		}
	}
}

// admitLocked adds mb to the forming batch, starting one if none is.
func (b *batcher) admitLocked(mb *member) {
	if b.stopping {
		b.finishLocked(mb, errGatheringAtShutdown) // no batch forms after the shutdown began
		return
	}
	if b.forming == nil {
		bt := &hbatch{due: make(chan struct{})}
		b.forming = bt
		if b.window > 0 {
			bt.timer = time.AfterFunc(b.window, func() {
				b.mu.Lock()
				b.closeLocked(bt)
				b.mu.Unlock()
			})
		} else {
			b.closeLocked(bt)
		}
	}
	bt := b.forming
	bt.members = append(bt.members, mb)
	mb.b = bt
	select {
	case mb.wake <- struct{}{}:
	default:
	}
	if len(bt.members) >= b.size {
		b.closeLocked(bt)
	}
}

// closeLocked makes bt due: no member joins it any more.
func (b *batcher) closeLocked(bt *hbatch) {
	if bt.closed {
		return
	}
	bt.closed = true
	if bt.timer != nil {
		bt.timer.Stop()
	}
	if b.forming == bt {
		b.forming = nil
	}
	close(bt.due)
}

// HandleMessage joins m to a batch and returns its result in the batch.
func (b *batcher) HandleMessage(ctx context.Context, m *Message) error {
	b.mu.Lock()
	mb := b.fifo[m.Lease]
	if mb == nil {
		mb = newMember(m)
	}
	if mb.finished { // poisoned before its middleware finished
		b.mu.Unlock()
		return mb.err
	}
	if b.stopping && !mb.running {
		b.finishLocked(mb, errGatheringAtShutdown)
		b.mu.Unlock()
		return mb.err
	}
	mb.ctx, mb.joined = ctx, true
	if b.fifo[m.Lease] == mb {
		b.advanceLocked(m.GroupID)
	} else {
		b.admitLocked(mb)
	}
	b.mu.Unlock()

	for {
		var due chan struct{}
		b.mu.Lock()
		bt := mb.b
		if bt != nil && !bt.sent {
			due = bt.due
		}
		b.mu.Unlock()
		select {
		case <-mb.done:
			return mb.err
		case <-mb.wake: // admitted: look again
		case <-due: // nil while waiting for an earlier member of its group
			b.run(bt)
		case <-ctx.Done():
			b.mu.Lock()
			if !mb.running {
				// Leaves the batch; on FIFO queues the group's later
				// members wait until its lease ends, then fail.
				b.finishLocked(mb, context.Cause(ctx))
			}
			b.mu.Unlock()
			<-mb.done
			return mb.err
		}
	}
}

// run sends bt, unless another member already did or it is empty, and
// hands every member its result.
func (b *batcher) run(bt *hbatch) {
	if bt == nil {
		return
	}
	b.mu.Lock()
	if bt.sent || len(bt.members) == 0 {
		bt.sent = true
		b.mu.Unlock()
		return
	}
	bt.sent = true
	members := bt.members
	msgs := make([]*Message, len(members))
	for i, mb := range members {
		mb.running = true
		msgs[i] = mb.m
	}
	b.mu.Unlock()

	ctx, stop := batchContext(members)
	begun := time.Now()
	err := b.call(ctx, msgs)
	stop()
	results, err := b.results(members, err)
	b.observe(msgs, begun, err)

	b.mu.Lock()
	defer b.mu.Unlock()
	failedGroups := map[string]bool{}
	for i, mb := range members {
		rerr := results[i]
		g := mb.m.GroupID
		if b.fifo[mb.m.Lease] == mb {
			if failedGroups[g] || mb.poisoned {
				rerr = RetryAfter(errEarlierFailed, 0)
			}
			if rerr != nil || mb.m.Lease.Err() != nil {
				failedGroups[g] = true
			}
		}
		mb.finished, mb.err = true, rerr
		close(mb.done)
	}
}

// results turns h's error into one per member.
func (b *batcher) results(members []*member, err error) ([]error, error) {
	out := make([]error, len(members))
	var bf BatchFailures
	switch {
	case err == nil:
		return out, nil
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

// call runs h, turning a panic into a *PanicError.
func (b *batcher) call(ctx context.Context, msgs []*Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			logSafely(b.logger, slog.LevelError, "sqsconsumer: batch handler panicked; the whole batch failed", "queue_url", b.queueURL, "messages", len(msgs), "panic", fmt.Sprint(v), "at", panicSite())
			err = pe
		}
	}()
	return b.h(ctx, msgs)
}

// observe tells the observer of a finished call of h.
func (b *batcher) observe(msgs []*Message, begun time.Time, err error) {
	if b.observer == nil {
		return
	}
	now := time.Now()
	observe(b.observer, b.logger, Event{Kind: EventBatch, QueueURL: b.queueURL, Time: now, Err: err, Batch: msgs, SinceStart: now.Sub(begun)})
}

// batchContext is the context of one call of h: cancelled when a member's
// context ends for a reason that concerns the whole call (shutdown, a
// handler timeout) or when every member's has ended. stop releases it.
func batchContext(members []*member) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var mu sync.Mutex
	ended := 0
	stops := make([]func() bool, 0, len(members))
	for _, mb := range members {
		mctx := mb.ctx
		stops = append(stops, context.AfterFunc(mctx, func() {
			cause := context.Cause(mctx)
			mu.Lock()
			ended++
			all := ended == len(members)
			mu.Unlock()
			if all || errors.Is(cause, ErrShutdown) || errors.Is(cause, context.DeadlineExceeded) {
				cancel(cause)
			}
		}))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel(context.Canceled)
	}
}

package sqsconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// workerIdle is how long a worker goroutine waits for another message
// before it exits. Reusing workers saves growing a fresh goroutine's stack
// for every message: measured against a goroutine per message
// (BenchmarkConsumerOverhead, round trip 0, quiet 2-core machine, 5
// alternating runs), it costs about 11 % less CPU per message and a third
// less wall time, so it stays.
const workerIdle = 30 * time.Second

// start runs d, which holds a handler slot: on an idle worker, or on a
// new one. Workers running handlers are never more than handler slots;
// the workers that settle on their own (goSettle) are not bounded by the
// slots, but only hand messages back or wait for SQS. A
// handler from Batch without middleware takes d into a batch instead,
// with no goroutine of its own (batcher.join).
func (r *run) start(d *delivery) {
	if r.batch != nil && r.batch.joinsDirectly() {
		r.batch.join(d)
		return
	}
	select {
	case r.work <- d:
		return
	default:
	}
	r.workers.Add(1)
	go serve(r, d, r.work, r.handle)
}

// serve is a worker goroutine: it runs do(first), then what do hands it
// back (the next message, already holding the slot do freed), then
// whatever arrives on ch, until it has waited workerIdle for more or the
// Consumer quits.
//
// The idle timer is not reset every time the worker waits (a timer reset
// takes the runtime's timer lock, once a message): it fires at most
// workerIdle after it was last armed, and the worker then exits only if it
// has really waited that long, else it arms it again for the rest.
func serve[T any](r *run, first T, ch <-chan T, do func(T) (T, bool)) {
	defer r.workers.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for v := first; ; {
		if next, ok := do(v); ok {
			v = next
			continue
		}
		waiting := time.Now()
	wait:
		select {
		case v = <-ch:
		case <-idle.C:
			if waited := time.Since(waiting); waited < workerIdle {
				idle.Reset(workerIdle - waited)
				goto wait
			}
			return
		case <-r.quit:
			return
		}
	}
}

// startBatch hands a due batch (Batch without middleware) to an idle
// worker, or to a new one; the worker sends it and settles its members.
func (r *run) startBatch(bt *hbatch) {
	select {
	case r.runs <- bt:
		return
	default:
	}
	r.workers.Add(1)
	go serve(r, bt, r.runs, r.batch.runDirect)
}

// goSettle runs settle, which may wait for SQS, on a worker goroutine of
// its own: for a delivery whose result is known without a handler to run
// (a Batch member), or a message handed back behind its FIFO group.
func (r *run) goSettle(settle func()) {
	r.workers.Add(1)
	go func() {
		defer r.workers.Done()
		settle()
	}()
}

// handle runs the handler for d and settles it. A delivery whose lease
// ended while it waited (lost or expired: another consumer may hold the
// message by now) never reaches the handler, nor does one the shutdown
// overtook.
//
// When settling freed the slot for a ready message at once, handle
// returns that message (it holds the slot) for the calling worker to run
// next, saving a hand-over to another goroutine for every message.
func (r *run) handle(d *delivery) (next *delivery, ok bool) {
	if r.shuttingDown() || d.lease.Err() != nil {
		r.settleAndStart(d, nil, false)
		return nil, false
	}
	ctx, cancel := r.startHandler(d)
	defer cancel()
	err := r.call(ctx, &d.msg)
	d.inHandler.Store(false)
	next = r.settle(d, err, true)
	return next, next != nil
}

// startHandler marks d's handler as called now and returns the handler's
// context: the lease's, bounded by WithHandlerTimeout when set. Call
// cancel once the handler returned.
func (r *run) startHandler(d *delivery) (ctx context.Context, cancel context.CancelFunc) {
	d.handlerStarts(time.Now())
	r.observe(EventStarted, d, nil)
	if r.s.handlerTimeout > 0 {
		return context.WithTimeout(d.ctx, r.s.handlerTimeout)
	}
	return d.ctx, func() {}
}

// call runs the handler, turning a panic into a *PanicError (protect),
// or into the PanicPolicy's error when one is set: a panic in middleware
// reaches it here, the handler's own at the guard inside the middleware
// (panicGuard), which marks it handled.
func (r *run) call(ctx context.Context, m *Message) error {
	err := protect(func() error { return r.handler.HandleMessage(ctx, m) })
	if pe, ok := err.(*PanicError); ok && pe.recovered {
		if f := r.s.panicPolicy; f != nil {
			return police(ctx, m, pe, f, r.ev)
		}
		// One readable line at Error, naming where it panicked; the
		// whole stack at Debug.
		r.log(slog.LevelError, "sqsconsumer: handler panicked", "message_id", m.ID, "panic", fmt.Sprint(pe.Value), "at", pe.at)
		r.log(slog.LevelDebug, "sqsconsumer: handler panic stack", "message_id", m.ID, "stack", string(pe.Stack))
	}
	return err
}

// enqueue hands a waiting delivery, free to start, to the flow: it starts
// at once in a free slot or waits for one. It returns false, having done
// nothing, when receiving has stopped or paused: the caller hands d back.
func (r *run) enqueue(d *delivery) bool {
	switch r.fl.enqueue(d) {
	case startNow:
		r.start(d)
	case notStarting:
		return false
	}
	return true
}

// granted starts the next waiting message (the flow's fair choice) in a
// slot of the fleet's budget given to this Consumer; false if none could
// start.
func (r *run) granted() bool {
	d, ok := r.fl.granted()
	if ok {
		r.start(d)
	}
	return ok
}

// taking reports whether the Consumer takes new messages: not shutting
// down, not paused, its breaker (if any) not open.
func (r *run) taking() bool {
	return !r.stopping.Load() && !r.paused.Load() && (r.br == nil || !r.br.refusing())
}

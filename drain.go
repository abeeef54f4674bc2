package sqsconsumer

import "context"

// Draining returns a channel that is closed when the drain of the Consumer
// that called the handler with ctx begins: the moment its shutdown starts
// (Run's context is cancelled, or a permanent receive error ends Run).
// From then on no message starts, and the running handlers have the
// shutdown timeout (WithShutdownTimeout) before their contexts are
// cancelled with ErrShutdown. A long job can watch it, checkpoint, and
// return RetryAfter(err, 0): its message is released (visibility 0) as
// soon as the Consumer's receives in flight have returned (within the
// long-poll wait, see Consumer.Run; at once when none is in flight) rather
// than held until the budget's end and cut there.
//
//	select {
//	case <-sqsconsumer.Draining(ctx):
//		saveProgress(job)
//		return sqsconsumer.RetryAfter(errors.New("draining: checkpointed"), 0)
//	case <-ctx.Done():
//		return context.Cause(ctx)
//	case r := <-step:
//		...
//	}
//
// The handler's context itself is not cancelled when the drain begins:
// a handler that ignores Draining runs on under its renewed lease, as
// before, until the budget's end. ctx may be the handler's context or any
// context derived from it (a middleware's, a WithTimeout of it); a Batch
// handler's context has it too. In lambdasqs it is closed a notice before
// the function's deadline (lambdasqs.WithDrainNotice). For a context that
// carries none (not from a Consumer, nor set by WithDrainSignal), Draining
// returns nil, a channel that is never ready: such a handler never drains
// early.
//
// A Pause does not close it: a pause lasts until Resume, running handlers
// go on and settle as usual (Pause's contract), and a job handed back at
// every pause would cost a receive, counted towards the queue's
// maxReceiveCount, and its work so far, each time. Nor does an opening
// breaker. It is closed once, at most, per Run.
//
// A failure returned during the drain is settled as any failure is (its
// RetryAfter delay, else its backoff; Stats counts it as Failed), except
// that an open breaker's hold no longer lengthens it: once the shutdown
// has begun no probe of this process follows. Safe for concurrent use.
func Draining(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	ch, _ := ctx.Value(drainKey{}).(<-chan struct{})
	return ch
}

// WithDrainSignal returns a copy of ctx whose Draining channel is drain:
// for code that runs handlers outside a Consumer (lambdasqs does), and for
// a handler's own tests, which close drain to show the handler a drain.
// A nil drain makes Draining(ctx) nil (never draining).
func WithDrainSignal(ctx context.Context, drain <-chan struct{}) context.Context {
	return context.WithValue(ctx, drainKey{}, drain)
}

// drainKey is the context key of a drain channel.
type drainKey struct{}

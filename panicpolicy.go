package sqsconsumer

import (
	"context"
	"fmt"
	"log/slog"
)

// PanicPolicy decides what a panic in a handler becomes: given the
// recovered panic p (its value, its stack, Site), it returns the error
// the message is settled with, as if the handler had returned it:
// Permanent(p) moves the message to the dead-letter queue,
// RetryAfter(p, d) hands it back after d, p itself (or any other error)
// is an ordinary failure, retried after the backoff. Returning nil keeps
// the default, p; a policy cannot turn a panic into a success (the
// message would be deleted though its handler never finished).
//
// ctx is the handler's context (Logger(ctx) gives the message's logger);
// m is the message, nil for a BatchHandler's panic, whose result then
// applies to every message of the batch (ctx is the batch call's). The
// policy runs on the handler's goroutine before the message is settled,
// its lease still renewed; it is called from many goroutines at once and
// must be safe for concurrent use. A panic in the policy itself is
// recovered and logged at Error, and the message is settled with p.
type PanicPolicy func(ctx context.Context, m *Message, p *PanicError) error

// WithPanicPolicy makes f decide what a handler's panic becomes (its
// error class) and how it is logged (f logs it, with the fields it
// chooses): the library then logs no line of its own about the panic
// beyond the usual failure line (WithLogger), unless f itself panics.
// Default: none; a panic becomes a *PanicError, logged at Error with
// where it happened and its stack at Debug, and is retried after the
// backoff.
//
// Where it applies: a panic in the Handler given to New is recovered
// right around it, inside every middleware (WithMiddleware,
// NewIdempotent's), so middleware sees f's error returned, not a panic
// (metrics and tracing middleware count f's class; an idempotency claim
// is released as for any failure). A panic in middleware itself, or one
// a middleware re-raises, is recovered outside all middleware, as without
// a policy, and goes to f too. A BatchHandler's panic goes to f once per
// call, with m nil. The policy's error counts as a handler failure for
// the breaker (WithBreaker) as any other, and EventFailed carries it.
// WithPanicPolicy(nil) is refused by New. Consumer only.
func WithPanicPolicy(f PanicPolicy) Option {
	return option(func(s *settings) {
		if f == nil {
			s.fail("WithPanicPolicy(nil): policy must not be nil")
			return
		}
		s.panicPolicy = f
	})
}

// Site reports where the panic happened, "function (file:line)": the
// first frame below the panic in the caller's code (outside the runtime
// and this library), "" if none was found or e was not recovered by the
// library. For a PanicPolicy's log line.
func (e *PanicError) Site() string { return e.at }

// panicGuard is the Handler given to New when a PanicPolicy is set,
// wrapped around it inside every middleware: a panic of h becomes f's
// error there.
type panicGuard struct {
	h  Handler
	f  func(context.Context, *Message, *PanicError) error
	ev eventSink // for the line when f itself panics
}

// HandleMessage calls h, handing a panic to the policy.
func (g *panicGuard) HandleMessage(ctx context.Context, m *Message) error {
	err := protect(func() error { return g.h.HandleMessage(ctx, m) })
	if pe, ok := err.(*PanicError); ok && pe.recovered {
		return police(ctx, m, pe, g.f, &g.ev)
	}
	return err
}

// police hands the recovered panic pe to the policy f and returns the
// error the message (m; nil for a batch) is settled with: f's, or pe when
// f returned nil or panicked itself (which is logged to ev). pe is marked
// handled, so that no recover further out reports it again.
func police(ctx context.Context, m *Message, pe *PanicError, f func(context.Context, *Message, *PanicError) error, ev *eventSink) error {
	pe.recovered = false
	err := protect(func() error { return f(ctx, m, pe) })
	ppe, ok := err.(*PanicError)
	switch {
	case ok && ppe.recovered:
		args := []any{"panic", fmt.Sprint(pe.Value), "at", pe.at, "policy_panic", fmt.Sprint(ppe.Value), "policy_at", ppe.at}
		if m != nil {
			args = append([]any{"message_id", m.ID}, args...)
		}
		ev.log(slog.LevelError, "sqsconsumer: the panic policy panicked; the handler's panic stands as a *PanicError", args...)
		ev.log(slog.LevelDebug, "sqsconsumer: handler panic stack", "stack", string(pe.Stack), "policy_stack", string(ppe.Stack))
		return pe
	case err == nil:
		return pe
	}
	return err
}

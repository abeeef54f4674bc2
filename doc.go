// Package sqsconsumer consumes Amazon SQS messages safely: each message is
// held under a [Lease] that keeps it invisible for exactly as long as its
// handler works on it, and is deleted only after the handler succeeded.
//
// # The life of a message
//
// A [Consumer] long-polls ReceiveMessage, asking for no more messages than
// it has free handler slots (back pressure), and with the lease length as
// the receive's VisibilityTimeout. The lease clock starts when that request
// is sent — SQS started its timer somewhere between send and response, so
// this is the safe end.
//
// At once every received message gets a Lease. The lease's heartbeat renews
// visibility to the lease length every third of the lease
// (ChangeMessageVisibility, coalesced with other leases into 10-entry batch
// calls), so a long job keeps its message and a crashed worker's message
// comes back within one lease. Transient renewal failures are retried
// before the deadline; if SQS answers that the receipt handle is no longer
// good, the handler's context is cancelled with cause [ErrLeaseLost] and the
// message is never deleted by this worker. A renewal never asks for
// visibility past 12 hours after the receive (SQS's ceiling, or
// [WithMaxLeaseDuration]); one heartbeat interval before it the handler's
// context is cancelled with [ErrLeaseCeiling].
//
// The handler runs in its own goroutine with a context that derives from
// the lease, not from Run's context. When it returns nil the message is
// deleted (batched) with the newest receipt handle, and the heartbeat keeps
// running until SQS confirms; meanwhile its handler slot already takes the
// next message (see [WithConcurrency]). When it returns an error or panics, the
// message's visibility is set to a backoff for its receive count
// ([DefaultBackoff], [WithBackoff]) — never 0 — or to the delay given with
// [RetryAfter]. If SQS redelivers a message this process is still handling,
// the running lease adopts the newer receipt handle instead of starting a
// second handler. On FIFO queues the messages of a group are handled one at
// a time, in order.
//
// When Run's context is cancelled the Consumer stops receiving, releases
// the messages it has not started (visibility 0), lets running handlers
// finish within [WithShutdownTimeout] while their leases stay renewed, then
// cancels them with [ErrShutdown] and releases their messages. Run returns
// after every goroutine it started has exited.
//
// SQS delivers at least once whatever the timeout: a worker can crash after
// the work and before the delete. Handlers whose effects must happen once
// use the [Idempotent] middleware.
//
// # When things go wrong
//
// A handler error wrapped with [Permanent] (an undecodable body, a schema
// violation) moves the message to the dead-letter queue at once, with the
// reason in its message attributes, instead of spending the redrive
// policy's receives on it ([WithDeadLetterQueue]). A downstream outage is
// the opposite case: every message fails through no fault of its own.
// [WithBreaker] stops receiving after a run of failures, or while renewals
// and deletes fail, so that no receive count is spent on the outage, and
// probes until the downstream is back. [Consumer.Health] and
// [Consumer.HealthHandler] report whether the Consumer makes progress, for
// an orchestrator's health checks.
//
// # Using a Lease alone
//
// Code with its own receive loop can use [NewLease] directly: Start, do the
// work, then Delete or Release, and Stop. Lease options ([WithVisibilityTimeout],
// [WithHeartbeatInterval], [WithMaxLeaseDuration], ...) are also Consumer
// options: one value configures both.
//
// # Observing
//
// The library logs nothing unless given a logger ([WithLogger]); an
// [Observer] ([WithObserver]) sees every event of every message with its
// time since receipt. The otelsqs subpackage turns them into OpenTelemetry
// metrics and spans. Tests use the sqstest subpackage, an in-memory SQS
// that runs inside testing/synctest.
package sqsconsumer

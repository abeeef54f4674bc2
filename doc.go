// Package sqsconsumer consumes Amazon SQS messages safely: each message is
// held under a [Lease] that keeps it invisible for exactly as long as its
// handler works on it, and is deleted only after the handler succeeded.
//
// # The life of a message
//
// A [Consumer] long-polls ReceiveMessage with the lease length as the
// receive's VisibilityTimeout. It asks for what its free handler slots
// need plus a small read-ahead: enough messages to cover one receive round
// trip at the rate handlers are finishing, so a slot that frees finds a
// message waiting (see [WithMaxReadAhead], which also bounds it). Messages
// read ahead are leased like the others from the moment they arrive; one
// whose lease is lost or expires while it waits never reaches the handler
// (SQS hands it out again).
//
// Every received message gets a Lease at once. Its clock starts when SQS
// handed the message over, estimated conservatively as a second before the
// receive's answer arrived and never before the request was sent
// ([HandoverTime]): a message that waited in a 20-second long poll still
// has its whole lease. The lease's heartbeat renews visibility to the
// lease length every third of the lease (ChangeMessageVisibility,
// coalesced with other leases into 10-entry batch calls), so a long job
// keeps its message and a crashed worker's message comes back within one
// lease. Transient renewal failures are retried before the deadline; if
// SQS answers that the receipt handle is no longer good, the handler's
// context is cancelled with cause [ErrLeaseLost] and the message is never
// deleted by this worker. A renewal never asks for visibility past 12
// hours after the receive (SQS's ceiling, or [WithMaxLeaseDuration]); one
// heartbeat interval before it the handler's context is cancelled with
// [ErrLeaseCeiling].
//
// The handler runs on a worker goroutine (workers are reused, and never
// more run handlers than there are handler slots) with a context that derives from
// the lease, not from Run's context. When it returns nil the message is
// deleted (coalesced with other deletes into 10-entry calls) with the
// newest receipt handle, and the heartbeat keeps
// renewing until SQS confirms; meanwhile its handler slot already takes
// the next message (see [WithConcurrency]). When it returns an error or
// panics, the message's visibility is set to a backoff for its receive
// count ([DefaultBackoff], [WithBackoff]) — never 0 — or to the delay
// given with [RetryAfter]; [Permanent] marks an error that retrying cannot
// fix, [Throttled] a downstream that refuses work for a while (back
// pressure), [Neutral] an error that says nothing of the downstream. If SQS redelivers a message this process is still handling, the
// running lease adopts the newer receipt handle instead of starting a
// second handler (on a FIFO queue, when that lease has already ended, the
// redelivery waits for the handler to return, in its group's place). On
// FIFO queues the messages of a group are handled one at a time, in
// order.
//
// When Run's context is cancelled the Consumer stops receiving (a long
// poll in flight is never cancelled, since it may already hold messages:
// they are released as soon as it returns), releases the messages it has
// not started (visibility 0), lets running handlers finish within
// [WithShutdownTimeout] while their leases stay renewed, then cancels them
// with [ErrShutdown] and releases their messages. Run returns after every
// goroutine it started has exited. A handler learns the moment the drain
// begins from [Draining] (its context stays live until the budget's end),
// so that a long job can checkpoint and hand its message back at once with
// [RetryAfter](err, 0).
//
// SQS delivers at least once whatever the timeout: a worker can crash after
// the work and before the delete. Handlers whose effects must happen once
// use the middleware [NewIdempotent] returns, with a store shared by every
// process that consumes the queue.
//
// # Pausing, rate limits, many queues
//
// [Consumer.Pause] stops receiving at run time without a restart
// (messages received and not started are released; running handlers
// finish), and [Consumer.Resume] takes up again; a paused Consumer is
// healthy and not ready. [WithRateLimit] bounds
// the messages received a second by asking SQS only for what the limit
// allows. The fleet subpackage runs several Consumers, one per queue,
// under one concurrency budget with weights and priorities.
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
// probes until the downstream is back; it counts only failures of the
// downstream (see [Neutral] for the list). A downstream that refuses part
// of the load (HTTP 429) is a third case: [Throttled] pauses receiving,
// or, with [WithAdaptiveConcurrency], lowers a concurrency limit that
// bounds what is received. [Consumer.Health] and
// [Consumer.HealthHandler] report whether the Consumer makes progress, for
// an orchestrator's health checks.
//
// # Batches
//
// [Batch] turns a [BatchHandler], which gets several messages at once,
// into a Handler for New: each message runs through the middleware on its
// own and then joins a batch, keeps its own lease, and is settled on its
// own from the per-message result ([BatchFailures]). The lambdasqs module
// runs the same Handler or BatchHandler in AWS Lambda behind an SQS event
// source mapping.
//
// # Using a Lease alone
//
// Code with its own receive loop can use [NewLease] directly: Start, do the
// work, then Delete or Release, and Stop (after Stop the lease refuses
// further calls and the message is left to SQS). Lease options
// ([WithVisibilityTimeout], [WithHeartbeatInterval], [WithMaxLeaseDuration],
// ...) are also Consumer options: one value configures both.
//
// # Observing
//
// The library logs nothing unless given a logger ([WithLogger]). An
// [Observer] ([WithObserver]) sees every event of every message, each
// carrying its time since the message arrived and since its handler
// started; a Consumer's delivery always ends with [EventDone], so an
// observer needs no state of its own. [Consumer.Stats] gives the figures
// the Consumer measured (receive-to-settle percentiles, receive counts,
// renewals, what it holds now); the doctor subpackage turns them, with the
// queue's settings, into advice on the visibility timeout and the settings
// around it. The otelsqs module turns events into OpenTelemetry metrics
// and spans. Tests use the sqstest subpackage, an in-memory SQS that runs
// inside testing/synctest.
package sqsconsumer

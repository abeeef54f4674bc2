// Package sqstest is an in-memory Amazon SQS for tests, in the spirit of
// net/http/httptest: a [Server] that speaks the AWS JSON 1.0 protocol exactly as the
// aws-sdk-go-v2 sqs client (v1.53) uses it, with AWS's error shapes, status codes,
// query codes and texts, correct MD5OfBody and MD5OfMessageAttributes, and the
// receipt-handle edge cases a consumer has to survive. Where AWS's behaviour is not
// documented the server makes a choice, listed under "UNCONFIRMED choices" below and
// kept in unconfirmed.go with its source.
//
// # Use
//
// [New] (or [NewServer]) makes a server; [Server.Client] returns an *sqs.Client wired
// to it through an in-memory, synchronous [http.RoundTripper] ([Server.Transport]):
// no socket and no goroutine. [Server.Handler] serves the same thing on a real
// listener, routing by a QueueUrl's account and name whatever its host;
// [Server.HostCheckingHandler] answers a QueueUrl on another host or port as a
// queue that does not exist. The command cmd/sqstest serves the latter for other
// processes and SDKs.
//
// All time comes from time.Now and timers, so inside a testing/synctest bubble hours
// of visibility timeouts, delays and long polls pass in microseconds. Create the
// server inside the bubble:
//
//	func TestLease(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			srv := sqstest.New(t)
//			c := srv.Client()
//			url, _ := srv.CreateQueue("jobs", map[string]string{"VisibilityTimeout": "30"})
//			srv.Send(url, "hello")
//			out, _ := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20})
//			time.Sleep(12 * time.Hour) // virtual
//			st, _ := srv.Message(url, *out.Messages[0].MessageId)
//			_ = st.Receives // every delivery, visibility change, deletion...
//		})
//	}
//
// [Server.CreateQueueWithDLQ] makes a queue and its dead-letter queue in one call
// (srv.CreateQueueWithDLQ("jobs", 5, nil) makes jobs-dlq and jobs, moving a message
// after 5 receives).
//
// A long poll blocks only on a timer, its own channel and the request's context, so
// it never stops the bubble's clock; it returns as soon as a message becomes
// available (sent, released, lease or delay over) and when [Server.Close] is called.
//
// For assertions, [Server.Messages] and [Server.Message] give each message's history
// ([MessageState]); [Server.Calls] counts requests per action. For failure tests,
// [Server.FailNext] answers the next calls of an action with a [Fault] (ready-made:
// [FaultThrottled], [FaultInternalError], [FaultServiceUnavailable],
// [FaultMessageNotInflight], ...), [Server.DelayNext] slows them,
// [Server.FailNextEntries] fails single entries of batch calls, and [Server.Expire]
// makes a lease lapse now.
//
// # Cost and memory
//
// Every action costs O(log n) in the number of messages in the queue, amortised
// (per-queue indexes by arrival, by end of lease or delay, by retention, per FIFO
// group and per fair-queue tenant), so draining n messages costs O(n log n), plus, on
// a standard queue with groups, a fair-queue pass at most once a second over the
// groups with messages in flight; BenchmarkDrain measures a drain of 20,000. A group
// that has no message left is forgotten 10 minutes later. A [Server] keeps every message that ever arrived and every receipt handle
// it issued, for [Server.Messages], [Server.Message] and the stale-handle answers
// below, for as long as it lives: right for a test, wrong for a long-running server
// or a soak. That history costs about 0.8 KB per message with a short body and one
// receive (chaos/sim_test.go measured 87.5 MB of heap after 100,000 messages).
// [WithHistoryLimit] bounds it per queue (cmd/sqstest uses it; with a limit of
// 1,000 the same run stays at 5-7 MB), and DeleteQueue forgets the queue's messages
// and handles at once.
//
// # Over a real socket
//
// A receive that collected messages answers even if its caller has gone: as in SQS,
// messages whose answer never reaches the client stay in flight until their
// visibility timeout ends. A client that loses an answer and retries therefore sees
// the first answer's messages only after that timeout. aws-sdk-go-v2 can do this on
// its own over a socket, HTTP or HTTPS (seen with smithy-go v1.28.9 and Go 1.26):
// smithy-go closes its request body as soon as the response arrives, and the closed
// body's WriteTo returns io.EOF; net/http's connection writer reads the body once more
// after sending it (to check for extra bytes), and if that happens only now it takes
// the io.EOF for a write error and closes the connection under the response being
// read; the SDK retries the "use of closed network connection" silently. It needs the
// answer to arrive before that writer has finished, a window of microseconds (wider on
// a busy machine), so it shows against cmd/sqstest on loopback under load and never
// through [Server.Transport], which has no connection. Against SQS itself the round
// trip is longer and the loss rarer, but it is the same code: production clients need
// the fix too, from package github.com/sqskit/sqsconsumer/sqsclient.
//
// [RebufferingTransport] avoids it: wrap the HTTP client's transport with it, and
// net/http gets a private in-memory copy of each request body that nothing closes
// early. Use it for any SDK client that reaches a [Server] through a listener:
//
//	HTTPClient: &http.Client{Transport: sqstest.RebufferingTransport(nil)},
//
// TestRebufferingTransportOverLoopback in this package replays the race step by step
// over loopback, with and without it; sqsclient's TestLostAnswerOverTLS does it over
// TLS with the SDK's own HTTP client.
//
// # Actions
//
// Implemented: CreateQueue, GetQueueUrl, GetQueueAttributes, SetQueueAttributes,
// ListQueues, DeleteQueue, PurgeQueue, TagQueue, UntagQueue, ListQueueTags,
// SendMessage, SendMessageBatch, ReceiveMessage, DeleteMessage, DeleteMessageBatch,
// ChangeMessageVisibility, ChangeMessageVisibilityBatch, ListDeadLetterSourceQueues,
// StartMessageMoveTask, CancelMessageMoveTask, ListMessageMoveTasks.
//
// AddPermission and RemovePermission answer UnsupportedOperation; any other target
// answers UnknownOperationException.
//
// Modelled: long polling (WaitTimeSeconds 0–20, the queue's
// ReceiveMessageWaitTimeSeconds when omitted, early return); MaxNumberOfMessages
// 1–10; the receive VisibilityTimeout override; system attributes (All,
// ApproximateReceiveCount, ApproximateFirstReceiveTimestamp, SentTimestamp, SenderId,
// MessageGroupId, also on standard queues, MessageDeduplicationId, SequenceNumber,
// AWSTraceHeader, from MessageSystemAttributes or the sender's X-Amzn-Trace-Id HTTP
// header, DeadLetterQueueSourceArn) and MessageAttributeNames filtering (All, *, .*,
// prefix.*); a fresh opaque receipt handle per receive; visibility expiry and
// ChangeMessageVisibility from now, 0 releasing at once; the 12-hour ceiling counted
// from the receive that issued the handle; stale handles as SQS answers them
// (never issued → ReceiptHandleIsInvalid; superseded → delete is a no-op, visibility
// change fails; deleted → delete succeeds, visibility change fails; expired and not
// received again → standard deletes, FIFO fails "The receipt handle has expired");
// per-entry failures in batch results (an empty Failed list left out), and the FIFO
// entry errors that fail a whole SendMessageBatch; redrive on the receive that would
// exceed maxReceiveCount with the count continuing in the DLQ (a FIFO DLQ copy takes
// the MessageId as its deduplication id); retention (a standard DLQ keeps the
// original enqueue time, a FIFO DLQ restarts it); queue and per-message delays (a
// FIFO queue accepts DelaySeconds 0); FIFO group locking, in-group order, same-group
// batching, 5-minute deduplication (explicit or content-based, queue or
// message-group scope), sequence numbers; QueueDeletedRecently for 60 s after
// DeleteQueue; one PurgeQueue per 60 s; queue attribute validation ("True" and
// "False" accepted, FifoQueue=true accepted again on a FIFO queue, the FIFO-only
// attributes refused on standard queues, a RedrivePolicy that names a missing queue
// refused, SqsManagedSseEnabled and the KMS attributes reported as AWS reports them);
// a bare queue name as QueueUrl; every limit with AWS's error (batch size and ids,
// 1 MiB messages and batches, attribute rules, parameter ranges, missing parameters,
// unknown queues). Malformed requests get AWS-shaped errors.
//
// Message move tasks follow AWS's documentation and its recorded answers: the source
// must be a dead-letter queue of some queue; without DestinationArn each message goes
// back to its DeadLetterQueueSourceArn; one active task per source; the task handle
// is base64 JSON of the task id and source ARN; MaxNumberOfMessagesPerSecond sets
// the pace (the first message moves at once); statuses RUNNING, COMPLETED,
// CANCELLING, CANCELLED and FAILED (with FailureReason, e.g. when the destination is
// deleted); ApproximateNumberOfMessagesMoved and ToMove; moved messages arrive as new
// messages (new MessageId, receive count 0, retention from the move). A task has no
// goroutine: its steps run on the server's clock, so under testing/synctest they take
// virtual time, and a long poll on the destination returns when a message arrives.
// [Server.MoveTasks] lists a queue's tasks; [MessageState] says which messages a
// task moved (Redriven, RedriveOf).
//
// # Fair queues
//
// A standard queue whose messages carry MessageGroupId is a fair queue, as AWS
// describes it in the SQS developer guide ("How Amazon SQS fair queues work"). Each
// message group is a tenant, and so is each message without a group. A group is
// noisy when it has more than 10% of the queue's in-flight messages and at least 30
// of its own in flight, or when its recent share of the consumers' processing time is
// more than 10%. A receive takes the quiet tenants' messages first, oldest first,
// then the noisy groups', the one with the fewest in flight first (counting what the
// same receive already took; ties to the group whose oldest waiting message came
// first), each group's oldest first. Noisy messages are never dropped or held back:
// when no quiet message is receivable they are delivered as before. A group becomes
// quiet again when its backlog (its messages neither in flight nor gone) has been
// consumed, or when none of its messages has been in flight for 5 minutes; until then
// it stays noisy even if it no longer meets either rule. Queues whose messages carry
// no group deliver in arrival order, as before; FIFO queues are unchanged.
//
// What AWS leaves open is chosen and listed under "UNCONFIRMED choices": processing
// time is time in flight (receive to delete, to a visibility change to 0 or to the
// lease's end), weighted by age with a time constant of one minute; a group is checked
// whenever its own messages change and every group with messages in flight at most
// once a second (so under testing/synctest a change of others' shares can take up to
// a second of virtual time to make a group noisy, and the 5-minute rule applies up to
// a second late); thresholds are applied exactly.
//
// AWS publishes five fair-queue figures as CloudWatch metrics only (GetQueueAttributes
// does not return them, here either): [Server.FairQueueMetrics] gives
// ApproximateNumberOfNoisyGroups and, for the quiet groups, the visible, not visible
// and delayed counts and the age of the oldest message; [Server.NoisyGroups] names
// the noisy groups. Detection costs O(log n) per message change and, once a second,
// O(groups with messages in flight); BenchmarkDrain's "grouped" case measures it.
//
// # Known divergences from AWS
//
//   - Short polls (WaitTimeSeconds 0) see every available message; AWS samples a
//     subset of its servers and may return fewer or none.
//   - Standard queues deliver in arrival order (with fair-queue ordering when their
//     messages carry groups, see "Fair queues"); AWS orders best-effort and moves a
//     message received three times to the back of the queue. Fair-queue detection is
//     exact and immediate where AWS's is approximate and distributed.
//   - No in-flight limits (OverLimit), no throughput limits: inject them with FailNext.
//   - ReceiveRequestAttemptId is accepted and ignored (no FIFO receive retry).
//   - Signatures and credentials are not checked; SenderId is a fixed value.
//   - PurgeQueue, attribute changes and the Approximate* counters take effect at once
//     and exactly; AWS takes up to 60 s (15 min for retention) and approximates. (AWS
//     kept deduplicating across message groups right after DeduplicationScope was
//     changed to messageGroup, in LocalStack's AWS-validated
//     test_fifo_change_to_high_throughput_after_creation; sqstest applies the new
//     scope at once.)
//   - Receipt handles have no lifetime of their own beyond the rules above; AWS has
//     been reported to expire very old standard-queue handles (~55,000 s). Under
//     [WithHistoryLimit], the handles of a message that fell out of the history answer
//     as never issued; so do a deleted queue's handles used on a re-created queue of
//     the same name.
//   - Policy, RedriveAllowPolicy and KMS keys are stored, not enforced. The
//     [Server.CreateQueue] helper (not the action) accepts a RedrivePolicy naming a
//     queue that does not exist; until it exists, messages are not moved. A message
//     moved by a redrive policy does not get the DLQ's DelaySeconds.
//   - Number attribute values are checked for presence only, not for range.
//   - The host of a QueueUrl is ignored: the account and name in its path route it.
//   - [Server.CreateQueue] (the helper, not the action) treats a ".fifo" name as
//     FifoQueue=true; [Server.Send] accepts sub-second delays.
//   - MessageNotInflight is produced only by fault injection: no real trigger is known.
//
// # UNCONFIRMED choices
//
// Where AWS's answer is not established the fake makes a choice, each kept in one
// place (unconfirmed.go) with its source:
//
//   - ChangeMessageVisibility with an expired, not re-received standard handle
//     succeeds and hides the message again.
//   - A superseded handle's delete on a standard queue deletes nothing.
//   - On FIFO queues superseded and expired handles both get "The receipt handle has
//     expired" (InvalidParameterValue; in batches ReceiptHandleIsInvalid), for delete
//     and for visibility changes.
//   - Another queue's handle gets ReceiptHandleIsInvalid (in batches with the text
//     `The receipt handle "<h>" is not valid for this queue.`).
//   - A deduplicated FIFO send returns the original message's MessageId and
//     SequenceNumber.
//   - RedrivePolicy reads back normalised, maxReceiveCount as a JSON number.
//   - A RedrivePolicy naming a missing queue gets the answer users report from AWS
//     ("Reason: Dead letter target does not exist."); no recording shows it.
//   - A queue that is its own dead-letter queue keeps (and delivers) a message past
//     maxReceiveCount.
//   - A FIFO SendMessageBatch refused as a whole enqueues none of its entries.
//   - DeleteMessageBatch and ChangeMessageVisibilityBatch leave an empty Failed out,
//     as SendMessageBatch does.
//   - Booleans in other letter cases than "true"/"True"/"false"/"False" are accepted
//     too; KmsDataKeyReusePeriodSeconds reads 300 while a key is set and no period
//     was.
//   - Move tasks: the rate without MaxNumberOfMessagesPerSecond (500 per second);
//     which messages a task moves (those present at its start, passing over those
//     in flight); CANCELLING lasting until the next step; a message without
//     DeadLetterQueueSourceArn failing a task that has no destination; what the
//     moved copy keeps; the texts of errors AWS was not recorded giving.
//   - Malformed bodies get SerializationException and unknown targets
//     UnknownOperationException (__type in com.amazon.coral.service, no query code).
//   - The texts of EmptyBatchRequest, BatchEntryIdsNotDistinct, several attribute
//     errors and the range errors of receive VisibilityTimeout and DelaySeconds.
//   - Fair queues: processing time measured as time in flight (receive to delete,
//     to a visibility change to 0 or to the lease's end, counted as it passes);
//     "recent" as exponential weighting with a one-minute time constant; detection
//     for a group at each change of its messages and for every group with messages
//     in flight at most once a second; a noisy group stays noisy, whether or not it
//     still meets a rule, until its backlog is consumed or 5 minutes pass with none
//     of its messages in flight; a group with none in flight for 5 minutes meets
//     neither rule; messages without a group always quiet; thresholds exact (a queue
//     with few groups may have all of them noisy by the processing time rule).
package sqstest

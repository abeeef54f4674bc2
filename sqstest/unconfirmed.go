package sqstest

import (
	"encoding/json"
	"net/http"
	"time"
)

// This file holds every behaviour of the fake that is not established for real AWS:
// neither AWS's documentation nor a recorded AWS response says what SQS answers
// (UNCONFIRMED below). Each choice lives here and only here, so that a probe against real SQS can change it in one
// place. The package documentation lists them too.

// expiredHandleVisibilityChangeRehides: ChangeMessageVisibility with the handle of a
// standard-queue message whose visibility has lapsed but which has not been received
// again answers 200 (real-AWS responses recorded by LocalStack's AWS-validated test
// test_change_message_visibility_after_visibility_timeout_expiration). Whether it hides
// the message again is UNCONFIRMED (LocalStack treats it as a no-op, PR #9632). We
// choose that it does: the handle stays the message's latest, just as a delete with it
// still deletes (recorded from AWS in test_delete_after_visibility_timeout), so it is
// treated as a live handle. The 12-hour ceiling still applies.
const expiredHandleVisibilityChangeRehides = true

// fifoStaleHandle decides what a FIFO queue answers for a handle that is superseded by
// a newer receive or whose visibility lapsed. Recorded AWS responses (LocalStack's
// AWS-validated test_fifo_delete_after_visibility_timeout; for batches the report
// sqsmover#54) confirm only the expired case for DeleteMessage (400 InvalidParameterValue "The receipt handle has expired.";
// batch entry code ReceiptHandleIsInvalid, "The receipt handle has expired"). For a
// superseded handle and for ChangeMessageVisibility the answer is UNCONFIRMED; we give
// the same "expired" answer, since on FIFO any superseded handle has also expired.
func fifoStaleHandle(h string, batch bool) Fault {
	if batch {
		return errReceiptHandleIsInvalid.withMessage("The receipt handle has expired")
	}
	return errHandleExpired(h)
}

// supersededDeleteIsNoop: a standard-queue DeleteMessage with a handle superseded by a
// newer receive answers 200; AWS documents only that the message "might not be"
// deleted (aws-sdk-go-v2 service/sqs api_op_DeleteMessage.go; user reports such as
// mapbox/ecs-watchbot#135 agree). We choose: nothing is deleted, which is
// the outcome a consumer must survive.
const supersededDeleteIsNoop = true

// foreignHandle is the answer for a handle this server issued for another queue.
// A report against the AWS SDK for Java (aws-sdk-java-v2#3101) quotes the batch-entry
// text `The receipt handle "<h>" is not valid for this queue.`; the single-call answer
// is UNCONFIRMED: we use ReceiptHandleIsInvalid with the never-issued text.
func foreignHandle(h string, batch bool) Fault {
	if batch {
		return errReceiptHandleIsInvalid.withMessage("The receipt handle %q is not valid for this queue.", h)
	}
	return errHandleNotValid(h)
}

// Error texts no recorded AWS response shows (shape and code are the AWS model's, as
// in aws-sdk-go-v2 service/sqs; only the wording is our guess).
const (
	textEmptyBatch           = "There should be at least one %s in the request."
	textIDsNotDistinct       = "Id %s repeated."
	textReceiveVisibility    = "Must be >= 0 and <= 43200, if provided."
	textDelaySecondsRange    = "Must be >= 0 and <= 900, if provided."
	textDedupOnStandardQueue = "The request include parameter that is not valid for this queue type."
	textTooManyAttributes    = "Number of message attributes [%d] exceeds the allowed maximum [10]."
	textBadAttributeName     = "Message (user) attribute name '%s' is invalid. Names can contain alphanumeric characters, hyphens, underscores and periods, must not start or end with a period, contain two periods in a row, or start with AWS. or Amazon., and be at most 256 characters long."
	textAttributeNoType      = "The message attribute '%s' must contain non-empty message attribute type."
	textAttributeBadType     = "The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String."
	textBadSystemAttribute   = "Message (system) attribute name '%s' is invalid. Only AWSTraceHeader is supported."
)

// Decoding failures (malformed JSON, wrong member types, numbers out of int32 range)
// are rejected by AWS's request layer before SQS sees them. What exactly real SQS
// answers over JSON is UNCONFIRMED; we answer like other AWS JSON 1.0 services do: 400
// with __type "com.amazon.coral.service#SerializationException" and no query code. The
// Go SDK reports it as *smithy.GenericAPIError with code "SerializationException".
var errSerialization = Fault{Status: http.StatusBadRequest,
	Type: "com.amazon.coral.service#SerializationException"}

// errUnknownOperation answers an X-Amz-Target that names no SQS action (or none at
// all). UNCONFIRMED as above; modelled on AWS JSON 1.0 services.
var errUnknownOperation = Fault{Status: http.StatusBadRequest,
	Type: "com.amazon.coral.service#UnknownOperationException"}

// duplicateSendAnswer: a FIFO send deduplicated within the 5-minute window is
// accepted but not delivered again (aws-sdk-go-v2 service/sqs api_op_SendMessage.go,
// MessageDeduplicationId). Which MessageId and SequenceNumber it
// returns is UNCONFIRMED; we return the original message's.
func duplicateSendAnswer(original *message) (messageID, sequenceNumber string) {
	return original.id, original.seq
}

// normaliseRedrivePolicy: GetQueueAttributes returns RedrivePolicy as
// {"deadLetterTargetArn":"...","maxReceiveCount":N} with N a JSON number, whatever
// form it was set in (CreateQueue accepts it as a number or a string). The echo format
// is UNCONFIRMED.
func normaliseRedrivePolicy(p *redrivePolicy) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// deadLetterTargetMissing answers a RedrivePolicy whose deadLetterTargetArn names no
// existing queue. No AWS-validated recording shows it; users quote this answer from
// real AWS (serverless/serverless#5215, a CloudFormation stack creating a queue
// before its DLQ; the same text appears in Terraform users' logs): 400
// InvalidParameterValue "Value <policy> for parameter RedrivePolicy is invalid.
// Reason: Dead letter target does not exist.", with the policy as sent. We give that
// answer at CreateQueue and SetQueueAttributes; it rests on reports only.
func deadLetterTargetMissing(policy string) Fault {
	return invalidValue(policy, "RedrivePolicy", "Dead letter target does not exist.")
}

// A queue whose RedrivePolicy names the queue itself is accepted (recorded, see
// parseRedrivePolicyLocked). What AWS then does with a message past maxReceiveCount is
// UNCONFIRMED; we choose that it stays where it is and is delivered as usual, the
// outcome that loses nothing (redriveLocked).
const selfRedriveMoves = false

// A FIFO SendMessageBatch with an entry that has no MessageGroupId, or no
// MessageDeduplicationId on a queue without content-based deduplication, fails as a
// whole (recorded; see checkFIFOBatchEntry). Whether the other entries were enqueued
// before AWS refused the call is UNCONFIRMED: the call's answer names none of them,
// so we enqueue none.

// The other batch actions (DeleteMessageBatch, ChangeMessageVisibilityBatch) omit an
// empty Failed list too, by analogy with SendMessageBatch, where AWS's answer omits it
// (recorded, see batchResult); for these two it is UNCONFIRMED.

// AWS sets the AWSTraceHeader system attribute from the sender's X-Amzn-Trace-Id HTTP
// header (recorded, see sendLocked). Whether the send's
// answer then carries an MD5OfMessageSystemAttributes is UNCONFIRMED; we give one
// only for system attributes sent in the body, as the client can only check those.

// defaultSenderID is the SenderId system attribute of messages sent through this
// server. Real SQS reports the sender's IAM user or role id (aws-sdk-go-v2
// service/sqs api_op_ReceiveMessage.go, SenderId); the fake
// does not know it (it does not check signatures), so it uses this fixed value.
const defaultSenderID = "AIDASQSTESTSENDER0000"

// Message move tasks (movetask.go). AWS documents the actions and LocalStack's
// AWS-validated tests (tests/aws/services/sqs/test_sqs_move_task.snapshot.json)
// recorded their errors and the shape of their answers; these choices are not
// established:
//
//   - Without MaxNumberOfMessagesPerSecond AWS picks the rate itself; we move
//     defaultMoveRate messages per second, the documented maximum.
//   - A task moves the messages present in the source when it starts
//     (ApproximateNumberOfMessagesToMove counts them), oldest first, one per step;
//     messages arriving later stay. A message in flight or delayed when its turn
//     comes is passed over, and when none of them is receivable the task completes.
//   - Cancelling makes the task CANCELLING until its next step, when it becomes
//     CANCELLED without moving more (AWS was seen to keep moving for a while).
//   - A message with no DeadLetterQueueSourceArn (sent to the DLQ directly, as
//     sqsconsumer's Permanent path does) fails a task started without
//     DestinationArn, with the FailureReason of a missing queue; so does a deleted
//     source queue.
//   - StartMessageMoveTask and ListMessageMoveTasks with a SourceArn that names no
//     queue answer like CancelMessageMoveTask (recorded): ResourceNotFoundException.
//   - Cancelling a task that is not RUNNING, a MaxNumberOfMessagesPerSecond outside
//     1-500, MaxResults outside 1-10, and a destination of the other queue type are
//     refused with InvalidParameterValue in our wording (below).
//   - StartedTimestamp is in epoch milliseconds, like the message timestamps.
const (
	defaultMoveRate      = maxMoveRate
	textMoveRateRange    = "Must be between 1 and 500."
	textListTasksRange   = "Must be between 1 and 10."
	textMoveQueueTypes   = "The source queue and the destination queue must be of the same queue type."
	textCancelNotRunning = "Only a task with status RUNNING can be cancelled; this task is %s."
)

func startedTimestamp(t time.Time) int64 { return t.UnixMilli() }

// redriveCopy is the new message a move task makes of m in dst. UNCONFIRMED beyond
// the documented new MessageId, new enqueue time and (so) fresh retention and
// receive count: the copy's SentTimestamp is the move; it keeps body, message
// attributes, AWSTraceHeader, SenderId and MessageGroupId, and on a FIFO destination
// the deduplication id, without being checked against (or recorded in) dst's
// deduplication window; dst's DelaySeconds applies, as to any new message; it has
// no DeadLetterQueueSourceArn.
func redriveCopy(m *message, dst *queue, at time.Time) *message {
	nm := &message{
		id:          newUUID(),
		body:        m.body,
		attrs:       m.attrs,
		sysAttrs:    m.sysAttrs,
		groupID:     m.groupID,
		senderID:    m.senderID,
		sentAt:      at,
		enqueuedAt:  at,
		availableAt: at.Add(time.Duration(dst.intAttr("DelaySeconds")) * time.Second),
		redriveOf:   m.id,
	}
	if dst.fifo {
		nm.dedupID = m.dedupID
		nm.seq = dst.nextSeq()
	}
	return nm
}

// Fair queues (fair.go). AWS's SQS developer guide ("How Amazon SQS fair queues
// work") gives the rules (more than 10% of the queue's in-flight messages and at
// least 30 of the tenant's own, or more than 10% of its recent share of consumer
// processing time; back to quiet when the backlog is consumed or after 5 minutes
// with none in flight) and calls the thresholds approximate. What it leaves open is
// UNCONFIRMED and chosen here:
//
//   - Processing time is time in flight: a delivery counts from its receive to its
//     delete, to a ChangeMessageVisibility that ends its lease (timeout 0), or to the
//     end of its lease, counted as it passes, not when it ends (a slow handler counts
//     while it runs). A visibility change that extends a lease does not end it.
//   - "Recent" is an exponentially weighted sum with time constant
//     fairTimeConstant: time in flight t ago weighs e^(-t/1 min). The share is the
//     tenant's sum over the queue's (messages without a group included). A tenant
//     with none in flight for 5 minutes meets neither rule.
//   - Detection runs for a tenant whenever one of its messages arrives, is received,
//     becomes receivable, or leaves flight or the queue; and, since the others'
//     shares change too, for every quiet tenant with messages in flight and a backlog
//     at most once per fairPassInterval of the server's clock, at the first call on
//     the queue after it (a tenant with none in flight cannot newly meet a rule, see
//     fairPassLocked). The 5-minute rule is checked on that pass, so it applies up to
//     a second late.
//   - A tenant is noisy only while it has a backlog (messages in the queue not in
//     flight: visible or delayed); once noisy it stays so, whether or not it still
//     meets a rule, until one of the two documented ways back applies.
//   - A message without a group is a tenant of its own and always quiet: it never
//     has 30 in flight, and its processing time share is not tracked (its time in
//     flight counts in the queue's total).
//   - The shares are applied exactly (10% means more than a tenth), not
//     approximately; a queue with one or few groups may have every group noisy by the
//     processing time rule, which orders them by fewest in flight.
const (
	fairTimeConstant = time.Minute
	fairPassInterval = time.Second
)

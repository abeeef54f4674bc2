package interop

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// receiveFor receives the one message of url with a receive-side visibility
// timeout of seconds.
func receiveFor(s *session, url string, seconds int32) types.Message {
	s.t.Helper()
	out, err := s.c.ReceiveMessage(s.ctx(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), VisibilityTimeout: seconds,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		s.t.Fatalf("%s: receive: %v %+v", s.impl, err, out)
	}
	return out.Messages[0]
}

func (s *session) deleteMessage(url string, h *string) error {
	_, err := s.c.DeleteMessage(s.ctx(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: h})
	return err
}

func (s *session) changeVisibility(url string, h *string, seconds int32) error {
	_, err := s.c.ChangeMessageVisibility(s.ctx(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: h, VisibilityTimeout: seconds})
	return err
}

// TestStaleHandles walks the receipt-handle cases on a standard queue (never
// issued, superseded by a newer receive, expired and not re-received, already
// deleted, another queue's; see sqstest/doc.go), plus the 12-hour ceiling.
func TestStaleHandles(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		garbage := aws.String("garbage")
		qa := s.queue("a", nil)
		err := s.deleteMessage(qa, garbage)
		s.aws("(a) DeleteMessage, never-issued handle", errString(err), errReceiptHandleIsInvalid, "never-issued handle (recorded)")
		s.awsText("(a) DeleteMessage, never-issued handle: message", errMessage(err), `The input receipt handle "garbage" is not a valid receipt handle.`, "never-issued handle (recorded)")
		err = s.changeVisibility(qa, garbage, 10)
		s.aws("(a) ChangeMessageVisibility, never-issued handle", errString(err), errReceiptHandleIsInvalid, "never-issued handle (recorded)")

		// Set up (b), (c), (d) and the ceiling, then let 1 s leases lapse once.
		qb := s.queue("b", map[string]string{"VisibilityTimeout": "30"})
		mustSend(s, qb, "b")
		b1 := receiveFor(s, qb, 1)
		qc := s.queue("c", nil)
		mustSend(s, qc, "c")
		c1 := receiveFor(s, qc, 1)
		qcv := s.queue("c-visibility", nil)
		mustSend(s, qcv, "cv")
		cv1 := receiveFor(s, qcv, 1)
		qceil := s.queue("ceiling", nil)
		mustSend(s, qceil, "ceiling")
		ceil := receiveFor(s, qceil, 30)
		sleep(1200 * time.Millisecond)

		// (b) superseded by a newer receive.
		b2 := receiveOne(s, qb)
		s.aws("(b) re-received: count", b2.Attributes["ApproximateReceiveCount"], "2", factHandles)
		err = s.changeVisibility(qb, b1.ReceiptHandle, 5)
		s.aws("(b) ChangeMessageVisibility, superseded handle", errString(err), errInvalidParameterValue, "superseded handle: report mapbox/ecs-watchbot#135")
		s.awsText("(b) ChangeMessageVisibility, superseded handle: message", errMessage(err), textHandleNotAvailable, "superseded handle: report mapbox/ecs-watchbot#135")
		err = s.deleteMessage(qb, b1.ReceiptHandle)
		s.aws("(b) DeleteMessage, superseded handle", errString(err), answerOK, "superseded handle: SDK api_op_DeleteMessage.go")
		s.info("(b) after the superseded delete: available+in flight", counts(s, qb), "superseded handle: SDK api_op_DeleteMessage.go says AWS 'might not' delete")
		err = s.changeVisibility(qb, b2.ReceiptHandle, 0)
		s.info("(b) the newer handle still works", errString(err), "depends on whether the superseded delete deleted")

		// (c) lease expired, not re-received.
		err = s.deleteMessage(qc, c1.ReceiptHandle)
		s.aws("(c) DeleteMessage, expired handle", errString(err), answerOK, "expired, not re-received handle (recorded)")
		s.aws("(c) the expired-handle delete deleted", counts(s, qc), "0+0", "expired, not re-received handle (recorded)")
		err = s.changeVisibility(qcv, cv1.ReceiptHandle, 30)
		s.aws("(c) ChangeMessageVisibility, expired handle", errString(err), answerOK, "expired, not re-received handle (recorded)")
		s.info("(c) receivable after that change", fmt.Sprint(len(receive(s, qcv, 10, 0))), "expired handle: whether the change hides the message again is UNCONFIRMED")

		// (d) message already deleted.
		qd := s.queue("d", nil)
		mustSend(s, qd, "d")
		d := receiveOne(s, qd)
		s.aws("(d) DeleteMessage", errString(s.deleteMessage(qd, d.ReceiptHandle)), answerOK, factHandles)
		s.aws("(d) DeleteMessage again", errString(s.deleteMessage(qd, d.ReceiptHandle)), answerOK, "deleted message (recorded)")
		err = s.changeVisibility(qd, d.ReceiptHandle, 10)
		s.aws("(d) ChangeMessageVisibility after delete", errString(err), errInvalidParameterValue, "deleted message (recorded)")
		s.awsText("(d) ChangeMessageVisibility after delete: message", errMessage(err), textHandleNotAvailable, "deleted message (recorded)")

		// A handle of another queue.
		err = s.deleteMessage(qa, d.ReceiptHandle)
		s.info("handle of another queue: DeleteMessage", errString(err), "another queue's handle: batch text from report aws-sdk-java-v2#3101; single-call answer UNCONFIRMED")

		// The 12-hour ceiling counts from the receive (more than 1 s ago).
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, 43195)
		s.aws("ceiling: 43195 s right after receive", errString(err), answerOK, "12-hour ceiling: Developer Guide 'Amazon SQS visibility timeout'")
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, 43200)
		s.aws("ceiling: 43200 s, 1 s after receive", errString(err), errInvalidParameterValue, "12-hour ceiling: report localstack#3956")
		s.awsText("ceiling: message", errMessage(err), "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", "report localstack#3956")
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, 43201)
		s.aws("ChangeMessageVisibility 43201 (out of range)", errString(err), errInvalidParameterValue, "SDK api_op_ChangeMessageVisibility.go: 0–43200")
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, -1)
		s.aws("ChangeMessageVisibility -1 (out of range)", errString(err), errInvalidParameterValue, "SDK api_op_ChangeMessageVisibility.go: 0–43200")
	})
}

// TestFIFOStaleHandles: on FIFO queues an expired handle no longer deletes.
func TestFIFOStaleHandles(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for _, g := range []string{"g1", "g2"} {
			_, err := s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(g), MessageGroupId: aws.String(g)})
			if err != nil {
				t.Fatalf("%s: %v", s.impl, err)
			}
		}
		out, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 1})
		if err != nil || len(out.Messages) != 2 {
			t.Fatalf("%s: receive: %v %+v", s.impl, err, out)
		}
		m1, m2 := out.Messages[0], out.Messages[1]
		err = s.deleteMessage(url, aws.String("garbage"))
		s.see("never-issued handle: DeleteMessage", errString(err))
		sleep(1200 * time.Millisecond)

		err = s.deleteMessage(url, m1.ReceiptHandle)
		s.aws("expired handle: DeleteMessage", errString(err), errInvalidParameterValue, "FIFO expired handle (recorded)")
		s.awsText("expired handle: DeleteMessage message", errMessage(err), textHandleExpired, "FIFO expired handle (recorded)")
		del, err := s.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url),
			Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("e1"), ReceiptHandle: m2.ReceiptHandle}}})
		s.see("expired handle: DeleteMessageBatch", errString(err))
		if err == nil {
			s.aws("expired handle: batch entry failure", describeBatch(ids(del.Successful, deleteID), del.Failed), "failed e1 ReceiptHandleIsInvalid sender", "FIFO expired handle in a batch: report sqsmover#54")
			if len(del.Failed) == 1 {
				s.awsText("expired handle: batch entry message", aws.ToString(del.Failed[0].Message), textHandleExpired, "FIFO expired handle in a batch: report sqsmover#54")
			}
		}
		s.aws("both messages still there", counts(s, url), "2+0", "FIFO expired handle (recorded)")
	})
}

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

// TestStaleHandles walks the receipt-handle cases of SQS-FACTS §2.1 on a
// standard queue, plus the 12-hour ceiling.
func TestStaleHandles(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		garbage := aws.String("garbage")
		qa := s.queue("a", nil)
		err := s.deleteMessage(qa, garbage)
		s.aws("(a) DeleteMessage, never-issued handle", errString(err), errReceiptHandleIsInvalid, "§2.1 row a (AWS-validated)")
		s.awsText("(a) DeleteMessage, never-issued handle: message", errMessage(err), `The input receipt handle "garbage" is not a valid receipt handle.`, "§2.1 row a")
		err = s.changeVisibility(qa, garbage, 10)
		s.aws("(a) ChangeMessageVisibility, never-issued handle", errString(err), errReceiptHandleIsInvalid, "§2.1 row a (AWS-validated)")

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
		s.aws("(b) ChangeMessageVisibility, superseded handle", errString(err), errInvalidParameterValue, "§2.1 row b (REPORT)")
		s.awsText("(b) ChangeMessageVisibility, superseded handle: message", errMessage(err), textHandleNotAvailable, "§2.1 row b (REPORT)")
		err = s.deleteMessage(qb, b1.ReceiptHandle)
		s.aws("(b) DeleteMessage, superseded handle", errString(err), answerOK, "§2.1 row b (DOC)")
		s.info("(b) after the superseded delete: available+in flight", counts(s, qb), "§2.1 row b: AWS 'might not' delete")
		err = s.changeVisibility(qb, b2.ReceiptHandle, 0)
		s.info("(b) the newer handle still works", errString(err), "depends on whether the superseded delete deleted")

		// (c) lease expired, not re-received.
		err = s.deleteMessage(qc, c1.ReceiptHandle)
		s.aws("(c) DeleteMessage, expired handle", errString(err), answerOK, "§2.1 row c (AWS-REC)")
		s.aws("(c) the expired-handle delete deleted", counts(s, qc), "0+0", "§2.1 row c (AWS-REC)")
		err = s.changeVisibility(qcv, cv1.ReceiptHandle, 30)
		s.aws("(c) ChangeMessageVisibility, expired handle", errString(err), answerOK, "§2.1 row c (AWS-REC)")
		s.info("(c) receivable after that change", fmt.Sprint(len(receive(s, qcv, 10, 0))), "§2.1 row c: re-hiding UNCONFIRMED")

		// (d) message already deleted.
		qd := s.queue("d", nil)
		mustSend(s, qd, "d")
		d := receiveOne(s, qd)
		s.aws("(d) DeleteMessage", errString(s.deleteMessage(qd, d.ReceiptHandle)), answerOK, factHandles)
		s.aws("(d) DeleteMessage again", errString(s.deleteMessage(qd, d.ReceiptHandle)), answerOK, "§2.1 row d (AWS-validated)")
		err = s.changeVisibility(qd, d.ReceiptHandle, 10)
		s.aws("(d) ChangeMessageVisibility after delete", errString(err), errInvalidParameterValue, "§2.1 row d (AWS-validated)")
		s.awsText("(d) ChangeMessageVisibility after delete: message", errMessage(err), textHandleNotAvailable, "§2.1 row d")

		// A handle of another queue.
		err = s.deleteMessage(qa, d.ReceiptHandle)
		s.info("handle of another queue: DeleteMessage", errString(err), "§2.1 row a: single-call answer UNCONFIRMED")

		// The 12-hour ceiling counts from the receive (more than 1 s ago).
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, 43195)
		s.aws("ceiling: 43195 s right after receive", errString(err), answerOK, "§2.1 12-hour ceiling (DG)")
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, 43200)
		s.aws("ceiling: 43200 s, 1 s after receive", errString(err), errInvalidParameterValue, "§2.1 12-hour ceiling (REPORT)")
		s.awsText("ceiling: message", errMessage(err), "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", "§2.1 (REPORT)")
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, 43201)
		s.aws("ChangeMessageVisibility 43201 (out of range)", errString(err), errInvalidParameterValue, "§2 ChangeMessageVisibility 0–43200")
		err = s.changeVisibility(qceil, ceil.ReceiptHandle, -1)
		s.aws("ChangeMessageVisibility -1 (out of range)", errString(err), errInvalidParameterValue, "§2 ChangeMessageVisibility 0–43200")
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
		s.aws("expired handle: DeleteMessage", errString(err), errInvalidParameterValue, "§2.1 row c FIFO (AWS-REC)")
		s.awsText("expired handle: DeleteMessage message", errMessage(err), textHandleExpired, "§2.1 row c FIFO (AWS-REC)")
		del, err := s.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url),
			Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("e1"), ReceiptHandle: m2.ReceiptHandle}}})
		s.see("expired handle: DeleteMessageBatch", errString(err))
		if err == nil {
			s.aws("expired handle: batch entry failure", describeBatch(ids(del.Successful, deleteID), del.Failed), "failed e1 ReceiptHandleIsInvalid sender", "§2.1 row c FIFO (REPORT)")
			if len(del.Failed) == 1 {
				s.awsText("expired handle: batch entry message", aws.ToString(del.Failed[0].Message), textHandleExpired, "§2.1 row c FIFO (REPORT)")
			}
		}
		s.aws("both messages still there", counts(s, url), "2+0", "§2.1 row c FIFO")
	})
}

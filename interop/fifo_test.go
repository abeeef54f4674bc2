package interop

import (
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

const factFIFO = "FIFO group lock: SDK api_op_ReceiveMessage.go"

func (s *session) sendFIFO(url, body, group, dedup string) (*sqs.SendMessageOutput, error) {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
	if group != "" {
		in.MessageGroupId = aws.String(group)
	}
	if dedup != "" {
		in.MessageDeduplicationId = aws.String(dedup)
	}
	return s.c.SendMessage(s.ctx(), in)
}

func (s *session) deleteAll(url string, msgs []types.Message) {
	s.t.Helper()
	for _, m := range msgs {
		if err := s.deleteMessage(url, m.ReceiptHandle); err != nil {
			s.t.Fatalf("%s: delete %q: %v", s.impl, aws.ToString(m.Body), err)
		}
	}
}

func TestFIFOGroupsAndDedup(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})

		seq := map[string]string{}
		for _, m := range [][2]string{{"g1-m1", "g1"}, {"g1-m2", "g1"}, {"g1-m3", "g1"}, {"g2-m1", "g2"}} {
			out, err := s.sendFIFO(url, m[0], m[1], "")
			if err != nil {
				t.Fatalf("%s: send %s: %v", s.impl, m[0], err)
			}
			seq[m[0]] = aws.ToString(out.SequenceNumber)
		}
		s.aws("SequenceNumber increases within a group", yes(increasing(seq["g1-m1"], seq["g1-m2"], seq["g1-m3"])), "yes", "FIFO sequence numbers (recorded)")

		first := receive(s, url, 2, 0)
		s.aws("receive Max=2: the group's first two, in order", strings.Join(bodies(first), ","), "g1-m1,g1-m2", factFIFO+" (recorded)")
		if len(first) > 0 {
			m := first[0]
			s.aws("FIFO system attribute names", strings.Join(slices.Sorted(maps.Keys(m.Attributes)), ","),
				"ApproximateFirstReceiveTimestamp,ApproximateReceiveCount,MessageDeduplicationId,MessageGroupId,SenderId,SentTimestamp,SequenceNumber", "message system attributes (recorded)")
			s.aws("MessageGroupId attribute", m.Attributes["MessageGroupId"], "g1", "SDK api_op_ReceiveMessage.go: message system attributes")
			s.aws("SequenceNumber attribute is the send's", yes(m.Attributes["SequenceNumber"] == seq["g1-m1"]), "yes", "SDK api_op_ReceiveMessage.go: message system attributes")
		}
		second := receive(s, url, 10, 0)
		s.aws("next receive skips the locked group", strings.Join(bodies(second), ","), "g2-m1", factFIFO+" (recorded)")
		s.aws("both groups locked: nothing", fmt.Sprint(len(receive(s, url, 10, 0))), "0", factFIFO)
		s.deleteAll(url, first)
		third := receive(s, url, 10, 0)
		s.aws("after deleting the in-flight messages the group flows again", strings.Join(bodies(third), ","), "g1-m3", factFIFO)

		// Deduplication within 5 minutes, even after delete (aws-sdk-go-v2
		// service/sqs api_op_SendMessage.go, MessageDeduplicationId), on a queue of its own, drained one receive+delete at a time.
		dq := s.queue("dedup.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		orig, err := s.sendFIFO(dq, "dup", "g1", "")
		if err != nil {
			t.Fatalf("%s: %v", s.impl, err)
		}
		s.see("drain before the duplicate", strings.Join(drain(s, dq), ","))
		dup, err := s.sendFIFO(dq, "dup", "g1", "")
		s.aws("content-based duplicate (after delete) is accepted", errString(err), answerOK, "FIFO deduplication: SDK api_op_SendMessage.go")
		if err == nil {
			s.info("duplicate's MessageId and SequenceNumber are the original's",
				yes(aws.ToString(dup.MessageId) == aws.ToString(orig.MessageId) && aws.ToString(dup.SequenceNumber) == aws.ToString(orig.SequenceNumber)),
				"UNCONFIRMED: AWS does not say what a duplicate send returns")
		}
		_, err = s.sendFIFO(dq, "explicit-1", "g1", "same-id")
		s.see("explicit dedup id", errString(err))
		_, err = s.sendFIFO(dq, "explicit-2", "g1", "same-id")
		s.aws("explicit dedup id overrides content", errString(err), answerOK, "FIFO deduplication: SDK api_op_SendMessage.go")
		got := receive(s, dq, 10, 0)
		s.aws("duplicates are not delivered", strings.Join(bodies(got), ","), "explicit-1", "FIFO deduplication: SDK api_op_SendMessage.go")
		if len(got) == 1 {
			s.aws("explicit MessageDeduplicationId attribute", got[0].Attributes["MessageDeduplicationId"], "same-id", "SDK api_op_ReceiveMessage.go: message system attributes")
		}

		// A FIFO batch with an entry lacking MessageGroupId fails as a whole
		// (recorded: LocalStack's AWS-validated
		// test_send_batch_missing_message_group_id_for_fifo_queue[sqs]); without
		// it, batch sends enqueue in request order.
		bq := s.queue("batch.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		_, err = s.c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(bq), Entries: []types.SendMessageBatchRequestEntry{
			{Id: aws.String("a"), MessageBody: aws.String("b-0"), MessageGroupId: aws.String("g4")},
			{Id: aws.String("c"), MessageBody: aws.String("b-3")},
		}})
		s.aws("batch with an entry lacking MessageGroupId fails as a whole", errString(err), errInvalidParameterValue, "FIFO send rules (recorded)")
		s.awsText("batch entry without MessageGroupId: message", errMessage(err), "The request must contain the parameter MessageGroupId.", "FIFO send rules (recorded)")
		_, err = s.c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(bq), Entries: []types.SendMessageBatchRequestEntry{
			{Id: aws.String("a"), MessageBody: aws.String("b-1"), MessageGroupId: aws.String("g4")},
			{Id: aws.String("b"), MessageBody: aws.String("b-2"), MessageGroupId: aws.String("g4")},
			{Id: aws.String("d"), MessageBody: aws.String("b-4"), MessageGroupId: aws.String("g4")},
		}})
		s.see("FIFO SendMessageBatch", errString(err))
		s.aws("batch entries in request order", strings.Join(drain(s, bq), ","), "b-1,b-2,b-4", "SDK api_op_SendMessageBatch.go: FIFO entries enqueued in request order")
	})
}

// increasing says whether the decimal strings are positive and strictly
// increasing as numbers.
func increasing(nums ...string) bool {
	prev := big.NewInt(0)
	for _, s := range nums {
		n, ok := new(big.Int).SetString(s, 10)
		if !ok || n.Cmp(prev) <= 0 {
			return false
		}
		prev = n
	}
	return true
}

// drain receives and deletes until the queue answers no message, and returns
// the bodies in the order received.
func drain(s *session, url string) []string {
	s.t.Helper()
	var out []string
	for range 20 {
		msgs := receive(s, url, 10, 0)
		if len(msgs) == 0 {
			break
		}
		out = append(out, bodies(msgs)...)
		s.deleteAll(url, msgs)
	}
	return out
}

func TestFIFOSendRules(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q.fifo", map[string]string{"FifoQueue": "true"}) // no content-based dedup
		_, err := s.sendFIFO(url, "x", "g", "")
		s.aws("no dedup id and no content-based dedup", errString(err), errInvalidParameterValue, "FIFO deduplication (recorded)")
		s.awsText("no dedup id: message", errMessage(err), "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly", "FIFO deduplication (recorded)")
		_, err = s.sendFIFO(url, "x", "", "d")
		s.aws("no MessageGroupId", errString(err), errMissingParameter, "FIFO send rules (recorded)")
		s.awsText("no MessageGroupId: message", errMessage(err), "The request must contain the parameter MessageGroupId.", "FIFO send rules (recorded)")
		_, err = s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
			MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d2"), DelaySeconds: 2})
		s.aws("per-message DelaySeconds on FIFO", errString(err), errInvalidParameterValue, "FIFO send rules (recorded)")
		s.awsText("per-message DelaySeconds: message", errMessage(err), "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", "FIFO send rules (recorded)")
		_, err = s.sendFIFO(url, "x", "bad group!\x01", "d3")
		s.see("MessageGroupId with a control character", errString(err))
		_, err = s.sendFIFO(url, "x", strings.Repeat("g", 129), "d4")
		s.see("MessageGroupId of 129 characters", errString(err))
		out, err := s.sendFIFO(url, "x", "g", "d5")
		s.aws("valid FIFO send", errString(err), answerOK, "SDK api_op_SendMessage.go")
		if err == nil {
			s.aws("FIFO send returns a SequenceNumber", yes(aws.ToString(out.SequenceNumber) != ""), "yes", "SequenceNumber: SDK api_op_SendMessage.go")
		}
		_, err = s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), ReceiveRequestAttemptId: aws.String(strings.Repeat("r", 129))})
		s.see("ReceiveRequestAttemptId of 129 characters", errString(err))
	})
}

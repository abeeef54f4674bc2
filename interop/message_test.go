package interop

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// MD5 test vectors: digests real AWS returned (recorded) or that the npm package
// aws-md5-of-message-attributes computes.
const (
	md5Hello              = "5d41402abc4b2a76b9719d911017c592" // body "hello"
	md5AttrsGeneralHello  = "fca026605781cb4126a1e9044df24232" // General=Kenobi, Hello=There
	md5AttrsHelloOnly     = "a311262e065454b75da111d535b8dacd" // Hello=There
	md5AttrsBinary        = "31a92b15d92f8db860eda32aceb656c3" // binaryAttribute
	md5AttrsCustomNumber  = "9fe1b90bbd9965bdf77bac517c7d2495" // customNumberTypeAttrib
	factMD5               = "MD5 test vectors (recorded, or computed by npm aws-md5-of-message-attributes)"
	factReceiveAttributes = "SDK api_op_ReceiveMessage.go: message system attributes"
)

func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// describeAttrs renders message attributes in a stable order.
func describeAttrs(m map[string]types.MessageAttributeValue) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		parts = append(parts, fmt.Sprintf("%s:%s=%q/%x", k, aws.ToString(v.DataType), aws.ToString(v.StringValue), v.BinaryValue))
	}
	return strings.Join(parts, " ")
}

func TestSendReceive(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q", nil)

		empty, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		s.see("receive from an empty queue", errString(err))
		if err == nil {
			s.aws("empty receive: Messages is nil", yes(empty.Messages == nil), "yes", "empty receive is {} (recorded)")
		}

		before := time.Now()
		sent, err := s.c.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl:    aws.String(url),
			MessageBody: aws.String("hello"),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"Hello": strAttr("There"), "General": strAttr("Kenobi"),
			},
		})
		s.see("SendMessage with attributes", errString(err))
		if err != nil {
			t.Fatalf("%s: %v", s.impl, err)
		}
		s.aws("send: MD5OfMessageBody", aws.ToString(sent.MD5OfMessageBody), md5Hello, factMD5)
		s.aws("send: MD5OfMessageAttributes", aws.ToString(sent.MD5OfMessageAttributes), md5AttrsGeneralHello, factMD5)
		s.aws("send: no MD5OfMessageSystemAttributes", aws.ToString(sent.MD5OfMessageSystemAttributes), "", "SDK api_op_SendMessage.go: only when system attributes are sent")
		s.aws("send: standard queue gives no SequenceNumber", aws.ToString(sent.SequenceNumber), "", "SequenceNumber: SDK api_op_SendMessage.go")
		s.aws("counters after send", counts(s, url), "1+0", "SDK api_op_GetQueueAttributes.go")

		m := receiveOne(s, url)
		after := time.Now()
		s.aws("receive: MessageId is the send's", yes(aws.ToString(m.MessageId) == aws.ToString(sent.MessageId)), "yes", "SDK api_op_ReceiveMessage.go: message system attributes")
		s.aws("receive: body", aws.ToString(m.Body), "hello", "SDK api_op_ReceiveMessage.go")
		s.aws("receive: MD5OfBody", aws.ToString(m.MD5OfBody), md5Hello, factMD5)
		s.aws("receive: MD5OfMessageAttributes", aws.ToString(m.MD5OfMessageAttributes), md5AttrsGeneralHello, factMD5)
		s.see("receive: message attributes", describeAttrs(m.MessageAttributes))
		s.aws("receive: system attribute names", strings.Join(slices.Sorted(maps.Keys(m.Attributes)), ","),
			"ApproximateFirstReceiveTimestamp,ApproximateReceiveCount,SenderId,SentTimestamp", factReceiveAttributes+" (recorded)")
		s.aws("receive: ApproximateReceiveCount", m.Attributes["ApproximateReceiveCount"], "1", factReceiveAttributes)
		s.aws("receive: SentTimestamp", epochMillisBetween(m.Attributes["SentTimestamp"], before, after), "epoch ms within the call", factReceiveAttributes)
		s.aws("receive: ApproximateFirstReceiveTimestamp", epochMillisBetween(m.Attributes["ApproximateFirstReceiveTimestamp"], before, after), "epoch ms within the call", factReceiveAttributes)
		s.aws("receive: has a receipt handle", yes(aws.ToString(m.ReceiptHandle) != ""), "yes", "SDK api_op_ReceiveMessage.go")
		s.aws("counters after receive", counts(s, url), "0+1", "SDK api_op_GetQueueAttributes.go")

		// Attribute filters: an exact name, and a prefix with an unknown name.
		// MD5OfMessageAttributes covers the returned set, not all the message's
		// attributes (recorded).
		for _, f := range []struct {
			step  string
			names []string
		}{
			{"receive with MessageAttributeNames [Hello]", []string{"Hello"}},
			{"receive with MessageAttributeNames [Hel.*, Nope]", []string{"Hel.*", "Nope"}},
		} {
			fq := s.queue("filter-"+nonNameChars.ReplaceAllString(f.names[0], ""), nil)
			mustSendAttrs(s, fq, map[string]types.MessageAttributeValue{"Hello": strAttr("There"), "General": strAttr("Kenobi")})
			out, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(fq), MaxNumberOfMessages: 10, MessageAttributeNames: f.names})
			s.see(f.step, errString(err))
			if err != nil || len(out.Messages) != 1 {
				t.Fatalf("%s: %s: %v %+v", s.impl, f.step, err, out)
			}
			m := out.Messages[0]
			s.aws(f.step+": attributes", describeAttrs(m.MessageAttributes), `Hello:String="There"/`, "MessageAttributeNames filters (recorded)")
			s.aws(f.step+": MD5OfMessageAttributes", aws.ToString(m.MD5OfMessageAttributes), md5AttrsHelloOnly, "MD5 over the returned attributes (recorded)")
			s.aws(f.step+": no system attributes unless asked", fmt.Sprint(m.Attributes), "map[]", factReceiveAttributes)
		}

		// Binary and custom-typed attributes (MD5 test vectors above).
		for _, c := range []struct {
			name string
			v    types.MessageAttributeValue
			md5  string
		}{
			{"binaryAttribute", types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte("Hello binary world!")}, md5AttrsBinary},
			{"customNumberTypeAttrib", types.MessageAttributeValue{DataType: aws.String("Number.float"), StringValue: aws.String("4563442423554324324264524243.32543234")}, md5AttrsCustomNumber},
		} {
			u := s.queue("attr-"+c.name, nil)
			sent := mustSendAttrs(s, u, map[string]types.MessageAttributeValue{c.name: c.v})
			s.aws(c.name+": send MD5OfMessageAttributes", aws.ToString(sent.MD5OfMessageAttributes), c.md5, factMD5)
			m := receiveOne(s, u)
			s.aws(c.name+": receive MD5OfMessageAttributes", aws.ToString(m.MD5OfMessageAttributes), c.md5, factMD5)
			s.see(c.name+": received value", describeAttrs(m.MessageAttributes))
		}

		// The body character rules (aws-sdk-go-v2 service/sqs api_op_SendMessage.go,
		// MessageBody): everything from
		// #x20 up, outside the surrogates and #xFFFE-#xFFFF, is allowed.
		uq := s.queue("unicode", nil)
		uni := "héllo wörld ✓ \U0001F600"
		_, err = s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(uq), MessageBody: aws.String(uni)})
		s.aws("body with U+1F600 (beyond the BMP)", errString(err), answerOK, "allowed characters: SDK api_op_SendMessage.go; Developer Guide 'Amazon SQS message quotas'")
		_, err = s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(uq), MessageBody: aws.String("héllo wörld ✓")})
		s.aws("body with BMP characters", errString(err), answerOK, "allowed characters: SDK api_op_SendMessage.go")
		got := bodies(receive(s, uq, 10, 0))
		slices.Sort(got)
		s.see("unicode bodies round-trip", strings.Join(got, "|"))
		_, err = s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("bad \x00 char")})
		s.aws("body with U+0000", errString(err), errInvalidMessageContents, "allowed characters: SDK api_op_SendMessage.go (InvalidMessageContents is the modeled error)")
	})
}

func mustSendAttrs(s *session, url string, attrs map[string]types.MessageAttributeValue) *sqs.SendMessageOutput {
	s.t.Helper()
	out, err := s.c.SendMessage(s.ctx(), &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String("with attributes"), MessageAttributes: attrs})
	if err != nil {
		s.t.Fatalf("%s: SendMessage with attributes: %v", s.impl, err)
	}
	return out
}

// TestVisibility: the receive-side VisibilityTimeout override, expiry with the
// count incremented and a new handle, ChangeMessageVisibility 0, delete.
func TestVisibility(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q", map[string]string{"VisibilityTimeout": "30"})
		mustSend(s, url, "v")

		out, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), VisibilityTimeout: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("%s: first receive: %v %v", s.impl, err, out)
		}
		first := out.Messages[0]
		s.aws("first receive count", first.Attributes["ApproximateReceiveCount"], "1", factReceiveAttributes)
		s.aws("hidden right after receive", fmt.Sprint(len(receive(s, url, 10, 0))), "0", "Developer Guide 'Amazon SQS visibility timeout'")

		sleep(1200 * time.Millisecond)
		second := receiveOne(s, url) // queue default: 30 s
		s.aws("receive after the 1 s override expired: count", second.Attributes["ApproximateReceiveCount"], "2", "Developer Guide 'Amazon SQS visibility timeout'")
		s.aws("a new receipt handle per receive", yes(aws.ToString(second.ReceiptHandle) != aws.ToString(first.ReceiptHandle)), "yes", factHandles)
		s.aws("ApproximateFirstReceiveTimestamp unchanged", yes(second.Attributes["ApproximateFirstReceiveTimestamp"] == first.Attributes["ApproximateFirstReceiveTimestamp"]), "yes", factReceiveAttributes)
		s.aws("override not remembered: hidden after the second receive", fmt.Sprint(len(receive(s, url, 10, 0))), "0", "SDK api_op_ChangeMessageVisibility.go: counts from the call, not remembered")

		_, err = s.c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: second.ReceiptHandle, VisibilityTimeout: 0})
		s.aws("ChangeMessageVisibility 0", errString(err), answerOK, "Developer Guide 'Amazon SQS visibility timeout'")
		third := receiveOne(s, url)
		s.aws("released message received at once: count", third.Attributes["ApproximateReceiveCount"], "3", "visibility 0 (recorded)")

		_, err = s.c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: third.ReceiptHandle, VisibilityTimeout: 1})
		s.aws("ChangeMessageVisibility 1 (counts from now)", errString(err), answerOK, "SDK api_op_ChangeMessageVisibility.go: counts from the call, not remembered")
		s.aws("hidden before the new timeout", fmt.Sprint(len(receive(s, url, 10, 0))), "0", "SDK api_op_ChangeMessageVisibility.go: counts from the call, not remembered")
		sleep(1200 * time.Millisecond)
		fourth := receiveOne(s, url)
		s.aws("visible after the changed timeout: count", fourth.Attributes["ApproximateReceiveCount"], "4", "SDK api_op_ChangeMessageVisibility.go: counts from the call, not remembered")

		_, err = s.c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: fourth.ReceiptHandle})
		s.aws("DeleteMessage with the latest handle", errString(err), answerOK, "SDK api_op_DeleteMessage.go")
		s.aws("counters after delete", counts(s, url), "0+0", "SDK api_op_GetQueueAttributes.go")
	})
}

// TestLongPoll: a long poll returns as soon as a message arrives, without
// waiting to fill MaxNumberOfMessages; an empty one waits its full time.
func TestLongPoll(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q", nil)

		start := time.Now()
		out, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
		waited := time.Since(start)
		s.see("empty long poll (1 s)", errString(err))
		if err == nil {
			s.aws("empty long poll: no messages", fmt.Sprint(len(out.Messages)), "0", "Developer Guide 'Amazon SQS short and long polling'")
		}
		s.aws("empty long poll waits its full second", yes(waited >= 900*time.Millisecond && waited < 3*time.Second), "yes", "Developer Guide 'Amazon SQS short and long polling'")

		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(300 * time.Millisecond)
			_, _ = s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("late")})
		}()
		start = time.Now()
		out, err = s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 10, MaxNumberOfMessages: 3})
		waited = time.Since(start)
		wg.Wait()
		s.see("long poll while a message arrives", errString(err))
		if err == nil {
			s.aws("long poll returns the arriving message", strings.Join(bodies(out.Messages), ","), "late", "Developer Guide 'Amazon SQS short and long polling'")
		}
		s.aws("long poll returns early (< 2 s of 10)", yes(waited < 2*time.Second), "yes", "long polling (recorded)")

		// WaitTimeSeconds omitted: the queue's ReceiveMessageWaitTimeSeconds applies.
		qw := s.queue("queue-wait", map[string]string{"ReceiveMessageWaitTimeSeconds": "1"})
		start = time.Now()
		_, err = s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(qw)})
		waited = time.Since(start)
		s.see("receive on a queue with ReceiveMessageWaitTimeSeconds=1", errString(err))
		s.aws("queue wait time applies when the request omits it", yes(waited >= 900*time.Millisecond), "yes", "Developer Guide 'Amazon SQS short and long polling'")
	})
}

// TestDelay: queue DelaySeconds and per-message DelaySeconds.
func TestDelay(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		qd := s.queue("queue-delay", map[string]string{"DelaySeconds": "1"})
		mustSend(s, qd, "queue-delayed")
		url := s.queue("q", nil)
		_, err := s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("message-delayed"), DelaySeconds: 1})
		s.see("SendMessage DelaySeconds=1", errString(err))

		a, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
		if err == nil {
			s.aws("ApproximateNumberOfMessagesDelayed", a.Attributes["ApproximateNumberOfMessagesDelayed"], "1", "SDK api_op_GetQueueAttributes.go")
		}
		s.aws("queue delay: nothing yet", fmt.Sprint(len(receive(s, qd, 10, 0))), "0", "SDK api_op_CreateQueue.go: DelaySeconds")
		s.aws("message delay: nothing yet", fmt.Sprint(len(receive(s, url, 10, 0))), "0", "SDK api_op_SendMessage.go: DelaySeconds")
		sleep(1200 * time.Millisecond)
		s.aws("queue delay: delivered after 1 s", strings.Join(bodies(receive(s, qd, 10, 0)), ","), "queue-delayed", "SDK api_op_CreateQueue.go: DelaySeconds")
		s.aws("message delay: delivered after 1 s", strings.Join(bodies(receive(s, url, 10, 0)), ","), "message-delayed", "SDK api_op_SendMessage.go: DelaySeconds")
	})
}

// TestRedrive: with maxReceiveCount=1 the message moves to the DLQ at the
// next receive after its lease expired; that receive does not return it.
func TestRedrive(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		dlq := s.queue("dlq", nil)
		a, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatalf("%s: %v", s.impl, err)
		}
		policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, a.Attributes["QueueArn"])
		src := s.queue("src", map[string]string{"VisibilityTimeout": "1", "RedrivePolicy": policy})
		sent := mustSend(s, src, "poison")

		first := receiveOne(s, src)
		s.aws("source receive count", first.Attributes["ApproximateReceiveCount"], "1", factReceiveAttributes)
		sleep(1200 * time.Millisecond)
		s.aws("next source receive does not return it", fmt.Sprint(len(receive(s, src, 10, 0))), "0", "moved on a later receive: report localstack#8234")
		moved := receive(s, dlq, 10, 0)
		s.aws("message is in the DLQ", strings.Join(bodies(moved), ","), "poison", "moved on a later receive: report localstack#8234")
		if len(moved) == 1 {
			m := moved[0]
			s.aws("DLQ keeps the MessageId", yes(aws.ToString(m.MessageId) == aws.ToString(sent.MessageId)), "yes", "SDK api_op_ReceiveMessage.go: ApproximateReceiveCount counts across queues")
			s.aws("DLQ receive count continues", m.Attributes["ApproximateReceiveCount"], "2", "receive count in the DLQ (recorded)")
			s.aws("DeadLetterQueueSourceArn is set", yes(strings.HasSuffix(m.Attributes["DeadLetterQueueSourceArn"], ":"+s.name("src"))), "yes", factReceiveAttributes)
		}
	})
}

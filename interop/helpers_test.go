package interop

import (
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// epochSeconds classifies a timestamp attribute: "epoch seconds" when it is
// a plausible Unix time in seconds, else what it looks like.
func epochSeconds(v string) string {
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return "not an integer: " + v
	case n > 1e9 && n < 1e10:
		return "epoch seconds"
	case n > 1e12 && n < 1e13:
		return "epoch milliseconds"
	}
	return "unexpected: " + v
}

// epochMillisBetween says whether v is epoch milliseconds in [from-1s, to+1s]
// (the slack covers clock granularity, not protocol differences).
func epochMillisBetween(v string, from, to time.Time) string {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return "not an integer: " + v
	}
	if n < from.Add(-time.Second).UnixMilli() || n > to.Add(time.Second).UnixMilli() {
		return epochSeconds(v) + " outside the call's time window"
	}
	return "epoch ms within the call"
}

// mustSend sends body to url; failure ends the subtest.
func mustSend(s *session, url, body string) *sqs.SendMessageOutput {
	s.t.Helper()
	out, err := s.c.SendMessage(s.ctx(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		s.t.Fatalf("%s: SendMessage %q: %v", s.impl, body, err)
	}
	return out
}

// receive is a short-poll (or long-poll with wait > 0) receive asking for all
// attributes; failure ends the subtest.
func receive(s *session, url string, max int32, wait int32) []types.Message {
	s.t.Helper()
	out, err := s.c.ReceiveMessage(s.ctx(), &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(url),
		MaxNumberOfMessages:         max,
		WaitTimeSeconds:             wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		s.t.Fatalf("%s: ReceiveMessage: %v", s.impl, err)
	}
	return out.Messages
}

// receiveOne receives and requires exactly one message.
func receiveOne(s *session, url string) types.Message {
	s.t.Helper()
	msgs := receive(s, url, 10, 0)
	if len(msgs) != 1 {
		s.t.Fatalf("%s: got %d messages, want 1: %v", s.impl, len(msgs), bodies(msgs))
	}
	return msgs[0]
}

func bodies(msgs []types.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// counts is "available+in flight" from the queue's approximate counters.
func counts(s *session, url string) string {
	s.t.Helper()
	out, err := s.c.GetQueueAttributes(s.ctx(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return errString(err)
	}
	return out.Attributes["ApproximateNumberOfMessages"] + "+" + out.Attributes["ApproximateNumberOfMessagesNotVisible"]
}

// sleep waits on the wall clock: the suite talks to real servers over real
// sockets, so visibility timeouts and delays run in real time.
func sleep(d time.Duration) { time.Sleep(d) }

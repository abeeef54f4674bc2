package interop

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The attribute names AWS returns for "All" on a new standard queue
// (a real AWS response recorded by LocalStack's AWS-validated tests, 2025).
var newStandardQueueAttributes = []string{
	"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed",
	"ApproximateNumberOfMessagesNotVisible", "CreatedTimestamp", "DelaySeconds",
	"LastModifiedTimestamp", "MaximumMessageSize", "MessageRetentionPeriod", "QueueArn",
	"ReceiveMessageWaitTimeSeconds", "SqsManagedSseEnabled", "VisibilityTimeout",
}

func TestQueueLifecycle(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		name := s.name("q")
		url := s.queue("q", map[string]string{"VisibilityTimeout": "5"})
		s.aws("CreateQueue URL ends with /name", yes(strings.HasSuffix(url, "/"+name)), "yes", "SDK api_op_CreateQueue.go")

		got, err := s.c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		s.see("GetQueueUrl", errString(err))
		if err == nil {
			s.aws("GetQueueUrl returns the CreateQueue URL", yes(aws.ToString(got.QueueUrl) == url), "yes", "SDK api_op_GetQueueUrl.go")
		}

		again, err := s.c.CreateQueue(ctx, &sqs.CreateQueueInput{
			QueueName: aws.String(name), Attributes: map[string]string{"VisibilityTimeout": "5"}})
		s.aws("CreateQueue again, same attributes", errString(err), answerOK, "SDK api_op_CreateQueue.go")
		if err == nil {
			s.aws("CreateQueue again returns the same URL", yes(aws.ToString(again.QueueUrl) == url), "yes", "SDK api_op_CreateQueue.go")
		}
		_, err = s.c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		s.aws("CreateQueue again, attributes omitted", errString(err), answerOK, "CreateQueue idempotent with attributes omitted (recorded)")
		_, err = s.c.CreateQueue(ctx, &sqs.CreateQueueInput{
			QueueName: aws.String(name), Attributes: map[string]string{"VisibilityTimeout": "6"}})
		s.aws("CreateQueue again, different attribute", errString(err), errQueueNameExists, "CreateQueue, different attribute value (recorded)")

		_, err = s.c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(s.name("missing"))})
		s.aws("GetQueueUrl of a missing queue", errString(err), errQueueDoesNotExist, "GetQueueUrl of a missing queue (recorded); model error shape")

		attrs, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		s.see("GetQueueAttributes All", errString(err))
		if err == nil {
			a := attrs.Attributes
			s.aws("All: attribute names", strings.Join(slices.Sorted(maps.Keys(a)), ","),
				strings.Join(newStandardQueueAttributes, ","), "attributes of a new standard queue (recorded)")
			for _, kv := range [][2]string{
				{"VisibilityTimeout", "5"}, {"DelaySeconds", "0"}, {"MaximumMessageSize", "1048576"},
				{"MessageRetentionPeriod", "345600"}, {"ReceiveMessageWaitTimeSeconds", "0"},
				{"ApproximateNumberOfMessages", "0"}, {"SqsManagedSseEnabled", "true"},
			} {
				s.aws("All: "+kv[0], a[kv[0]], kv[1], "SDK api_op_GetQueueAttributes.go")
			}
			s.aws("All: QueueArn ends with :name", yes(strings.HasPrefix(a["QueueArn"], "arn:aws:sqs:") &&
				strings.HasSuffix(a["QueueArn"], ":"+name)), "yes", "SDK api_op_GetQueueAttributes.go")
			s.see("All: CreatedTimestamp is epoch seconds", epochSeconds(a["CreatedTimestamp"]))
		}

		one, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
		s.see("GetQueueAttributes VisibilityTimeout", errString(err))
		if err == nil {
			s.seef("only the asked attribute", "%v", slices.Sorted(maps.Keys(one.Attributes)))
		}

		_, err = s.c.CreateQueue(ctx, &sqs.CreateQueueInput{
			QueueName: aws.String(s.name("std-with-fifo-attr")), Attributes: map[string]string{"ContentBasedDeduplication": "true"}})
		s.aws("FIFO-only attribute on a standard queue", errString(err), errInvalidAttributeName, "queue attributes (recorded)")

		_, err = s.c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(s.name("fifo-without-suffix")),
			Attributes: map[string]string{"FifoQueue": "true"}})
		s.see("FifoQueue=true without .fifo suffix", errString(err))

		_, err = s.c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("bad name!")})
		s.see("CreateQueue with an invalid name", errString(err))

		_, err = s.c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
			QueueUrl: aws.String(url), Attributes: map[string]string{"VisibilityTimeout": "7"}})
		s.see("SetQueueAttributes VisibilityTimeout", errString(err))
		one, err = s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
		if err == nil {
			s.see("VisibilityTimeout after SetQueueAttributes", one.Attributes["VisibilityTimeout"])
		}

		_, err = s.c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
		s.see("DeleteQueue", errString(err))
		_, err = s.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")})
		s.aws("SendMessage to a deleted queue", errString(err), errQueueDoesNotExist, "model error shape")
		_, err = s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		s.aws("ReceiveMessage from a deleted queue", errString(err), errQueueDoesNotExist, "model error shape")
	})
}

func TestPurgeQueue(t *testing.T) {
	differential(t, func(t *testing.T, s *session) {
		ctx := s.ctx()
		url := s.queue("q", nil)
		for _, b := range []string{"a", "b"} {
			mustSend(s, url, b)
		}
		_, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		s.see("receive one (in flight)", errString(err))
		_, err = s.c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)})
		s.see("PurgeQueue", errString(err))
		s.aws("messages after purge (available+in flight)", counts(s, url), "0+0", "SDK api_op_PurgeQueue.go: deletes in-flight messages too")
		_, err = s.c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)})
		s.aws("second PurgeQueue within 60 s", errString(err), errPurgeQueueInProgress, "one PurgeQueue per 60 s (recorded)")
	})
}

package sqstest_test

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestCreateQueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		queue    string
		attrs    map[string]string
		wantCode string
		wantMsg  string
	}{
		{name: "standard", queue: "jobs"},
		{name: "fifo", queue: "jobs.fifo", attrs: map[string]string{"FifoQueue": "true"}},
		{name: "fifo name without FifoQueue", queue: "jobs.fifo", wantCode: "InvalidParameterValue",
			wantMsg: "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"},
		{name: "FifoQueue without .fifo", queue: "jobs", attrs: map[string]string{"FifoQueue": "true"}, wantCode: "InvalidParameterValue"},
		{name: "bad name", queue: "no spaces", wantCode: "InvalidParameterValue"},
		{name: "name too long", queue: string(make([]byte, 81)), wantCode: "InvalidParameterValue"},
		{name: "unknown attribute", queue: "q", attrs: map[string]string{"Colour": "red"}, wantCode: "InvalidAttributeName", wantMsg: "Unknown Attribute Colour."},
		{name: "fifo attribute on standard", queue: "q", attrs: map[string]string{"ContentBasedDeduplication": "true"},
			wantCode: "InvalidAttributeName", wantMsg: "Unknown Attribute ContentBasedDeduplication."},
		{name: "DeduplicationScope on standard", queue: "q", attrs: map[string]string{"DeduplicationScope": "queue"},
			wantCode: "InvalidAttributeName", wantMsg: "You can specify the DeduplicationScope only when FifoQueue is set to true."},
		{name: "visibility out of range", queue: "q", attrs: map[string]string{"VisibilityTimeout": "43201"},
			wantCode: "InvalidAttributeValue", wantMsg: "Invalid value for the parameter VisibilityTimeout."},
		{name: "delay out of range", queue: "q", attrs: map[string]string{"DelaySeconds": "901"}, wantCode: "InvalidAttributeValue"},
		{name: "wait out of range", queue: "q", attrs: map[string]string{"ReceiveMessageWaitTimeSeconds": "21"}, wantCode: "InvalidAttributeValue"},
		{name: "retention too short", queue: "q", attrs: map[string]string{"MessageRetentionPeriod": "59"}, wantCode: "InvalidAttributeValue"},
		{name: "max size too small", queue: "q", attrs: map[string]string{"MaximumMessageSize": "1023"}, wantCode: "InvalidAttributeValue"},
		{name: "redrive not JSON", queue: "q", attrs: map[string]string{"RedrivePolicy": "nope"}, wantCode: "InvalidParameterValue"},
		{name: "redrive count 0", queue: "q", attrs: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:d","maxReceiveCount":0}`},
			wantCode: "InvalidParameterValue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				out, err := b.c.CreateQueue(b.ctx, &sqs.CreateQueueInput{QueueName: aws.String(tt.queue), Attributes: tt.attrs})
				if tt.wantCode != "" {
					requireAPIError(t, err, tt.wantCode, tt.wantMsg)
					return
				}
				require.NoError(t, err)
				require.Equal(t, sqstest.DefaultBaseURL+"/"+sqstest.DefaultAccountID+"/"+tt.queue, *out.QueueUrl)
			})
		})
	}
}

func TestCreateQueueIdempotence(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"DelaySeconds": "5"})
		require.Equal(t, url, b.queue(t, "q", map[string]string{"DelaySeconds": "5"}), "same attributes: same URL")
		require.Equal(t, url, b.queue(t, "q", nil), "attributes omitted: same URL")
		_, err := b.c.CreateQueue(b.ctx, &sqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"DelaySeconds": "6"}})
		requireAPIError(t, err, "QueueAlreadyExists", "A queue already exists with the same name and a different value for attribute DelaySeconds")
		var typed *types.QueueNameExists
		require.ErrorAs(t, err, &typed)

		_, err = b.c.DeleteQueue(b.ctx, &sqs.DeleteQueueInput{QueueUrl: &url})
		require.NoError(t, err)
		_, err = b.c.CreateQueue(b.ctx, &sqs.CreateQueueInput{QueueName: aws.String("q")})
		var recently *types.QueueDeletedRecently
		require.ErrorAs(t, err, &recently)
		time.Sleep(60 * time.Second)
		b.queue(t, "q", nil)
	})
}

func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		created := time.Now()
		a := b.queue(t, "alpha", nil)
		b.queue(t, "alpine", nil)
		b.queue(t, "beta", nil)

		got, err := b.c.GetQueueUrl(b.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("alpha")})
		require.NoError(t, err)
		require.Equal(t, a, *got.QueueUrl)
		_, err = b.c.GetQueueUrl(b.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("gamma")})
		var dne *types.QueueDoesNotExist
		require.ErrorAs(t, err, &dne)
		requireAPIError(t, err, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")

		list, err := b.c.ListQueues(b.ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("alp")})
		require.NoError(t, err)
		require.Len(t, list.QueueUrls, 2)
		page1, err := b.c.ListQueues(b.ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(2)})
		require.NoError(t, err)
		require.Len(t, page1.QueueUrls, 2)
		require.NotNil(t, page1.NextToken)
		page2, err := b.c.ListQueues(b.ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(2), NextToken: page1.NextToken})
		require.NoError(t, err)
		require.Len(t, page2.QueueUrls, 1)
		require.Nil(t, page2.NextToken)

		// GetQueueAttributes All on a new standard queue: exactly AWS's set.
		attrs, err := b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &a,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		require.NoError(t, err)
		ts := strconv.FormatInt(created.Unix(), 10)
		require.Equal(t, map[string]string{
			"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0",
			"ApproximateNumberOfMessagesDelayed": "0", "CreatedTimestamp": ts, "LastModifiedTimestamp": ts,
			"DelaySeconds": "0", "MaximumMessageSize": "1048576", "MessageRetentionPeriod": "345600",
			"QueueArn": "arn:aws:sqs:us-east-1:123456789012:alpha", "ReceiveMessageWaitTimeSeconds": "0",
			"SqsManagedSseEnabled": "true", "VisibilityTimeout": "30",
		}, attrs.Attributes)
		none, err := b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &a})
		require.NoError(t, err)
		require.Empty(t, none.Attributes, "no names: no attributes")
		_, err = b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &a, AttributeNames: []types.QueueAttributeName{"Nope"}})
		requireAPIError(t, err, "InvalidAttributeName", "Unknown Attribute Nope.")

		// SetQueueAttributes, including removing a redrive policy with "".
		time.Sleep(10 * time.Second)
		dlqArn := "arn:aws:sqs:us-east-1:123456789012:beta"
		_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &a, Attributes: map[string]string{
			"VisibilityTimeout": "45", "RedrivePolicy": `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":"3"}`}})
		require.NoError(t, err)
		attrs, err = b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &a,
			AttributeNames: []types.QueueAttributeName{"VisibilityTimeout", "RedrivePolicy", "LastModifiedTimestamp"}})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"VisibilityTimeout": "45",
			"RedrivePolicy":         `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":3}`,
			"LastModifiedTimestamp": strconv.FormatInt(created.Unix()+10, 10)}, attrs.Attributes)
		_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &a, Attributes: map[string]string{"RedrivePolicy": ""}})
		require.NoError(t, err)
		attrs, err = b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &a, AttributeNames: []types.QueueAttributeName{"RedrivePolicy"}})
		require.NoError(t, err)
		require.Empty(t, attrs.Attributes)
		_, err = b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &a, Attributes: map[string]string{"FifoQueue": "true"}})
		require.Error(t, err)

		// Tags.
		_, err = b.c.TagQueue(b.ctx, &sqs.TagQueueInput{QueueUrl: &a, Tags: map[string]string{"team": "x", "env": "test"}})
		require.NoError(t, err)
		_, err = b.c.UntagQueue(b.ctx, &sqs.UntagQueueInput{QueueUrl: &a, TagKeys: []string{"env"}})
		require.NoError(t, err)
		tags, err := b.c.ListQueueTags(b.ctx, &sqs.ListQueueTagsInput{QueueUrl: &a})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"team": "x"}, tags.Tags)

		// DeleteQueue.
		_, err = b.c.DeleteQueue(b.ctx, &sqs.DeleteQueueInput{QueueUrl: &a})
		require.NoError(t, err)
		_, err = b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &a, MessageBody: aws.String("x")})
		require.ErrorAs(t, err, &dne)
		require.Nil(t, b.srv.Messages(a))
	})
}

func TestCounters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		b.send(t, url, "visible")
		b.send(t, url, "visible too")
		b.send(t, url, "delayed", func(in *sqs.SendMessageInput) { in.DelaySeconds = 60 })
		require.Len(t, b.receive(t, url, withMax(1)), 1)
		out, err := b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		require.NoError(t, err)
		require.Equal(t, "1", out.Attributes["ApproximateNumberOfMessages"])
		require.Equal(t, "1", out.Attributes["ApproximateNumberOfMessagesNotVisible"])
		require.Equal(t, "1", out.Attributes["ApproximateNumberOfMessagesDelayed"])
	})
}

func TestPurgeQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		b.send(t, url, "in flight")
		got := b.receive(t, url)
		b.send(t, url, "waiting")
		_, err := b.c.PurgeQueue(b.ctx, &sqs.PurgeQueueInput{QueueUrl: &url})
		require.NoError(t, err)
		require.Empty(t, b.receive(t, url))
		require.NoError(t, b.deleteMessage(url, *got[0].ReceiptHandle), "handle of a purged message: like deleted")
		for _, m := range b.srv.Messages(url) {
			require.True(t, m.Purged, m.Body)
		}
		_, err = b.c.PurgeQueue(b.ctx, &sqs.PurgeQueueInput{QueueUrl: &url})
		var inProgress *types.PurgeQueueInProgress
		require.ErrorAs(t, err, &inProgress)
		requireAPIError(t, err, "AWS.SimpleQueueService.PurgeQueueInProgress", "Only one PurgeQueue operation on q is allowed every 60 seconds.")
		time.Sleep(60 * time.Second)
		_, err = b.c.PurgeQueue(b.ctx, &sqs.PurgeQueueInput{QueueUrl: &url})
		require.NoError(t, err)
	})
}

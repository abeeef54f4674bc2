package sqstest_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// CreateQueueWithDLQ makes the queue and its dead-letter queue in one call:
// the DLQ named NAME-dlq, of the same type, with 14 days of retention; the
// queue with its attributes and a RedrivePolicy that moves a message after
// maxReceiveCount receives, which it does.
func TestCreateQueueWithDLQ(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, dlqURL, err := srv.CreateQueueWithDLQ("jobs", 2, map[string]string{"VisibilityTimeout": "1"})
		require.NoError(t, err)
		require.Equal(t, srv.BaseURL()+"/123456789012/jobs", url)
		require.Equal(t, srv.BaseURL()+"/123456789012/jobs-dlq", dlqURL)
		c := srv.Client()
		get := func(u string) map[string]string {
			out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: &u,
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			require.NoError(t, err)
			return out.Attributes
		}
		q, dlq := get(url), get(dlqURL)
		require.Equal(t, "1", q["VisibilityTimeout"])
		require.Equal(t, "1209600", dlq["MessageRetentionPeriod"])
		require.JSONEq(t, `{"deadLetterTargetArn":"`+dlq["QueueArn"]+`","maxReceiveCount":2}`, q["RedrivePolicy"])

		id, err := srv.Send(url, "fails")
		require.NoError(t, err)
		for range 3 { // the third receive moves it
			_, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 0})
			require.NoError(t, err)
			time.Sleep(1500 * time.Millisecond) // its visibility lapses
		}
		moved, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &dlqURL})
		require.NoError(t, err)
		require.Len(t, moved.Messages, 1)
		require.Equal(t, id, aws.ToString(moved.Messages[0].MessageId))

		again, againDLQ, err := srv.CreateQueueWithDLQ("jobs", 2, map[string]string{"VisibilityTimeout": "1"})
		require.NoError(t, err, "the same queues again: returned as they are")
		require.Equal(t, []string{url, dlqURL}, []string{again, againDLQ})
	})
}

// A FIFO queue gets a FIFO dead-letter queue, named before the .fifo suffix.
func TestCreateQueueWithDLQFIFO(t *testing.T) {
	t.Parallel()
	srv := sqstest.New(t)
	require.Equal(t, "jobs-dlq.fifo", sqstest.DLQName("jobs.fifo"))
	require.Equal(t, "jobs-dlq", sqstest.DLQName("jobs"))
	url, dlqURL, err := srv.CreateQueueWithDLQ("jobs.fifo", 5, nil)
	require.NoError(t, err)
	require.Equal(t, srv.BaseURL()+"/123456789012/jobs.fifo", url)
	require.Equal(t, srv.BaseURL()+"/123456789012/jobs-dlq.fifo", dlqURL)
	out, err := srv.Client().GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: &dlqURL,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue}})
	require.NoError(t, err)
	require.Equal(t, "true", out.Attributes["FifoQueue"])
}

// Bad arguments are refused with an error naming them, and a call that fails
// creates nothing (a dead-letter queue that existed before stays).
func TestCreateQueueWithDLQRefuses(t *testing.T) {
	t.Parallel()
	srv := sqstest.New(t)
	for _, n := range []int{0, -1, 1001} {
		_, _, err := srv.CreateQueueWithDLQ("a", n, nil)
		require.ErrorContains(t, err, fmt.Sprintf("CreateQueueWithDLQ(\"a\", %d): maxReceiveCount must be from 1 to 1000", n))
	}
	_, _, err := srv.CreateQueueWithDLQ("a", 3, map[string]string{"RedrivePolicy": "{}"})
	require.ErrorContains(t, err, "attrs hold a RedrivePolicy")
	_, _, err = srv.CreateQueueWithDLQ("a", 3, map[string]string{"VisibilityTimeout": "-5"})
	require.ErrorContains(t, err, "VisibilityTimeout")
	var f sqstest.Fault
	require.ErrorAs(t, err, &f, "the server's fault, wrapped")
	_, ok := srv.QueueURL("a-dlq")
	require.False(t, ok, "the dead-letter queue made for the failed call is gone")
	_, ok = srv.QueueURL("a")
	require.False(t, ok)

	kept, err := srv.CreateQueue("b-dlq", map[string]string{"MessageRetentionPeriod": "1209600"})
	require.NoError(t, err)
	_, _, err = srv.CreateQueueWithDLQ("b", 3, map[string]string{"Colour": "blue"})
	require.Error(t, err)
	url, ok := srv.QueueURL("b-dlq")
	require.True(t, ok, "a dead-letter queue that existed before stays")
	require.Equal(t, kept, url)

	_, _, err = srv.CreateQueueWithDLQ("c", 3, nil)
	require.NoError(t, err)
	_, _, err = srv.CreateQueueWithDLQ("c", 4, nil)
	require.ErrorContains(t, err, "RedrivePolicy", "an existing queue with another policy")
}

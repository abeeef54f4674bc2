package sqstest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// A heartbeat renews one message's visibility to 30 s every 10 s for 12 virtual hours.
// The renewal that would take the message past receive time + 43200 s fails with
// AWS's wording; the earlier ones all succeed; the message is visible again exactly
// 12 h after the receive.
func TestHeartbeatHitsTwelveHourCeiling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		id := *b.send(t, url, "long job").MessageId
		got := b.receive(t, url, withVisibility(30))
		require.Len(t, got, 1)
		received := time.Now()
		h := *got[0].ReceiptHandle

		var err error
		renewals := 0
		for {
			time.Sleep(10 * time.Second)
			if err = b.changeVisibility(url, h, 30); err != nil {
				break
			}
			renewals++
			require.Less(t, renewals, 5000, "the ceiling never came")
		}
		// Renewal at +43170 s asks for exactly +43200 s: allowed. At +43180 s: beyond.
		require.Equal(t, 43180*time.Second, time.Since(received), "when the ceiling error came")
		require.Equal(t, 4317, renewals)
		requireAPIError(t, err, "InvalidParameterValue",
			"Value 30 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")

		// A shorter extension up to exactly the ceiling still works.
		require.NoError(t, b.changeVisibility(url, h, 20))
		require.Empty(t, b.receive(t, url))
		time.Sleep(time.Until(received.Add(12 * time.Hour)))
		again := b.receive(t, url, withAllAttributes)
		require.Len(t, again, 1, "visible again at the ceiling")
		require.Equal(t, "2", again[0].Attributes["ApproximateReceiveCount"])

		st, _ := b.srv.Message(url, id)
		require.Len(t, st.VisibilityChanges, 4319)
		require.Equal(t, "InvalidParameterValue", st.VisibilityChanges[4317].Err)
		require.Empty(t, st.VisibilityChanges[4318].Err)

		// The new receive has its own 12 hours.
		time.Sleep(time.Hour)
		require.NoError(t, b.changeVisibility(url, *again[0].ReceiptHandle, 39600))
	})
}

// maxReceiveCount moves the message on the receive that would exceed it; the DLQ copy
// keeps id, body and attributes, continues the receive count and names its source.
func TestRedrive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		dlq := b.queue(t, "dlq", nil)
		arn := queueArn(t, b, dlq)
		src := b.queue(t, "src", map[string]string{
			"VisibilityTimeout": "10",
			"RedrivePolicy":     `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":"2"}`,
		})
		id := *b.send(t, src, "poison", func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]types.MessageAttributeValue{"k": str("v")}
		}).MessageId
		sentAt := time.Now()

		for i := 1; i <= 2; i++ {
			got := b.receive(t, src, withAllAttributes)
			require.Len(t, got, 1, "receive %d", i)
			time.Sleep(10 * time.Second)
		}
		st, _ := b.srv.Message(src, id)
		require.False(t, st.MovedToDLQ, "not moved when its lease expires, only on the next receive")

		require.Empty(t, b.receive(t, src), "the receive that would exceed maxReceiveCount moves it instead")
		st, _ = b.srv.Message(src, id)
		require.True(t, st.MovedToDLQ)
		require.Equal(t, dlq, st.MovedTo)

		got := b.receive(t, dlq, withAllAttributes)
		require.Len(t, got, 1)
		m := got[0]
		require.Equal(t, id, *m.MessageId)
		require.Equal(t, "poison", *m.Body)
		require.Equal(t, "3", m.Attributes["ApproximateReceiveCount"], "count continues across queues")
		require.Equal(t, queueArn(t, b, src), m.Attributes["DeadLetterQueueSourceArn"])
		require.Equal(t, "v", *m.MessageAttributes["k"].StringValue)

		// Standard DLQ: retention counts from the original send (Amazon SQS
		// Developer Guide, "Setting-up dead-letter queue retention in Amazon SQS").
		_, err := b.c.SetQueueAttributes(b.ctx, &sqs.SetQueueAttributesInput{QueueUrl: &dlq,
			Attributes: map[string]string{"MessageRetentionPeriod": "60"}})
		require.NoError(t, err)
		require.NoError(t, b.changeVisibility(dlq, *m.ReceiptHandle, 0))
		time.Sleep(time.Until(sentAt.Add(60 * time.Second)))
		require.Empty(t, b.receive(t, dlq), "expired 60 s after the original send")
		dst, _ := b.srv.Message(dlq, id)
		require.True(t, dst.Expired)
		require.Equal(t, sentAt.Add(60*time.Second), dst.ExpiredAt)
	})
}

func queueArn(t *testing.T, b bundle, url string) string {
	t.Helper()
	out, err := b.c.GetQueueAttributes(b.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	return out.Attributes["QueueArn"]
}

package sqstest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func noRetry(o *sqs.Options) { o.RetryMaxAttempts = 1 }

func TestFailNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fault     sqstest.Fault
		wantCode  string
		wantFault smithy.ErrorFault
		typed     func(error) bool
	}{
		{name: "throttled", fault: sqstest.FaultThrottled, wantCode: "RequestThrottled", wantFault: smithy.FaultClient,
			typed: func(err error) bool { var e *types.RequestThrottled; return errors.As(err, &e) }},
		{name: "internal error", fault: sqstest.FaultInternalError, wantCode: "InternalError", wantFault: smithy.FaultServer},
		{name: "service unavailable", fault: sqstest.FaultServiceUnavailable, wantCode: "ServiceUnavailable", wantFault: smithy.FaultServer},
		{name: "access denied", fault: sqstest.FaultAccessDenied, wantCode: "AccessDenied", wantFault: smithy.FaultClient},
		{name: "queue does not exist", fault: sqstest.FaultQueueDoesNotExist, wantCode: "AWS.SimpleQueueService.NonExistentQueue",
			typed: func(err error) bool { var e *types.QueueDoesNotExist; return errors.As(err, &e) }},
		{name: "over limit", fault: sqstest.FaultOverLimit, wantCode: "OverLimit",
			typed: func(err error) bool { var e *types.OverLimit; return errors.As(err, &e) }},
		{name: "kms throttled", fault: sqstest.FaultKmsThrottled, wantCode: "KMS.ThrottlingException",
			typed: func(err error) bool { var e *types.KmsThrottled; return errors.As(err, &e) }},
		{name: "receipt handle", fault: sqstest.FaultReceiptHandleIsInvalid, wantCode: "ReceiptHandleIsInvalid",
			typed: func(err error) bool { var e *types.ReceiptHandleIsInvalid; return errors.As(err, &e) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				url := b.queue(t, "q", nil)
				b.srv.FailNext("SendMessage", 2, tt.fault)
				for range 2 {
					_, err := b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("m")}, noRetry)
					code, _ := apiError(t, err)
					require.Equal(t, tt.wantCode, code)
					var ae smithy.APIError
					require.ErrorAs(t, err, &ae)
					if tt.wantFault != smithy.FaultUnknown {
						require.Equal(t, tt.wantFault, ae.ErrorFault())
					}
					if tt.typed != nil {
						require.True(t, tt.typed(err), "typed error, got %T", err)
					}
				}
				require.Empty(t, b.srv.Messages(url), "failed calls have no effect")
				b.send(t, url, "m")
				require.Equal(t, 3, b.srv.CallCount("SendMessage"), "injected failures are counted")
			})
		})
	}
}

// The SDK retries 5xx and throttling on its own; each attempt is a call.
func TestFailNextRetriedBySDK(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		b.srv.ResetCalls()
		b.srv.FailNext("SendMessage", 2, sqstest.FaultInternalError)
		b.send(t, url, "m")
		require.Equal(t, map[string]int{"SendMessage": 3}, b.srv.Calls())
	})
}

func TestDelayNext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		b.srv.DelayNext("SendMessage", 1, 5*time.Second)
		start := time.Now()
		b.send(t, url, "slow")
		require.Equal(t, 5*time.Second, time.Since(start))

		b.srv.DelayNext("SendMessage", 1, time.Minute)
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		defer cancel()
		_, err := b.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("abandoned")}, noRetry)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Len(t, b.srv.Messages(url), 1, "an abandoned call has no effect")

		f := sqstest.FaultThrottled
		f.Delay = 3 * time.Second
		b.srv.FailNext("SendMessage", 1, f)
		start = time.Now()
		_, err = b.c.SendMessage(b.ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("m")}, noRetry)
		require.Error(t, err)
		require.Equal(t, 3*time.Second, time.Since(start))
	})
}

func TestFailNextEntries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		for _, m := range []string{"a", "b", "c"} {
			b.send(t, url, m)
		}
		got := b.receive(t, url)
		require.Len(t, got, 3)
		b.srv.FailNextEntries("DeleteMessageBatch", 1, sqstest.FaultInternalError)
		b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 2, sqstest.FaultMessageNotInflight)

		cv, err := b.c.ChangeMessageVisibilityBatch(b.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url,
			Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
				{Id: aws.String("0"), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 60},
				{Id: aws.String("1"), ReceiptHandle: got[1].ReceiptHandle, VisibilityTimeout: 60},
				{Id: aws.String("2"), ReceiptHandle: got[2].ReceiptHandle, VisibilityTimeout: 60},
			}})
		require.NoError(t, err)
		require.Len(t, cv.Successful, 1)
		require.Equal(t, []types.BatchResultErrorEntry{
			{Id: aws.String("0"), SenderFault: true, Code: aws.String("AWS.SimpleQueueService.MessageNotInflight")},
			{Id: aws.String("1"), SenderFault: true, Code: aws.String("AWS.SimpleQueueService.MessageNotInflight")},
		}, cv.Failed)

		del, err := b.c.DeleteMessageBatch(b.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url,
			Entries: []types.DeleteMessageBatchRequestEntry{
				{Id: aws.String("0"), ReceiptHandle: got[0].ReceiptHandle},
				{Id: aws.String("1"), ReceiptHandle: got[1].ReceiptHandle},
			}})
		require.NoError(t, err)
		require.Equal(t, []types.DeleteMessageBatchResultEntry{{Id: aws.String("1")}}, del.Successful)
		require.Len(t, del.Failed, 1)
		require.False(t, del.Failed[0].SenderFault)
		require.Equal(t, "InternalError", *del.Failed[0].Code)
		ms := b.srv.Messages(url)
		require.False(t, ms[0].Deleted, "the failed entry had no effect")
		require.True(t, ms[1].Deleted)
	})
}

// Expire simulates a lease lapse: the message is receivable again and the old handle
// counts as expired, not superseded.
func TestExpire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		id, err := b.srv.Send(url, "m")
		require.NoError(t, err)
		require.Error(t, b.srv.Expire(url, id), "not in flight yet")
		got := b.receive(t, url, withVisibility(600))
		require.NoError(t, b.srv.Expire(url, id))
		st, _ := b.srv.Message(url, id)
		require.False(t, st.InFlight)
		require.NoError(t, b.deleteMessage(url, *got[0].ReceiptHandle), "standard: an expired handle still deletes")
		st, _ = b.srv.Message(url, id)
		require.True(t, st.Deleted)
		require.Error(t, b.srv.Expire(url, "no-such-id"))
	})
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t, sqstest.WithBaseURL("http://localhost:4566/"), sqstest.WithAccountID("000000000000"), sqstest.WithRegion("eu-west-1"))
		url, err := srv.CreateQueue("jobs.fifo", nil)
		require.NoError(t, err)
		require.Equal(t, "http://localhost:4566/000000000000/jobs.fifo", url)
		got, ok := srv.QueueURL("jobs.fifo")
		require.True(t, ok)
		require.Equal(t, url, got)
		_, ok = srv.QueueURL("nope")
		require.False(t, ok)
		id, err := srv.Send(url, "m", sqstest.WithGroupID("g"), sqstest.WithDeduplicationID("d"), sqstest.WithStringAttribute("k", "v"))
		require.NoError(t, err)
		dup, err := srv.Send(url, "m2", sqstest.WithGroupID("g"), sqstest.WithDeduplicationID("d"))
		require.NoError(t, err)
		require.Equal(t, id, dup)
		_, err = srv.Send(url, "m", sqstest.WithGroupID("g"), sqstest.WithDelay(time.Second))
		require.Error(t, err, "no per-message delay on FIFO")
		_, err = srv.Send("http://localhost:4566/000000000000/nope", "m")
		require.Error(t, err)

		c := srv.Client()
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"All"}})
		require.NoError(t, err)
		require.Len(t, out.Messages, 1)
		require.Equal(t, "v", *out.Messages[0].MessageAttributes["k"].StringValue)
		arn, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
		require.NoError(t, err)
		require.Equal(t, "arn:aws:sqs:eu-west-1:000000000000:jobs.fifo", arn.Attributes["QueueArn"])
		require.Equal(t, 0, srv.CallCount("SendMessage"), "helpers are not calls")
		require.Equal(t, 1, srv.CallCount("ReceiveMessage"))
		st, ok := srv.Message(url, id)
		require.True(t, ok)
		require.Equal(t, "g", st.GroupID)
		require.Equal(t, "d", st.DeduplicationID)
		require.NotEmpty(t, st.SequenceNumber)
	})
}

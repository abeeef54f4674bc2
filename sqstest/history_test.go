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

// Without a limit every message stays inspectable and every handle keeps its
// stale-handle answer (see doc.go); with WithHistoryLimit(n) the n messages that left the queue last do, older
// ones are forgotten and their handles answer as never issued. Messages still in the
// queue are never forgotten.
func TestHistoryLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, 3} {
		t.Run("limit="+strconv.Itoa(limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := sqstest.New(t, sqstest.WithHistoryLimit(limit))
				b := bundle{srv: srv, c: srv.Client(), ctx: t.Context()}
				url := b.queue(t, "q", nil)
				for i := range 10 {
					b.send(t, url, strconv.Itoa(i))
				}
				got := b.receive(t, url, withMax(10))
				require.Len(t, got, 10)
				for _, m := range got[:8] { // 8 leave the queue, 2 stay in flight
					require.NoError(t, b.deleteMessage(url, *m.ReceiptHandle))
				}

				kept := 8
				if limit > 0 {
					kept = limit
				}
				require.Len(t, srv.Messages(url), kept+2)
				for i, m := range got {
					_, ok := srv.Message(url, *m.MessageId)
					forgotten := i < 8-kept
					require.Equal(t, !forgotten, ok, "message %d inspectable", i)
					err := b.deleteMessage(url, *m.ReceiptHandle)
					if forgotten {
						requireAPIError(t, err, "ReceiptHandleIsInvalid",
							`The input receipt handle "`+*m.ReceiptHandle+`" is not a valid receipt handle.`)
						continue
					}
					require.NoError(t, err, "message %d: deleted (again) as SQS does", i)
				}
			})
		})
	}
}

// DeleteQueue forgets the queue's messages and handles: a handle of the deleted queue
// used on a re-created queue of the same name is answered as never issued.
func TestDeleteQueueForgetsHandles(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		b.send(t, url, "x")
		got := b.receive(t, url)
		require.Len(t, got, 1)
		_, err := b.c.DeleteQueue(b.ctx, &sqs.DeleteQueueInput{QueueUrl: &url})
		require.NoError(t, err)
		time.Sleep(60 * time.Second) // QueueDeletedRecently
		require.Equal(t, url, b.queue(t, "q", nil))
		require.Empty(t, b.srv.Messages(url))
		out, err := b.c.DeleteMessageBatch(b.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url,
			Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("a"), ReceiptHandle: got[0].ReceiptHandle}}})
		require.NoError(t, err)
		require.Len(t, out.Failed, 1)
		require.Equal(t, "ReceiptHandleIsInvalid", *out.Failed[0].Code)
		require.Equal(t, `The input receipt handle "`+*got[0].ReceiptHandle+`" is not a valid receipt handle.`, *out.Failed[0].Message)
	})
}

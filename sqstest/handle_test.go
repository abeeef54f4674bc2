package sqstest_test

import (
	"errors"
	"fmt"
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

const (
	reasonNotAvailable = "Message does not exist or is not available for visibility timeout change."
	reasonExpired      = "The receipt handle has expired."
)

type fixture struct {
	b      bundle
	url    string
	id     string
	handle string // the handle under test
}

// The receipt-handle cases listed in the package documentation (doc.go): never
// issued, superseded, deleted, expired and not received again; through the real SDK
// client.
func TestStaleHandles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fifo bool
		// prepare receives the message and leaves f.handle in the state under test.
		prepare func(t *testing.T, f *fixture)
		op      string // "delete" or "visibility"
		// wantCode/wantMsg: "" = success. wantMsg may use %s for the handle.
		wantCode, wantMsg string
		// check inspects the message afterwards.
		check func(t *testing.T, f *fixture)
	}{
		{
			name: "never issued: delete", op: "delete",
			prepare:  func(t *testing.T, f *fixture) { f.handle = "garbage" },
			wantCode: "ReceiptHandleIsInvalid", wantMsg: `The input receipt handle "%s" is not a valid receipt handle.`,
		},
		{
			name: "never issued: visibility", op: "visibility",
			prepare:  func(t *testing.T, f *fixture) { f.handle = "garbage" },
			wantCode: "ReceiptHandleIsInvalid", wantMsg: `The input receipt handle "%s" is not a valid receipt handle.`,
		},
		{
			name: "superseded: delete succeeds and deletes nothing", op: "delete",
			prepare: supersede,
			check: func(t *testing.T, f *fixture) {
				st, _ := f.b.srv.Message(f.url, f.id)
				require.False(t, st.Deleted, "the newer receive still owns the message")
				require.True(t, st.InFlight)
			},
		},
		{
			name: "superseded: visibility fails and leaves the newer lease alone", op: "visibility",
			prepare:  supersede,
			wantCode: "InvalidParameterValue", wantMsg: "Value %s for parameter ReceiptHandle is invalid. Reason: " + reasonNotAvailable,
			check: func(t *testing.T, f *fixture) {
				st, _ := f.b.srv.Message(f.url, f.id)
				require.Equal(t, st.Receives[1].At.Add(30*time.Second), st.VisibleAt, "newer receive's lease untouched")
				require.Equal(t, "InvalidParameterValue", st.VisibilityChanges[0].Err)
			},
		},
		{
			name: "deleted: delete again succeeds", op: "delete",
			prepare: deleted,
		},
		{
			name: "deleted: visibility fails", op: "visibility",
			prepare:  deleted,
			wantCode: "InvalidParameterValue", wantMsg: "Value %s for parameter ReceiptHandle is invalid. Reason: " + reasonNotAvailable,
		},
		{
			name: "expired not re-received: delete deletes", op: "delete",
			prepare: expired,
			check: func(t *testing.T, f *fixture) {
				st, _ := f.b.srv.Message(f.url, f.id)
				require.True(t, st.Deleted)
				require.Empty(t, f.b.receive(t, f.url))
			},
		},
		{
			name: "expired not re-received: visibility succeeds", op: "visibility",
			prepare: expired,
			check: func(t *testing.T, f *fixture) {
				// UNCONFIRMED whether AWS hides it again; sqstest does (unconfirmed.go).
				require.Empty(t, f.b.receive(t, f.url))
			},
		},
		{
			name: "fifo expired: delete fails", fifo: true, op: "delete",
			prepare:  expired,
			wantCode: "InvalidParameterValue", wantMsg: "Value %s for parameter ReceiptHandle is invalid. Reason: " + reasonExpired,
			check: func(t *testing.T, f *fixture) {
				st, _ := f.b.srv.Message(f.url, f.id)
				require.False(t, st.Deleted)
			},
		},
		{
			name: "fifo live: delete deletes", fifo: true, op: "delete",
			prepare: func(t *testing.T, f *fixture) {
				f.handle = *f.b.receive(t, f.url)[0].ReceiptHandle
			},
			check: func(t *testing.T, f *fixture) {
				st, _ := f.b.srv.Message(f.url, f.id)
				require.True(t, st.Deleted)
			},
		},
		{
			name: "another queue's handle", op: "delete",
			prepare: func(t *testing.T, f *fixture) {
				other := f.b.queue(t, "other", nil)
				_, err := f.b.srv.Send(other, "x")
				require.NoError(t, err)
				f.handle = *f.b.receive(t, other)[0].ReceiptHandle
			},
			wantCode: "ReceiptHandleIsInvalid", wantMsg: `The input receipt handle "%s" is not a valid receipt handle.`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				name, attrs := "q", map[string]string{"VisibilityTimeout": "30"}
				var opts []func(*sqs.SendMessageInput)
				if tt.fifo {
					name, attrs["FifoQueue"], attrs["ContentBasedDeduplication"] = "q.fifo", "true", "true"
					opts = append(opts, withGroup("g"))
				}
				f := &fixture{b: b, url: b.queue(t, name, attrs)}
				f.id = *b.send(t, f.url, "m", opts...).MessageId
				tt.prepare(t, f)
				var err error
				if tt.op == "delete" {
					err = b.deleteMessage(f.url, f.handle)
				} else {
					err = b.changeVisibility(f.url, f.handle, 30)
				}
				if tt.wantCode == "" {
					require.NoError(t, err)
				} else {
					requireAPIError(t, err, tt.wantCode, fmt.Sprintf(tt.wantMsg, f.handle))
				}
				if tt.wantCode == "ReceiptHandleIsInvalid" {
					var typed *types.ReceiptHandleIsInvalid
					require.ErrorAs(t, err, &typed, "modeled error arrives typed")
				}
				if tt.wantCode == "InvalidParameterValue" {
					var generic *smithy.GenericAPIError
					require.ErrorAs(t, err, &generic, "unmodeled error arrives as GenericAPIError")
				}
				if tt.check != nil {
					tt.check(t, f)
				}
			})
		})
	}
}

// supersede receives the message, lets the lease lapse and receives it again; the
// first handle is then superseded.
func supersede(t *testing.T, f *fixture) {
	f.handle = *f.b.receive(t, f.url)[0].ReceiptHandle
	time.Sleep(30 * time.Second)
	require.Len(t, f.b.receive(t, f.url), 1)
}

func deleted(t *testing.T, f *fixture) {
	f.handle = *f.b.receive(t, f.url)[0].ReceiptHandle
	require.NoError(t, f.b.deleteMessage(f.url, f.handle))
}

func expired(t *testing.T, f *fixture) {
	f.handle = *f.b.receive(t, f.url)[0].ReceiptHandle
	time.Sleep(31 * time.Second)
}

// Batch forms report per-entry failures in Failed[] of a 200.
func TestStaleHandlesBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "10"})
		b.send(t, url, "a", withGroup("g1"))
		b.send(t, url, "b", withGroup("g2"))
		got := b.receive(t, url)
		require.Len(t, got, 2)
		time.Sleep(11 * time.Second)

		del, err := b.c.DeleteMessageBatch(b.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: []types.DeleteMessageBatchRequestEntry{
			{Id: aws.String("expired"), ReceiptHandle: got[0].ReceiptHandle},
			{Id: aws.String("garbage"), ReceiptHandle: aws.String("garbage")},
		}})
		require.NoError(t, err)
		require.Empty(t, del.Successful)
		require.Equal(t, []types.BatchResultErrorEntry{
			{Id: aws.String("expired"), SenderFault: true, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("The receipt handle has expired")},
			{Id: aws.String("garbage"), SenderFault: true, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String(`The input receipt handle "garbage" is not a valid receipt handle.`)},
		}, del.Failed)

		got = b.receive(t, url)
		require.Len(t, got, 2)
		time.Sleep(time.Second) // 43200 s from now is then 1 s past the ceiling
		cv, err := b.c.ChangeMessageVisibilityBatch(b.ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url, Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
			{Id: aws.String("ok"), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 60},
			{Id: aws.String("ceiling"), ReceiptHandle: got[1].ReceiptHandle, VisibilityTimeout: 43200},
		}})
		require.NoError(t, err)
		require.Equal(t, []types.ChangeMessageVisibilityBatchResultEntry{{Id: aws.String("ok")}}, cv.Successful)
		require.Len(t, cv.Failed, 1)
		require.Equal(t, "ceiling", *cv.Failed[0].Id)
		require.Equal(t, "InvalidParameterValue", *cv.Failed[0].Code)
	})
}

// MessageNotInflight has no known real trigger: only fault injection produces it.
func TestMessageNotInflightByInjection(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", nil)
		b.send(t, url, "m")
		h := *b.receive(t, url)[0].ReceiptHandle
		b.srv.FailNext("ChangeMessageVisibility", 1, sqstest.FaultMessageNotInflight)
		err := b.changeVisibility(url, h, 60)
		var typed *types.MessageNotInflight
		require.True(t, errors.As(err, &typed), "got %T %v", err, err)
		require.Equal(t, "AWS.SimpleQueueService.MessageNotInflight", typed.ErrorCode())
		require.NoError(t, b.changeVisibility(url, h, 60), "only the next call fails")
		st, _ := b.srv.Messages(url)[0], 0
		require.Len(t, st.VisibilityChanges, 1, "the injected failure never reached the message")
	})
}

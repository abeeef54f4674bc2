package sqsconsumer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

func TestClassifyCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code, msg string
		want      errorKind
	}{
		{"ReceiptHandleIsInvalid", `The input receipt handle "x" is not a valid receipt handle.`, kindLost},
		{"AWS.SimpleQueueService.MessageNotInflight", "", kindLost},
		{"MessageNotInflight", "", kindLost},
		{"InvalidParameterValue", "Value x for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", kindLost},
		{"InvalidParameterValueException", "Value x for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", kindLost},
		{"ReceiptHandleIsInvalid", "The receipt handle has expired", kindLost},
		{"InvalidParameterValue", "Value 43200 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", kindCeiling},
		{"InvalidParameterValue", "Value 50000 for parameter VisibilityTimeout is invalid.", kindPermanent},
		{"AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.", kindPermanent},
		{"RequestThrottled", "", kindTransient},
		{"InternalError", "", kindTransient},
		{"ServiceUnavailable", "", kindTransient},
	}
	for _, tt := range tests {
		t.Run(tt.code+"/"+tt.msg, func(t *testing.T) {
			require.Equal(t, tt.want, classifyCode(tt.code, tt.msg))
		})
	}
}

// Every form SQS uses to say a receipt handle is unusable is classified
// as a lost lease, including the InvalidParameterValue messages that arrive
// as *smithy.GenericAPIError.
func TestClassifyLostHandles(t *testing.T) {
	t.Parallel()
	require.Equal(t, kindLost, classify(&types.ReceiptHandleIsInvalid{}))
	require.Equal(t, kindLost, classify(&EntryError{Code: "ReceiptHandleIsInvalid", Message: "The receipt handle has expired"}))
	require.NotEqual(t, kindLost, classify(errors.New("boom")))
	require.NotEqual(t, kindLost, classify(&EntryError{Code: "RequestThrottled"}))
}

// Issue 16: RetryAfter with a negative delay redelivers at once instead of
// failing its release and leaving the message for the whole lease.
func TestRetryAfterClamps(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want time.Duration
	}{{-5 * time.Second, 0}, {0, 0}, {42 * time.Second, 42 * time.Second}, {13 * time.Hour, 12 * time.Hour}} {
		got, ok := retryAfterOf(RetryAfter(errors.New("x"), tt.in))
		require.True(t, ok)
		require.Equal(t, tt.want, got, "RetryAfter(err, %v)", tt.in)
	}
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		var calls atomic.Int32
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error {
			if calls.Add(1) == 1 {
				return RetryAfter(errors.New("again"), -5*time.Second)
			}
			return nil
		}), WithVisibilityTimeout(time.Minute))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.True(t, st.Deleted, "delivered again at once, not after the minute-long lease")
		// A receive in flight may take the message while its release is
		// on the wire: the lease adopts that handle and releases it too.
		require.GreaterOrEqual(t, st.ReceiveCount, 2)
		require.Equal(t, int32(2), calls.Load(), "handled twice: the failure and the success")
	})
}

func TestPermanentMarksAndUnwraps(t *testing.T) {
	base := errors.New("bad body")
	p := Permanent(base)
	require.True(t, IsPermanent(p))
	require.ErrorIs(t, p, base)
	require.True(t, IsPermanent(RetryAfter(p, time.Second)))
	require.NoError(t, Permanent(nil), "return Permanent(err) with a nil err is a success")
	require.False(t, IsPermanent(base))
	require.False(t, IsPermanent(nil))
	require.Contains(t, p.Error(), "bad body")
}

package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// outcomeOf is the one list of what a handler's result counts as for the
// breaker and the adaptive limit.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name     string
		err      error
		leaseErr error
		shutdown bool
		want     outcomeKind
	}{
		{"success", nil, nil, false, outcomeSuccess},
		{"a success after the lease ended is still a success (its delete is refused)", nil, ErrLeaseLost, false, outcomeSuccess},
		{"an error", boom, nil, false, outcomeFailure},
		{"a panic", &PanicError{Value: "x"}, nil, false, outcomeFailure},
		{"a handler timeout", context.DeadlineExceeded, nil, false, outcomeFailure},
		{"RetryAfter around an error", RetryAfter(boom, time.Minute), nil, false, outcomeFailure},
		{"RetryAfter(nil): a retry asked for, nothing failed", RetryAfter(nil, time.Minute), nil, false, outcomeNeutral},
		{"the lease ended", boom, ErrLeaseExpired, false, outcomeNeutral},
		{"cancelled at the lease's ceiling, whatever it returns", context.Canceled, ErrLeaseCeiling, false, outcomeNeutral},
		{"the shutdown cancelled it", boom, nil, true, outcomeNeutral},
		{"returns ErrShutdown", ErrShutdown, nil, false, outcomeNeutral},
		{"returns the lease's cause", ErrLeaseLost, nil, false, outcomeNeutral},
		{"returns the ceiling", errors.Join(boom, ErrLeaseCeiling), nil, false, outcomeNeutral},
		{"an earlier message of its FIFO group failed", earlierFailed, nil, false, outcomeNeutral},
		{"an idempotency duplicate in progress (NewIdempotent marks it Neutral)", Neutral(RetryAfter(ErrInProgress, 30*time.Second)), nil, false, outcomeNeutral},
		{"Permanent", Permanent(boom), nil, false, outcomeNeutral},
		{"Neutral", Neutral(boom), nil, false, outcomeNeutral},
		{"Neutral inside RetryAfter", RetryAfter(Neutral(boom), time.Second), nil, false, outcomeNeutral},
		{"Throttled", Throttled(boom, time.Second), nil, false, outcomeThrottled},
		{"Throttled(nil)", Throttled(nil, 0), nil, false, outcomeThrottled},
		{"Throttled wrapped by the handler's own error", fmt.Errorf("calling the API: %w", Throttled(boom, 0)), nil, false, outcomeThrottled},
		{"Permanent wins over Throttled", Throttled(Permanent(boom), time.Second), nil, false, outcomeNeutral},
		{"Neutral wins over Throttled", Neutral(Throttled(boom, time.Second)), nil, false, outcomeNeutral},
		{"Throttled when the lease ended", Throttled(boom, time.Second), ErrLeaseLost, false, outcomeNeutral},
		{"Throttled at shutdown", Throttled(boom, time.Second), nil, true, outcomeNeutral},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, outcomeOf(tt.err, tt.leaseErr, tt.shutdown), tt.name)
	}
}

func TestNeutralAndThrottledWrap(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	require.NoError(t, Neutral(nil))
	require.ErrorIs(t, Neutral(boom), boom)
	require.Equal(t, "boom", Neutral(boom).Error())
	require.True(t, IsNeutral(fmt.Errorf("x: %w", Neutral(boom))))
	require.False(t, IsNeutral(boom))

	th := Throttled(boom, 1500*time.Millisecond)
	require.ErrorIs(t, th, boom)
	require.True(t, IsThrottled(th))
	require.False(t, IsThrottled(boom))
	require.Equal(t, "boom (throttled, retry after 1.5s)", th.Error())
	require.Equal(t, "downstream throttled (throttled)", Throttled(nil, -time.Second).Error())
	d, ok := retryAfterOf(th)
	require.True(t, ok)
	require.Equal(t, 1500*time.Millisecond, d)
	_, ok = retryAfterOf(Throttled(boom, 0))
	require.False(t, ok, "no delay said: the backoff applies")
	d, _ = retryAfterOf(Throttled(boom, 13*time.Hour))
	require.Equal(t, MaxVisibilityTimeout, d)
	d, _ = retryAfterOf(RetryAfter(Throttled(boom, time.Minute), 5*time.Second))
	require.Equal(t, 5*time.Second, d, "an explicit RetryAfter outside wins")
	require.Equal(t, "retry requested (retry after 1s)", RetryAfter(nil, time.Second).Error())
}

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		for _, tt := range []struct {
			in   string
			want time.Duration
			ok   bool
		}{
			{"", 0, false},
			{"  ", 0, false},
			{"120", 2 * time.Minute, true},
			{" 0 ", 0, true},
			{"99999999", MaxVisibilityTimeout, true},
			{"-5", 0, false},
			{"1.5", 0, false},
			{"soon", 0, false},
			{now.Add(90 * time.Second).UTC().Format(http.TimeFormat), 90 * time.Second, true},
			{now.Add(-time.Hour).UTC().Format(http.TimeFormat), 0, true},
			{now.Add(48 * time.Hour).UTC().Format(time.RFC850), MaxVisibilityTimeout, true},
		} {
			d, ok := RetryAfterHeader(tt.in)
			require.Equal(t, tt.ok, ok, "%q", tt.in)
			require.Equal(t, tt.want, d, "%q", tt.in)
		}
	})
}

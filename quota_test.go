package sqsconsumer

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// atQuota is a queue at SQS's in-flight quota, as AWS documents it: every
// long poll waits its whole wait time and answers with nothing, no error,
// while the queue's counts show messages visible and in flight. (sqstest
// has no such quota, and holding 120,000 messages in flight there would
// cost far more than this.) countReads counts the reads of the counts.
type atQuota struct {
	Client
	visible, inFlight atomic.Int64
	countReads        atomic.Int64
}

func (a *atQuota) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	select {
	case <-time.After(time.Duration(in.WaitTimeSeconds) * time.Second):
		return &sqs.ReceiveMessageOutput{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *atQuota) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	out, err := a.Client.GetQueueAttributes(ctx, in, optFns...)
	if err != nil {
		return out, err
	}
	if _, ok := out.Attributes["ApproximateNumberOfMessagesNotVisible"]; ok {
		a.countReads.Add(1)
		out.Attributes["ApproximateNumberOfMessages"] = strconv.FormatInt(a.visible.Load(), 10)
		out.Attributes["ApproximateNumberOfMessagesNotVisible"] = strconv.FormatInt(a.inFlight.Load(), 10)
	}
	return out, err
}

// A queue at the in-flight quota: receives come back empty while SQS
// counts messages visible and nearly 120,000 in flight. Health names it
// as a warning (healthy: a restart would not help), after 3 empty
// receives, reading the counts at most once every 5 minutes; an idle
// queue, or one far from the quota, gets no warning.
func TestHealthWarnsAtTheInFlightQuota(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name              string
		visible, inFlight int64
		warn              bool
	}{
		{"at the quota", 5000, 119_500, true},
		{"near the quota", 1, InFlightNearQuota, true},
		{"far from it", 5000, 50_000, false},
		{"idle", 0, 0, false},
		{"everything in flight, nothing visible", 0, 120_000, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				q := &atQuota{Client: b.client}
				q.visible.Store(tt.visible)
				q.inFlight.Store(tt.inFlight)
				c, err := New(q, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithVisibilityTimeout(30*time.Second))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(50 * time.Second) // two empty receives
				require.Empty(t, c.Health().Warnings)
				require.Zero(t, q.countReads.Load(), "read before 3 empty receives")

				time.Sleep(9 * time.Minute) // receives every 20 s: the counts read at 1 min and 6 min
				require.Equal(t, int64(2), q.countReads.Load(), "the counts' reads in 9m50s")
				h := c.Health()
				require.True(t, h.Healthy, h.Problems)
				require.True(t, h.Ready)
				if !tt.warn {
					require.Empty(t, h.Warnings)
					require.NoError(t, stop())
					return
				}
				require.Len(t, h.Warnings, 1)
				require.Contains(t, h.Warnings[0], "receives came back empty while SQS counted")
				require.Contains(t, h.Warnings[0], strconv.FormatInt(tt.inFlight, 10)+" in flight, near the in-flight quota of about 120000 per queue")
				_, body := healthGet(t, c, "GET")
				require.NotEmpty(t, body["warnings"])
				require.NoError(t, stop())
			})
		})
	}
}

// With WithScaling the signal's readings serve: the quota adds no call.
func TestInFlightQuotaUsesTheScalingReadings(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		q := &atQuota{Client: b.client}
		q.visible.Store(3000)
		q.inFlight.Store(119_000)
		c, err := New(q, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithScaling(ScalingPolicy{Target: time.Minute, Interval: 30 * time.Second}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10*time.Minute + time.Second)
		require.Equal(t, c.Stats().Calls.ScalingAttributes, q.countReads.Load(), "every read of the counts was the scaling signal's")
		h := c.Health()
		require.Len(t, h.Warnings, 1)
		require.Contains(t, h.Warnings[0], "119000 in flight")
		require.NoError(t, stop())
	})
}

// The warning needs empty receives: one that brings a message ends it.
func TestInFlightQuotaWarningEndsWithAMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		q := &atQuota{Client: b.client}
		q.visible.Store(3000)
		q.inFlight.Store(119_000)
		c, err := New(q, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.Len(t, c.Health().Warnings, 1)
		c.runOf().quota.answered(1, time.Now()) // a receive that got a message
		require.Empty(t, c.Health().Warnings)
		require.NoError(t, stop())
	})
}

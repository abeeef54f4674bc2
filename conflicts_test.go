package sqsconsumer

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// Options that contradict each other, or that one makes do nothing, are
// refused at New; the error wraps ErrInvalidOption and names both.
func TestConflictingOptionsNamed(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	const u = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	const fifo = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo"
	tests := []struct {
		name string
		url  string
		opts []Option
		want []string // each must be in the error: both options' names
	}{
		{"dead-letter queue is the queue", u, []Option{WithDeadLetterQueue(u)}, []string{"WithDeadLetterQueue(" + u + ")", "the queue the Consumer reads"}},
		{"dead-letter queue is the queue, host case and slash", u, []Option{WithDeadLetterQueue("HTTPS://SQS.us-east-1.AmazonAWS.com/123456789012/jobs/")}, []string{"WithDeadLetterQueue(", "the queue the Consumer reads"}},
		{"dead-letter queue is the queue, default port", u, []Option{WithDeadLetterQueue("https://sqs.us-east-1.amazonaws.com:443/123456789012/jobs")}, []string{"WithDeadLetterQueue(", "the queue the Consumer reads"}},
		{"stall under the default wait", u, []Option{WithHealthLimits(15*time.Second, 0)}, []string{"WithHealthLimits", "WithWaitTime's default long-poll wait (20s)", "at least 30s"}},
		{"stall under the wait", u, []Option{WithWaitTime(10 * time.Second), WithHealthLimits(19*time.Second, 0)}, []string{"WithHealthLimits", "WithWaitTime(10s)", "at least 20s"}},
		{"stall under the queue's wait", u, []Option{WithWaitTime(0), WithHealthLimits(29*time.Second, 0)}, []string{"WithHealthLimits", "WithWaitTime(0)"}},
		{"stall under the heartbeat", u, []Option{WithVisibilityTimeout(3 * time.Minute), WithHealthLimits(65*time.Second, 0)}, []string{"WithHealthLimits", "WithVisibilityTimeout(3m0s)", "at least 1m10s"}},
		{"stall under the heartbeat interval", u, []Option{WithHeartbeatInterval(time.Minute), WithHealthLimits(65*time.Second, 0)}, []string{"WithHealthLimits", "WithHeartbeatInterval(1m0s)"}},
		{"group limit on a FIFO queue", fifo, []Option{WithGroupLimit(2)}, []string{"WithGroupLimit(2)", "FIFO queue"}},
		{"fair dispatch on a FIFO queue", fifo, []Option{WithFairDispatch(true)}, []string{"WithFairDispatch(true)", "FIFO queue"}},
		{"arrival order on a FIFO queue", fifo, []Option{WithFairDispatch(false)}, []string{"WithFairDispatch(false)", "FIFO queue"}},
		{"group limit without fair dispatch", u, []Option{WithGroupLimit(3), WithFairDispatch(false)}, []string{"WithGroupLimit(3)", "WithFairDispatch(false)"}},
		{"group limit at the concurrency", u, []Option{WithGroupLimit(4), WithConcurrency(4)}, []string{"WithGroupLimit(4)", "WithConcurrency(4)"}},
		{"scaling and its target", u, []Option{WithScaling(ScalingPolicy{Target: time.Minute, Interval: time.Minute}), WithScalingTarget(30 * time.Second)}, []string{"WithScaling", "WithScalingTarget"}},
		{"scaling target and scaling", u, []Option{WithScalingTarget(30 * time.Second), WithScaling(ScalingPolicy{Target: time.Minute})}, []string{"WithScaling", "WithScalingTarget"}},
		{"ceiling grace past the max lease", u, []Option{WithCeilingGrace(time.Hour), WithMaxLeaseDuration(time.Hour)}, []string{"WithCeilingGrace(1h0m0s)", "WithMaxLeaseDuration(1h0m0s)"}},
		{"ceiling grace at the default max lease", u, []Option{WithCeilingGrace(12 * time.Hour)}, []string{"WithCeilingGrace(12h0m0s)", "WithMaxLeaseDuration(12h0m0s)"}},
		{"adaptive and heartbeat", u, []Option{WithAdaptiveVisibility(10*time.Second, time.Minute), WithHeartbeatInterval(5 * time.Second)}, []string{"WithAdaptiveVisibility", "WithHeartbeatInterval"}},
		{"adaptive above the max lease", u, []Option{WithAdaptiveVisibility(10*time.Second, time.Hour), WithMaxLeaseDuration(30 * time.Minute)}, []string{"WithAdaptiveVisibility(10s, 1h0m0s)", "WithMaxLeaseDuration(30m0s)"}},
		{"visibility outside adaptive", u, []Option{WithAdaptiveVisibility(10*time.Second, time.Minute), WithVisibilityTimeout(5 * time.Minute)}, []string{"WithVisibilityTimeout(5m0s)", "WithAdaptiveVisibility(10s, 1m0s)"}},
		{"handler timeout past the max lease", u, []Option{WithHandlerTimeout(2 * time.Hour), WithMaxLeaseDuration(time.Hour)}, []string{"WithHandlerTimeout(2h0m0s)", "WithMaxLeaseDuration(1h0m0s)"}},
		{"health handler limit within the handler timeout", u, []Option{WithHandlerTimeout(time.Minute), WithHealthLimits(0, 30*time.Second)}, []string{"WithHealthLimits' handler limit (30s)", "WithHandlerTimeout(1m0s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(&sqs.Client{}, tt.url, h, tt.opts...)
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidOption)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// A Batch handler's window that the lease ceiling leaves no room for is
// refused, naming both the window and WithMaxLeaseDuration: a message
// gathering alone would be told to stop before its batch was sent, at
// every delivery (it was never handled). At New when the ceiling grace is
// known; at Run, before any receive, when only the queue's
// VisibilityTimeout tells it. Just below the edge it is accepted.
func TestBatchWindowPastTheLeaseCeilingRefused(t *testing.T) {
	t.Parallel()
	const u = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	batch := func(window time.Duration) Handler {
		h, err := Batch(func(context.Context, []*Message) error { return nil }, 10, window)
		require.NoError(t, err)
		return h
	}
	// Visibility 30 s: interval and grace 10 s; room 60 - 10 - 1 = 49 s.
	opts := []Option{WithVisibilityTimeout(30 * time.Second), WithMaxLeaseDuration(time.Minute)}
	for _, window := range []time.Duration{49 * time.Second, 2 * time.Minute} {
		_, err := New(&sqs.Client{}, u, batch(window), opts...)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, fmt.Sprintf("Batch window (%v)", window))
		require.ErrorContains(t, err, "WithMaxLeaseDuration(1m0s)")
		require.ErrorContains(t, err, "one heartbeat interval")
	}
	_, err := New(&sqs.Client{}, u, batch(30*time.Second), WithMaxLeaseDuration(time.Minute), WithCeilingGrace(30*time.Second))
	require.ErrorContains(t, err, "Batch window (30s)")
	require.ErrorContains(t, err, "WithCeilingGrace(30s)")
	_, err = New(&sqs.Client{}, u, batch(49*time.Second-time.Millisecond), opts...)
	require.NoError(t, err)
	_, err = New(&sqs.Client{}, u, batch(5*time.Minute)) // the default 12 h ceiling
	require.NoError(t, err)

	// Only the queue's VisibilityTimeout (30 s) tells the grace.
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"VisibilityTimeout": "30"})
		b.send(t, 1)
		c, err := New(b.client, b.url, batch(time.Minute), WithMaxLeaseDuration(time.Minute))
		require.NoError(t, err)
		err = c.Run(context.Background())
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "Batch window (1m0s)")
		require.ErrorContains(t, err, "WithMaxLeaseDuration(1m0s)")
		require.Zero(t, b.srv.CallCount("ReceiveMessage"))
	})
}

// The pairs next to the refused ones that are fine stay accepted: options
// given twice take the later value.
func TestCompatibleOptionsAccepted(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	const u = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	for name, opts := range map[string][]Option{
		"another dead-letter queue":              {WithDeadLetterQueue(u + "-dlq")},
		"stall at the least":                     {WithHealthLimits(30*time.Second, 0)},
		"stall with a short shutdown":            {WithShutdownTimeout(5 * time.Second), WithHealthLimits(15*time.Second, 0)},
		"stall over the heartbeat":               {WithVisibilityTimeout(3 * time.Minute), WithHealthLimits(70*time.Second, 0)},
		"group limit with fair dispatch":         {WithGroupLimit(3), WithFairDispatch(true)},
		"fair dispatch off on a standard queue":  {WithFairDispatch(false)},
		"scaling twice":                          {WithScaling(ScalingPolicy{Target: time.Minute}), WithScaling(ScalingPolicy{Target: 2 * time.Minute})},
		"scaling target twice":                   {WithScalingTarget(time.Minute), WithScalingTarget(2 * time.Minute)},
		"ceiling grace under the max lease":      {WithCeilingGrace(time.Minute), WithMaxLeaseDuration(time.Hour)},
		"visibility inside adaptive":             {WithAdaptiveVisibility(10*time.Second, time.Minute), WithVisibilityTimeout(30 * time.Second)},
		"handler timeout under the max lease":    {WithHandlerTimeout(time.Hour)},
		"health handler limit over its timeout":  {WithHandlerTimeout(time.Minute), WithHealthLimits(0, 2*time.Minute)},
		"concurrency given twice, the later one": {WithConcurrency(1), WithGroupLimit(3), WithConcurrency(5)},
	} {
		c, err := New(&sqs.Client{}, u, h, opts...)
		require.NoError(t, err, name)
		require.NotNil(t, c, name)
	}
	c, err := New(&sqs.Client{}, u, h, WithScalingTarget(time.Minute), WithScalingTarget(2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, c.s.scaling.Target, "the later value wins")
}

func TestSameQueueURL(t *testing.T) {
	t.Parallel()
	const u = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	for _, same := range []string{u, u + "/", "HTTPS://SQS.US-EAST-1.AMAZONAWS.COM/123456789012/jobs", "https://sqs.us-east-1.amazonaws.com:443/123456789012/jobs"} {
		require.True(t, sameQueueURL(u, same), same)
	}
	for _, other := range []string{u + "-dlq", "https://sqs.us-east-1.amazonaws.com/123456789012/JOBS", "http://sqs.us-east-1.amazonaws.com/123456789012/jobs",
		"https://sqs.us-east-1.amazonaws.com:8443/123456789012/jobs", "https://sqs.us-east-2.amazonaws.com/123456789012/jobs"} {
		require.False(t, sameQueueURL(u, other), other)
	}
	require.True(t, sameQueueURL("http://localhost:80/000000000000/q", "http://LOCALHOST/000000000000/q"))
}

// fifoByAttribute says FifoQueue is true whatever the queue's URL, as an
// endpoint whose URLs do not end in ".fifo" might.
type fifoByAttribute struct{ Client }

func (f fifoByAttribute) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	out, err := f.Client.GetQueueAttributes(ctx, in, optFns...)
	if err == nil {
		out.Attributes["FifoQueue"] = "true"
	}
	return out, err
}

// What only the queue can tell is refused at Run: a FIFO queue whose URL
// does not say so, a stall limit under the heartbeat of the queue's own
// VisibilityTimeout.
func TestConflictingOptionsAtRun(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	t.Run("FIFO by attribute", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			for _, opt := range []Option{WithGroupLimit(2), WithFairDispatch(true)} {
				c, err := New(fifoByAttribute{b.client}, b.url, h, opt)
				require.NoError(t, err, "the URL does not tell")
				err = runFor(c, 2*time.Second)
				require.ErrorIs(t, err, ErrInvalidOption)
				require.ErrorContains(t, err, "does nothing on a FIFO queue ("+b.url+")")
			}
			require.Zero(t, b.srv.CallCount("ReceiveMessage"))
		})
	})
	t.Run("stall under the queue's heartbeat", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, map[string]string{"VisibilityTimeout": "300"})
			c, err := New(b.client, b.url, h, WithHealthLimits(time.Minute, 0))
			require.NoError(t, err, "the heartbeat is not known before Run")
			err = runFor(c, 2*time.Second)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, "WithHealthLimits' stall limit 1m0s is below the heartbeat interval (1m40s, set by the queue's VisibilityTimeout (5m0s), a third of it)")
			require.ErrorContains(t, err, "at least 1m50s")
		})
	})
}

// runFor runs c for at most d (virtual time in a bubble), so that a
// Consumer that should have refused to start still ends the test.
func runFor(c *Consumer, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Run(ctx)
}

// runBounded runs c for at most d (virtual time in a bubble) and at most
// n signals on calls (a handler's, say): a Consumer that loops without
// blocking does not let virtual time pass.
func runBounded(c *Consumer, d time.Duration, calls <-chan struct{}, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	go func() {
		for range n {
			select {
			case <-calls:
			case <-ctx.Done():
				return
			}
		}
		cancel()
	}()
	return c.Run(ctx)
}

package sqsconsumer

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// WithRequireDeadLetterQueue refuses a queue without a dead-letter queue
// before receiving anything, naming the queue and both fixes.
func TestRequireDeadLetterQueueRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		attrs map[string]string
		opts  func(b bundle) []Option
		fault bool // GetQueueAttributes is denied
		noTx  bool // a client without SendMessage
		why   string
	}{
		{name: "no redrive policy", why: "it has no RedrivePolicy and WithDeadLetterQueue was not given"},
		{name: "attributes unreadable", fault: true, opts: func(bundle) []Option { return []Option{WithVisibilityTimeout(30 * time.Second)} },
			why: "its RedrivePolicy could not be read"},
		{name: "a dead-letter queue the client cannot send to", noTx: true,
			opts: func(b bundle) []Option { return []Option{WithDeadLetterQueue(b.url + "-dlq")} },
			why:  "has no SendMessage method) and the queue has no RedrivePolicy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, tt.attrs)
				_, err := b.srv.CreateQueue("q-dlq", nil)
				require.NoError(t, err)
				b.send(t, 1)
				if tt.fault {
					b.srv.FailNext("GetQueueAttributes", 1, sqstest.FaultAccessDenied)
				}
				opts := []Option{WithRequireDeadLetterQueue()}
				if tt.opts != nil {
					opts = append(opts, tt.opts(b)...)
				}
				var client Client = b.client
				if tt.noTx {
					client = noSend{b.client}
				}
				handled := false
				c, err := New(client, b.url, HandlerFunc(func(context.Context, *Message) error { handled = true; return nil }), opts...)
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a Run that was not refused
				defer cancel()
				err = c.Run(ctx)
				require.ErrorIs(t, err, ErrInvalidOption)
				require.ErrorContains(t, err, "WithRequireDeadLetterQueue: queue "+b.url+" has no dead-letter queue")
				require.ErrorContains(t, err, tt.why)
				require.ErrorContains(t, err, "set a RedrivePolicy on the queue")
				require.ErrorContains(t, err, "or pass WithDeadLetterQueue(dlqURL)")
				require.Zero(t, b.srv.CallCount("ReceiveMessage"), "refused before any receive")
				require.False(t, handled)
				require.False(t, c.Health().Healthy, "Health reports why Run ended")
				require.Contains(t, c.Settings().Pending, "fifo", "a queue Run refused leaves what it would have resolved pending")
			})
		})
	}
}

// A RedrivePolicy, or WithDeadLetterQueue, satisfies it.
func TestRequireDeadLetterQueueAccepts(t *testing.T) {
	t.Parallel()
	fail := HandlerFunc(func(context.Context, *Message) error { return Permanent(errors.New("bad")) })
	t.Run("RedrivePolicy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setupDLQ(t, false, 5, nil)
			ids := b.send(t, 1)
			c, err := New(noSend{b.client}, b.url, fail, WithRequireDeadLetterQueue(), WithBackoff(func(int) time.Duration { return time.Second }))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(5 * time.Minute)
			require.NoError(t, stop())
			// The client cannot move it: SQS's redrive does, after 5 receives.
			require.True(t, b.state(t, ids[0]).MovedToDLQ)
		})
	})
	t.Run("WithDeadLetterQueue", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			dlq, err := b.srv.CreateQueue("elsewhere", nil)
			require.NoError(t, err)
			ids := b.send(t, 1)
			c, err := New(b.client, b.url, fail, WithRequireDeadLetterQueue(), WithDeadLetterQueue(dlq))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			st := b.state(t, ids[0])
			require.True(t, st.Deleted)
			require.Equal(t, 1, st.ReceiveCount, "moved at once")
			require.Len(t, b.srv.Messages(dlq), 1, "in the dead-letter queue")
			require.Equal(t, dlq, c.Settings().DeadLetterQueue)
		})
	})
}

// A RedrivePolicy without a target (SQS refuses one; an emulator may
// not) does not satisfy it.
func TestRequireDeadLetterQueueUntargetedPolicy(t *testing.T) {
	t.Parallel()
	s := &settings{requireDLQ: true}
	attrs := map[string]string{"RedrivePolicy": `{"maxReceiveCount":"5"}`}
	err := requireDeadLetter(s, testQueueURL, deadLetter{}, attrs, nil)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "its RedrivePolicy names no deadLetterTargetArn")
	attrs["RedrivePolicy"] = `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:jobs-dlq","maxReceiveCount":"5"}`
	require.NoError(t, requireDeadLetter(s, testQueueURL, deadLetter{}, attrs, nil))
	require.NoError(t, requireDeadLetter(&settings{}, testQueueURL, deadLetter{}, nil, nil), "off by default")
}

// A first contact that can heal (throttling, a 5xx) does not refuse a
// queue that has a dead-letter queue: with WithVisibilityTimeout the
// queue's attributes are optional for the lease, but the requirement must
// see the RedrivePolicy, so their read is retried until SQS answers, as
// without WithVisibilityTimeout. Before, Run refused the queue at once
// ("its RedrivePolicy could not be read").
func TestRequireDeadLetterQueueRetriesAFirstContactThatHeals(t *testing.T) {
	t.Parallel()
	for _, f := range []sqstest.Fault{sqstest.FaultThrottled, sqstest.FaultInternalError} {
		t.Run(f.Type, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setupDLQ(t, false, 5, nil)
				id := b.send(t, 1)[0]
				b.srv.FailNext("GetQueueAttributes", 6, f) // about 2 s of backoff
				done := make(chan struct{})
				c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { close(done); return nil }),
					WithRequireDeadLetterQueue(), WithVisibilityTimeout(30*time.Second))
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan error, 1)
				go func() { ran <- c.Run(ctx) }()
				time.Sleep(time.Second)
				require.Contains(t, c.Health().Retrying, f.Code(), "Health says why")
				select {
				case err := <-ran:
					require.Fail(t, "Run ended before SQS answered", "%v", err)
				case <-done:
				}
				cancel()
				require.NoError(t, <-ran)
				require.True(t, b.state(t, id).Deleted)
				require.Equal(t, b.dlq, c.Settings().DeadLetterQueue)
			})
		})
	}
}

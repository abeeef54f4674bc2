package sqsconsumer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// A policy turns a panic into Permanent: the message goes to the
// dead-letter queue at once, and middleware sees the policy's error.
func TestPanicPolicyPermanentGoesToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		ids := b.send(t, 1)
		var logs syncLog
		var mu sync.Mutex
		var site string
		var seen []error
		var policyMsg *Message
		policy := func(ctx context.Context, m *Message, p *PanicError) error {
			mu.Lock()
			defer mu.Unlock()
			site, policyMsg = p.Site(), m
			Logger(ctx).Warn("platform: handler panicked", "panic", p.Value, "class", "permanent")
			return Permanent(p)
		}
		mw := func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, m *Message) error {
				err := next.HandleMessage(ctx, m)
				mu.Lock()
				seen = append(seen, err)
				mu.Unlock()
				return err
			})
		}
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { panic("bad input") }),
			WithPanicPolicy(policy), WithMiddleware(mw), WithLogger(logs.logger()))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())

		st := b.state(t, ids[0])
		require.True(t, st.Deleted)
		require.Equal(t, 1, st.ReceiveCount, "moved at once")
		got := b.receiveDLQ(t)
		require.Len(t, got, 1)
		require.Equal(t, "permanent: sqsconsumer: handler panicked: bad input", aws.ToString(got[0].MessageAttributes["sqsconsumer.error"].StringValue))

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 1)
		require.True(t, IsPermanent(seen[0]), "middleware sees the policy's error, not a panic: %v", seen[0])
		var pe *PanicError
		require.ErrorAs(t, seen[0], &pe)
		require.Equal(t, "bad input", pe.Value)
		require.Contains(t, site, "panicpolicy_test.go", "Site names the handler")
		require.Equal(t, ids[0], policyMsg.ID)
		out := logs.String()
		require.Contains(t, out, `msg="platform: handler panicked"`)
		require.Contains(t, out, "message_id="+ids[0], "the policy's line carries the message")
		require.NotContains(t, out, "sqsconsumer: handler panicked\"", "the library logs no panic line of its own")
	})
}

// Without a policy a panic is what it was: a *PanicError, logged at
// Error with where it happened and at Debug with its stack, retried
// after the backoff.
func TestPanicDefaultUnchanged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		var logs syncLog
		rec := &recorder{}
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { panic("boom") }),
			WithLogger(logs.logger()), WithObserver(rec), WithBackoff(func(int) time.Duration { return time.Hour }))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.False(t, st.Deleted)
		require.Equal(t, time.Hour, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout)
		failed := eventErrs(rec, EventFailed)
		require.Len(t, failed, 1)
		var pe *PanicError
		require.True(t, errors.As(failed[0], &pe) && failed[0] == error(pe), "a bare *PanicError: %v", failed[0])
		out := logs.String()
		require.Contains(t, out, `level=ERROR msg="sqsconsumer: handler panicked"`)
		require.Contains(t, out, "panic=boom at=")
		require.Contains(t, out, `level=DEBUG msg="sqsconsumer: handler panic stack"`)
	})
}

func eventErrs(r *recorder, k EventKind) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []error
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e.Err)
		}
	}
	return out
}

// A policy that panics, or returns nil, leaves the handler's panic as
// it was: a *PanicError, retried after the backoff, never deleted.
func TestPanicPolicyFallsBack(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		policy PanicPolicy
		log    string
	}{
		{"policy panics", func(context.Context, *Message, *PanicError) error { panic("policy bug") },
			`level=ERROR msg="sqsconsumer: the panic policy panicked; the handler's panic stands as a *PanicError"`},
		{"policy returns nil", func(context.Context, *Message, *PanicError) error { return nil }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				ids := b.send(t, 1)
				var logs syncLog
				rec := &recorder{}
				c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { panic("boom") }),
					WithPanicPolicy(tt.policy), WithLogger(logs.logger()), WithObserver(rec),
					WithBackoff(func(int) time.Duration { return time.Hour }))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(time.Minute)
				require.NoError(t, stop())
				st := b.state(t, ids[0])
				require.False(t, st.Deleted, "a panic never deletes")
				require.Equal(t, time.Hour, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout)
				failed := eventErrs(rec, EventFailed)
				require.Len(t, failed, 1)
				pe, ok := failed[0].(*PanicError)
				require.True(t, ok, "%T", failed[0])
				require.Equal(t, "boom", pe.Value)
				if tt.log != "" {
					out := logs.String()
					require.Contains(t, out, tt.log)
					require.Contains(t, out, "message_id="+ids[0]+" panic=boom")
					require.Contains(t, out, "policy_panic=\"policy bug\"")
					require.Equal(t, 1, strings.Count(out, "panic policy panicked"), "logged once, not again outside the middleware")
				}
			})
		})
	}
}

// A panic in middleware reaches the policy too, outside all middleware.
func TestPanicPolicySeesMiddlewarePanics(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		var calls []string
		var mu sync.Mutex
		policy := func(_ context.Context, m *Message, p *PanicError) error {
			mu.Lock()
			calls = append(calls, m.ID+": "+p.Value.(string))
			mu.Unlock()
			return RetryAfter(p, 42*time.Second)
		}
		broken := func(Handler) Handler {
			return HandlerFunc(func(context.Context, *Message) error { panic("middleware bug") })
		}
		c, err := New(b.client, b.url, noop, WithPanicPolicy(policy), WithMiddleware(broken))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(30 * time.Second)
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.False(t, st.Deleted)
		require.Equal(t, 42*time.Second, st.VisibilityChanges[0].Timeout, "the policy's RetryAfter")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{ids[0] + ": middleware bug"}, calls)
	})
}

// A BatchHandler's panic goes to the policy once, with m nil; its error
// applies to every message of the batch.
func TestPanicPolicyBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		ids := b.send(t, 3)
		var logs syncLog
		var mu sync.Mutex
		var got []*Message
		policy := func(ctx context.Context, m *Message, p *PanicError) error {
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
			Logger(ctx).Warn("platform: batch panicked")
			return Permanent(p)
		}
		h, err := Batch(func(context.Context, []*Message) error { panic("batch bug") }, 3, time.Second)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, WithPanicPolicy(policy), WithLogger(logs.logger()))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted, "moved to the dead-letter queue")
		}
		require.Len(t, b.receiveDLQ(t), 3)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []*Message{nil}, got)
		require.Contains(t, logs.String(), `msg="platform: batch panicked" queue_url=`+b.url+" batch_size=3")
	})
}

func TestPanicPolicyNilRefused(t *testing.T) {
	t.Parallel()
	_, err := New(&sqs.Client{}, testQueueURL, noop, WithPanicPolicy(nil))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithPanicPolicy(nil)")
}

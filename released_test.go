package sqsconsumer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// Issue 29 point 5: a Release or Delete reported done (EventReleased,
// EventDeleted) must be done at SQS. These tests set the package's
// settleAnswered hook, so they do not run in parallel.

// onceAnswered sets settleAnswered to call fn once, for lease l only, and
// clears it when the test ends.
func onceAnswered(t *testing.T, l func() *Lease, fn func(*Lease)) {
	t.Helper()
	var done atomic.Bool
	settleAnswered = func(x *Lease) {
		if x == l() && done.CompareAndSwap(false, true) {
			fn(x)
		}
	}
	t.Cleanup(func() { settleAnswered = nil })
}

// redeliver makes SQS hand the message over again, as a long poll of the
// same process does when the release it just applied made the message
// visible, and has the lease adopt the new handle, as the Consumer's
// deliver does when that answer comes in while the lease is held.
func (b bundle) redeliver(t *testing.T, l *Lease) string {
	t.Helper()
	raw, sent := b.receiveNext(t, 30*time.Second)
	require.Equal(t, l.msg.ID, *raw.MessageId)
	l.Adopt(*raw.ReceiptHandle, sent)
	return *raw.ReceiptHandle
}

// The release is answered (SQS applied it to the old handle, and a receive
// of ours took the message at once), and the lease adopts the new handle
// before it settles: the release must go to the new handle too. Before
// the fix, Release judged the answer, then settled in a second step: the
// Adopt between the two went unseen, EventReleased was emitted and the
// message stayed invisible under the new receive for a whole lease.
func TestReleaseSeesAdoptAfterItsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "m", 30*time.Second)
		rec := &recorder{}
		l := b.lease(t, msg, sent, WithObserver(rec))
		var second string
		onceAnswered(t, func() *Lease { return l }, func(l *Lease) { second = b.redeliver(t, l) })
		require.NoError(t, l.Release(context.Background(), 0))
		l.Stop()
		require.Equal(t, 1, rec.count(EventReleased))
		st := b.state(t, *msg.MessageId)
		require.Len(t, st.Receives, 2)
		require.False(t, st.InFlight, "reported released, so visible at SQS")
		last := st.VisibilityChanges[len(st.VisibilityChanges)-1]
		require.Equal(t, second, last.ReceiptHandle, "released with the handle adopted")
		require.Empty(t, last.Err)
	})
}

// The same for a Delete: after an Adopt the old handle's delete deletes
// nothing (SQS answers a superseded handle's delete with success).
func TestDeleteSeesAdoptAfterItsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		msg, sent := b.receive(t, "m", 30*time.Second)
		rec := &recorder{}
		l := b.lease(t, msg, sent, WithObserver(rec))
		// SQS hands the message over again before the delete lands
		// (the first receive's visibility lapsed early); the delete of
		// the old handle then succeeds and deletes nothing, and the
		// redelivery's answer is adopted only after the delete's.
		require.NoError(t, b.srv.Expire(b.url, *msg.MessageId))
		raw, sent2 := b.receiveNext(t, 30*time.Second)
		onceAnswered(t, func() *Lease { return l }, func(l *Lease) { l.Adopt(*raw.ReceiptHandle, sent2) })
		require.NoError(t, l.Delete(context.Background()))
		l.Stop()
		require.Equal(t, 1, rec.count(EventDeleted))
		require.True(t, b.state(t, *msg.MessageId).Deleted, "reported deleted, so deleted at SQS")
	})
}

// The case through a Consumer: the shutdown timeout cancels the
// handlers and their messages are released; one release's answer is
// followed at once by a redelivery the lease adopts. Every message
// reported released is visible at SQS afterwards.
func TestShutdownReleasedMeansVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 20)
		rec := &recorder{}
		var mu sync.Mutex
		leases := map[string]*Lease{}
		started := make(chan struct{}, 20)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			leases[m.ID] = m.Lease
			mu.Unlock()
			started <- struct{}{}
			<-ctx.Done()
			return context.Cause(ctx)
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(20), WithShutdownTimeout(5*time.Second), WithObserver(rec))
		require.NoError(t, err)
		stop := running(t, c)
		for range 20 {
			<-started
		}
		victim := func() *Lease {
			mu.Lock()
			defer mu.Unlock()
			return leases[ids[7]]
		}
		onceAnswered(t, victim, func(l *Lease) {
			// The receive may bring other released messages too; they
			// go back at once, only the victim is adopted.
			sent := time.Now()
			out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(b.url), MaxNumberOfMessages: 10, VisibilityTimeout: 30})
			if err != nil {
				panic(err)
			}
			for _, m := range out.Messages {
				if *m.MessageId == l.msg.ID {
					l.Adopt(*m.ReceiptHandle, sent)
					continue
				}
				if _, err := b.client.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(b.url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
					panic(err)
				}
			}
		})
		time.Sleep(time.Second)
		require.NoError(t, stop())
		time.Sleep(10 * time.Second)
		released := map[string]bool{}
		rec.mu.Lock()
		for _, e := range rec.events {
			if e.Kind == EventReleased {
				released[e.MessageID] = true
			}
		}
		rec.mu.Unlock()
		require.Len(t, released, 20)
		for _, id := range ids {
			require.False(t, b.state(t, id).InFlight, "%s reported released, yet invisible at SQS 10 s after Run returned", id)
		}
	})
}

// The Consumer's own delete after a handler succeeded (coalesced, answered
// without the handler waiting): the message was handed over again before
// the delete landed, so the old handle's delete deleted nothing, and the
// redelivery is adopted just after the delete's answer. The delete must go
// to the new handle before EventDeleted.
func TestConsumerDeleteSeesAdoptAfterItsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		rec := &recorder{}
		var lease atomic.Pointer[Lease]
		// The Consumer receives once: its next long poll would race the
		// handler's own receive for the expired message.
		c, err := New(&receivesOnce{Client: b.client}, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			require.NoError(t, b.srv.Expire(b.url, m.ID))
			raw, sent := b.receiveNext(t, 30*time.Second)
			lease.Store(m.Lease)
			settleAnswered = func(x *Lease) {
				if x == m.Lease {
					settleAnswered = nil
					x.Adopt(*raw.ReceiptHandle, sent)
				}
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithObserver(rec))
		require.NoError(t, err)
		t.Cleanup(func() { settleAnswered = nil })
		stop := running(t, c)
		time.Sleep(time.Second)
		require.NoError(t, stop())
		require.NotNil(t, lease.Load())
		require.Equal(t, 1, rec.count(EventDeleted))
		require.True(t, b.state(t, ids[0]).Deleted, "reported deleted, so deleted at SQS")
	})
}

// receivesOnce passes a Client's first ReceiveMessage that brings messages
// through; every later receive waits out its long poll and brings none.
type receivesOnce struct {
	Client
	got atomic.Bool
}

func (r *receivesOnce) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if r.got.Load() {
		if !sleepCtx(ctx, time.Duration(in.WaitTimeSeconds)*time.Second) {
			return nil, ctx.Err()
		}
		return &sqs.ReceiveMessageOutput{}, nil
	}
	out, err := r.Client.ReceiveMessage(ctx, in, optFns...)
	if err == nil && len(out.Messages) > 0 {
		r.got.Store(true)
	}
	return out, err
}

package sqsconsumer

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/sqskit/sqsconsumer/sqstest"
	"github.com/stretchr/testify/require"
)

func TestReceiveErrors(t *testing.T) {
	t.Parallel()
	t.Run("transient: back off and keep polling", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			ids := b.send(t, 1)
			b.srv.FailNext("ReceiveMessage", 5, sqstest.FaultServiceUnavailable)
			c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithVisibilityTimeout(30*time.Second))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			require.True(t, b.state(t, ids[0]).Deleted)
		})
	})
	t.Run("permanent: Run returns the error after a clean shutdown", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 1)
			finished := make(chan struct{})
			started := make(chan struct{})
			c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error {
				close(started)
				time.Sleep(15 * time.Second)
				close(finished)
				return nil
			}), WithVisibilityTimeout(30*time.Second), WithConcurrency(2), WithWaitTime(time.Second))
			require.NoError(t, err)
			go func() {
				<-started
				b.srv.FailNext("ReceiveMessage", 1, sqstest.FaultQueueDoesNotExist) // a later receive, while the handler runs
			}()
			err = c.Run(context.Background())
			require.Error(t, err)
			require.Contains(t, err.Error(), "ReceiveMessage")
			select {
			case <-finished:
			default:
				t.Fatal("Run returned before the running handler finished")
			}
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, "the running handler's message was settled before Run returned")
			}
		})
	})
}

func TestMalformedReceiveAnswers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		var logs bytes.Buffer
		bad := &malformed{Client: b.client, out: &sqs.ReceiveMessageOutput{Messages: []types.Message{
			{MessageId: aws.String("no-handle")},
			{ReceiptHandle: aws.String("no-id")},
			{}, // and more than the one asked for
		}}}
		var handled atomic.Int32
		c, err := New(bad, b.url, HandlerFunc(func(context.Context, *Message) error { handled.Add(1); return nil }),
			WithVisibilityTimeout(30*time.Second), WithConcurrency(1), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		require.Equal(t, int32(1), handled.Load(), "only the real message reached the handler")
		require.True(t, b.state(t, ids[0]).Deleted)
		require.Contains(t, logs.String(), "without MessageId or ReceiptHandle")
		require.Contains(t, logs.String(), "more messages than asked for")
	})
}

// Issue 16: one message whose body does not match its digest costs only
// itself. The SDK would reject the whole answer, leaving its other messages
// invisible for a lease, unhandled.
func TestCorruptMessageCostsOnlyItself(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		client := b.srv.Client(func(o *sqs.Options) {
			o.Retryer = aws.NopRetryer{}
			o.HTTPClient = &http.Client{Transport: &corruptFirst{next: b.srv.Transport()}}
		})
		ids := b.send(t, 3)
		var handled atomic.Int32
		c, err := New(client, b.url, HandlerFunc(func(context.Context, *Message) error {
			handled.Add(1)
			return nil
		}), WithVisibilityTimeout(time.Minute))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Second)
		require.NoError(t, stop())
		require.EqualValues(t, 3, handled.Load(), "all three handled within seconds, not after the minute-long lease")
		counts := map[int]int{}
		for _, id := range ids {
			st := b.state(t, id)
			require.True(t, st.Deleted)
			counts[st.ReceiveCount]++
		}
		require.Equal(t, map[int]int{1: 2, 2: 1}, counts, "the two intact messages on their first delivery, the corrupt one on its second")
	})
}

// Issue 10 point 6: a receive that keeps failing with the same client error
// ends Run with that error after maxSameReceiveFailures attempts; throttling
// is retried for as long as it lasts.
func TestReceiveFailingTheSameWayEndsRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.srv.FailNext("ReceiveMessage", 1000, sqstest.Fault{Status: 400, Type: "UnmappableAnswer", Message: "the answer could not be read"})
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		begin := time.Now()
		err = c.Run(context.Background())
		require.ErrorContains(t, err, "failed 10 times in a row with the same client error")
		require.ErrorContains(t, err, "the answer could not be read")
		require.Less(t, time.Since(begin), 2*time.Minute, "about a minute of backoff")
		require.Equal(t, maxSameReceiveFailures, b.srv.CallCount("ReceiveMessage"))
	})
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 3)
		b.srv.FailNext("ReceiveMessage", 30, sqstest.FaultThrottled)
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Minute)
		require.NoError(t, stop(), "throttling never ends Run")
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted)
		}
	})
}

// Semantics 6: a redelivery of a message being handled is adopted, not
// handed to a second handler.
func TestRedeliveryIsAdopted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 1)
		rec := &recorder{}
		var runs atomic.Int32
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			runs.Add(1)
			time.Sleep(5 * time.Minute)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithObserver(rec), WithWaitTime(time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, b.srv.Expire(b.url, ids[0])) // SQS lets the lease lapse
		time.Sleep(5 * time.Minute)
		require.NoError(t, stop())
		st := b.state(t, ids[0])
		require.Equal(t, int32(1), runs.Load())
		require.Equal(t, 1, rec.count(EventAdopted))
		require.Len(t, st.Receives, 2)
		require.True(t, st.Deleted, "deleted with the adopted handle")
		for _, vc := range st.VisibilityChanges {
			if vc.At.After(st.Receives[1].At) && vc.Err == "" {
				require.Equal(t, st.Receives[1].ReceiptHandle, vc.ReceiptHandle)
			}
		}
	})
}

// Semantics 1 on a quiet queue: a message that arrives 8 s into a 20 s long
// poll is handed to its handler under a live lease, whatever the lease
// length, and is deleted on its first delivery. Counting the lease from the
// poll's sending made every lease under 8 s dead on arrival.
func TestQuietQueueLeaseIsLiveOnArrival(t *testing.T) {
	t.Parallel()
	for _, lease := range []time.Duration{3 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		t.Run(lease.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				rec := &recorder{}
				type seen struct {
					ctxErr     error
					count      int
					receivedAt time.Time
					length     time.Duration
				}
				got := make(chan seen, 4)
				c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
					got <- seen{ctxErr: context.Cause(ctx), count: m.ReceiveCount, receivedAt: m.ReceivedAt, length: m.Lease.Length()}
					time.Sleep(lease / 2) // work that needs most of the lease
					return ctx.Err()
				}), WithVisibilityTimeout(lease), WithObserver(rec))
				require.NoError(t, err)
				stop := running(t, c)
				synctest.Wait() // the poll is waiting on an empty queue
				time.Sleep(8 * time.Second)
				id, err := b.srv.Send(b.url, "late")
				require.NoError(t, err)
				arrived := time.Now()
				s := <-got
				require.NoError(t, s.ctxErr, "the handler's context must be live on arrival")
				require.Equal(t, arrived.Add(-time.Second), s.receivedAt, "the lease clock starts a second before the answer, not at the poll's sending")
				require.Equal(t, 1, s.count)
				require.Equal(t, lease, s.length, "the handler can read its lease length")
				time.Sleep(lease) // handler done, delete confirmed
				synctest.Wait()
				require.NoError(t, stop())
				st := b.state(t, id)
				require.True(t, st.Deleted, "deleted on its first delivery")
				require.Equal(t, 1, st.ReceiveCount, "no receive count wasted")
				require.Zero(t, rec.count(EventLeaseExpired))
				require.Zero(t, rec.count(EventLeaseLost))
				require.Len(t, got, 0, "handled once")
			})
		})
	}
}

// A lease due for renewal when its message arrives is renewed at once: with
// a 3 s lease (renewal every second) and the clock starting a second
// before the answer, the first renewal goes out on arrival.
func TestQuietQueueRenewsAtOnceWhenDueOnArrival(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		rec := &recorder{}
		release := make(chan struct{})
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			<-release
			return nil
		}), WithVisibilityTimeout(3*time.Second), WithObserver(rec))
		require.NoError(t, err)
		stop := running(t, c)
		synctest.Wait()
		time.Sleep(8 * time.Second)
		id, err := b.srv.Send(b.url, "late")
		require.NoError(t, err)
		sentAt := time.Now()
		time.Sleep(coalesceWindow)
		synctest.Wait()
		st := b.state(t, id)
		require.NotEmpty(t, st.VisibilityChanges, "renewed at once")
		require.Equal(t, sentAt, st.VisibilityChanges[0].At.Add(-coalesceWindow), "the first renewal left on arrival (plus the batch window)")
		close(release)
		synctest.Wait()
		require.NoError(t, stop())
		require.True(t, b.state(t, id).Deleted)
		require.Zero(t, rec.count(EventLeaseExpired))
	})
}

// Statistics measure work, not the long poll's wait: 20 ms jobs arriving
// 6 s apart on an idle queue are 20 ms jobs, and the lease they call for is
// the floor.
func TestQuietQueueStatsMeasureWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(20 * time.Millisecond)
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		for range 30 {
			time.Sleep(6 * time.Second)
			_, err := b.srv.Send(b.url, "job")
			require.NoError(t, err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, stop())
		st := c.Stats()
		require.EqualValues(t, 30, st.Processed)
		require.Less(t, st.P99, 100*time.Millisecond, "p99 is the work plus the delete, not the wait")
		require.Equal(t, MinAdaptiveVisibility, AdaptiveVisibility(st.P99, 0, MaxVisibilityTimeout), "a lease at the floor")
	})
}

// A message whose lease ends while it waits for its turn (lost or expired
// before its handler could start) is never handed to the handler: another
// consumer may hold it by then. Here the second message of a FIFO group
// waits behind the first; the server expires its lease meanwhile, so its
// next renewal is refused. When the first finishes, the second is not
// started with that dead lease: it comes back from SQS and runs then.
func TestWaitingMessageWithLeaseGoneNeverStarts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		var ids []string
		for _, body := range []string{"a0", "a1"} {
			id, err := b.srv.Send(b.url, body, sqstest.WithGroupID("a"))
			require.NoError(t, err)
			ids = append(ids, id)
		}
		type call struct {
			body     string
			count    int
			deadOnIn bool
		}
		var mu sync.Mutex
		var calls []call
		var lost []error
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			calls = append(calls, call{m.Body, m.ReceiveCount, ctx.Err() != nil})
			mu.Unlock()
			if m.Body == "a0" {
				time.Sleep(2 * time.Minute)
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(5),
			WithObserver(ObserverFunc(func(e Event) {
				if e.Kind == EventDone && e.Message.Body == "a1" && e.Err != nil {
					mu.Lock()
					lost = append(lost, e.Err)
					mu.Unlock()
				}
			})))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		require.Equal(t, 1, b.state(t, ids[1]).ReceiveCount, "a1 came with a0 and waits behind it")
		require.NoError(t, b.srv.Expire(b.url, ids[1]))
		time.Sleep(5 * time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, calls, 2, "%+v", calls)
		require.Equal(t, call{"a0", 1, false}, calls[0])
		// a1's first delivery, whose lease was refused while it waited,
		// never reached the handler; a later one did (the second, or a
		// third when a receive brought it back before the first was
		// finished here and it was handed back).
		require.Equal(t, "a1", calls[1].body)
		require.GreaterOrEqual(t, calls[1].count, 2, "a1's first delivery never reached the handler")
		require.False(t, calls[1].deadOnIn)
		require.Len(t, lost, 1, "a1's first delivery ended with its lease's error")
		require.ErrorIs(t, lost[0], ErrLeaseLost)
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted)
		}
	})
}

// WithWaitTime(0) takes the queue's ReceiveMessageWaitTimeSeconds, which
// Run reads: every receive asks for it (so a change to the queue's wait
// while Run runs cannot outlast the call's timeout), and its call timeout
// allows for it. Assuming no wait, the call timed out at 10 s: every idle
// 14 s poll failed, and Health said so.
func TestWaitTimeZeroTakesTheQueuesWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"ReceiveMessageWaitTimeSeconds": "14"})
		var logs bytes.Buffer
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithWaitTime(0), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		require.NoError(t, err)
		require.Contains(t, c.Settings().Pending, "wait_time", "the queue's wait is read at Run")
		stop := running(t, c)
		time.Sleep(65 * time.Second)
		synctest.Wait()
		h, s, calls := c.Health(), c.Settings(), b.srv.CallCount("ReceiveMessage")
		id, err := b.srv.Send(b.url, "late")
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, stop())
		require.Equal(t, 14*time.Second, s.WaitTime, "Settings shows the queue's wait")
		require.NotContains(t, s.Pending, "wait_time")
		require.True(t, h.Healthy, "idle and healthy: %v", h.Problems)
		require.Empty(t, h.Retrying, "no receive failed")
		require.Equal(t, 5, calls, "one 14 s poll after another over 65 s")
		require.NotContains(t, logs.String(), "receive failed")
		require.True(t, b.state(t, id).Deleted)
	})
}

// Under WithWaitTime(0) the queue's wait is cut to the shutdown timeout,
// as WithWaitTime's is: a receive in flight at shutdown returns within it.
// Left to the queue (20 s), the last poll held Run 10 s, until its call
// timed out, past a 3 s shutdown timeout.
func TestWaitTimeZeroWithinTheShutdownTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"ReceiveMessageWaitTimeSeconds": "20"})
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithWaitTime(0), WithShutdownTimeout(3*time.Second))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(15 * time.Second)
		synctest.Wait()
		require.Equal(t, 3*time.Second, c.Settings().WaitTime)
		cancel()
		cancelled := time.Now()
		require.NoError(t, <-done)
		require.LessOrEqual(t, time.Since(cancelled), 3*time.Second, "Run returned within the shutdown timeout")
	})
}

// The effective long-poll wait: WithWaitTime's, or under WithWaitTime(0)
// the queue's (SQS's longest when Run could not read it), cut to the
// shutdown timeout, at least 1 s; 0 only when the queue short-polls.
func TestPollWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		wait, shutdown, queue time.Duration
		known                 bool
		want                  time.Duration
	}{
		{20 * time.Second, 20 * time.Second, 0, true, 20 * time.Second},
		{20 * time.Second, 5 * time.Second, 0, true, 5 * time.Second},
		{20 * time.Second, 500 * time.Millisecond, 0, true, time.Second},
		{0, 20 * time.Second, 14 * time.Second, true, 14 * time.Second},
		{0, 3 * time.Second, 14 * time.Second, true, 3 * time.Second},
		{0, 0, 14 * time.Second, true, time.Second},
		{0, 20 * time.Second, 0, true, 0},
		{0, 20 * time.Second, 0, false, 20 * time.Second},
		{0, 5 * time.Second, 0, false, 5 * time.Second},
	} {
		s := settings{waitTime: tc.wait, shutdownTimeout: tc.shutdown}
		require.Equal(t, tc.want, s.pollWait(tc.queue, tc.known), "%+v", tc)
	}
}

package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/internal/broken"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// The FIFO order tests: on a FIFO queue the messages of a group run one at
// a time, in order, whatever else happens. Each test below drives one way
// a group used to run out of order, or a rule of group order that a path
// of its own got wrong.

// fifoBundle is a FIFO queue with content-based deduplication.
func fifoBundle(t *testing.T) bundle {
	t.Helper()
	return setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
}

// sendGroup sends bodies to group g in one SendMessageBatch call, so that
// they are enqueued together (a long poll waiting on the queue returns
// them in one answer) and in order.
func sendGroup(t *testing.T, b bundle, g string, bodies ...string) []string {
	t.Helper()
	var ids []string
	for chunk := range slices.Chunk(bodies, 10) {
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(b.url)}
		for i, body := range chunk {
			in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body), MessageGroupId: aws.String(g)})
		}
		out, err := b.client.SendMessageBatch(context.Background(), in)
		require.NoError(t, err)
		require.Empty(t, out.Failed)
		for _, e := range out.Successful {
			ids = append(ids, aws.ToString(e.MessageId))
		}
	}
	return ids
}

// bodies returns "prefix00" .. "prefix(n-1)".
func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// handledLog records the bodies handlers were called with, in order.
type handledLog struct {
	mu   sync.Mutex
	seen []string
}

func (h *handledLog) add(body ...string) {
	h.mu.Lock()
	h.seen = append(h.seen, body...)
	h.mu.Unlock()
}

func (h *handledLog) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// A receive in flight when Pause is called brings a group's messages
// back while the Consumer takes no work; they are handed back one call at
// a time, and Resume lands while that goes on. None of the group may run
// before the earlier ones that are being handed back: the group runs in
// order from its first message.
func TestFIFOOrderPauseResumeDuringHandBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := fifoBundle(t)
		lc := &latencyClient{Client: b.client, rtt: 20 * time.Millisecond}
		var log handledLog
		c, err := New(lc, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			log.add(m.Body)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(10))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		synctest.Wait() // one long poll waits on the empty queue
		c.Pause()       // nothing held: returns at once; the poll goes on
		ids := sendGroup(t, b, "g", bodies("m", 10)...)
		time.Sleep(100 * time.Millisecond)
		c.Resume() // lands while the poll's messages are handed back
		time.Sleep(2 * time.Minute)

		m, _ := b.srv.Message(b.url, ids[0])
		require.GreaterOrEqual(t, len(m.Receives), 2, "m00 was not brought back by the poll in flight at the pause: the test needs it")
		require.Equal(t, bodies("m", 10), log.get(), "the group ran out of order")
		for _, id := range ids {
			m, _ := b.srv.Message(b.url, id)
			require.True(t, m.Deleted, "message %s", m.Body)
		}
		require.NoError(t, stop())
	})
}

// The breaker opens while a long poll is in flight, whose messages (one
// group) are handed back while it is open; it turns half-open while that
// goes on. The half-open breaker's probe must not be a later message of
// the group than one being handed back.
func TestFIFOOrderBreakerHalfOpenDuringHandBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := fifoBundle(t)
		lc := &latencyClient{Client: b.client, rtt: 200 * time.Millisecond}
		var log handledLog
		c, err := New(lc, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "fail" {
				return errors.New("downstream down")
			}
			log.add(m.Body)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(10),
			WithBreaker(Breaker{Failures: 1, Pause: time.Second, MaxPause: time.Second}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		sendGroup(t, b, "a", "fail")
		for c.Health().Breaker != "open" {
			time.Sleep(10 * time.Millisecond)
		}
		ids := sendGroup(t, b, "b", bodies("b", 10)...)
		time.Sleep(3 * time.Minute)

		m, _ := b.srv.Message(b.url, ids[0])
		require.GreaterOrEqual(t, len(m.Receives), 2, "b00 was not brought back while the breaker was open: the test needs it")
		require.Equal(t, bodies("b", 10), log.get(), "the group ran out of order")
		require.NoError(t, stop())
	})
}

// Pausing and resuming at random while batch handlers run on a FIFO
// queue keeps every group's order and loses nothing.
func TestFIFOOrderBatchPauseResumeChurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := fifoBundle(t)
		lc := &latencyClient{Client: b.client, rtt: 20 * time.Millisecond}
		const groups, per = 4, 30
		var mu sync.Mutex
		last := map[string]string{}
		done := map[string]bool{}
		var disorder []string // never require in a handler: it would end a worker
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			defer time.Sleep(50 * time.Millisecond) // after the unlock: a goroutine blocked on a mutex stops the bubble's clock
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if m.Body < last[m.GroupID] {
					disorder = append(disorder, fmt.Sprintf("%s after %s", m.Body, last[m.GroupID]))
				}
				last[m.GroupID] = m.Body
				done[m.Body] = true
			}
			return nil
		}, 5, 200*time.Millisecond)
		require.NoError(t, err)
		c, err := New(lc, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(10))
		require.NoError(t, err)
		stop := running(t, c)
		for g := range groups {
			sendGroup(t, b, fmt.Sprint(g), bodies(fmt.Sprintf("%d/", g), per)...)
		}
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 60 {
			time.Sleep(time.Duration(r.IntN(300)+10) * time.Millisecond)
			if i%2 == 0 {
				c.Pause()
			} else {
				c.Resume()
			}
		}
		c.Resume()
		time.Sleep(5 * time.Minute)
		require.NoError(t, stopWithin(t, stop, time.Minute))
		mu.Lock()
		require.Empty(t, disorder, "groups ran out of order")
		require.Len(t, done, groups*per, "messages handled")
		mu.Unlock()
		for _, m := range b.srv.Messages(b.url) {
			require.True(t, m.Deleted, "message %s", m.Body)
		}
	})
}

// A batch fails only the first message of a group; the group's later
// messages in the batch are failed without running (an earlier one
// failed). They are not handler failures: the breaker does not count
// them, and they are handed back at once, not held for the breaker's
// pause.
func TestFIFOOrderEarlierFailedIsNotABreakerFailure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := fifoBundle(t)
		var log handledLog
		var once sync.Once
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			for _, m := range msgs {
				log.add(m.Body)
			}
			var fail BatchFailures
			once.Do(func() { fail = BatchFailures{msgs[0].ID: errors.New("a0 cannot be handled yet")} })
			if fail != nil {
				return fail
			}
			return nil
		}, 10, time.Second)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(10),
			WithBreaker(Breaker{Failures: 3, MaxPause: 5 * time.Minute}))
		require.NoError(t, err)
		ids := sendGroup(t, b, "a", bodies("a", 4)...)
		stop := running(t, c)
		time.Sleep(3 * time.Second)
		require.Equal(t, "closed", c.Health().Breaker, "one real failure opened the breaker")
		for _, id := range ids[1:] {
			m, _ := b.srv.Message(b.url, id)
			require.NotEmpty(t, m.VisibilityChanges, "message %s", m.Body)
			require.Zero(t, m.VisibilityChanges[len(m.VisibilityChanges)-1].Timeout, "message %s was not handed back at once", m.Body)
		}
		time.Sleep(time.Minute) // a0's backoff (about 5 s) passes; the group runs again
		for _, id := range ids {
			m, _ := b.srv.Message(b.url, id)
			require.True(t, m.Deleted, "message %s", m.Body)
		}
		require.Equal(t, []string{"a00", "a01", "a02", "a03", "a00", "a01", "a02", "a03"}, log.get())
		require.Equal(t, "closed", c.Health().Breaker)
		require.NoError(t, stop())
	})
}

// A handler that releases its own message (and does not delete it) has
// not finished it, for group order: the rest of the group waits for it,
// in single and batch mode alike.
func TestFIFOOrderHandlerReleasedItsMessage(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := fifoBundle(t)
				var log handledLog
				var once sync.Once
				release := func(ctx context.Context, m *Message) {
					if m.Body == "b0" {
						once.Do(func() { require.NoError(t, m.Lease.Release(ctx, 20*time.Second)) })
					}
				}
				var h Handler = HandlerFunc(func(ctx context.Context, m *Message) error {
					log.add(m.Body)
					release(ctx, m)
					return nil
				})
				if batch {
					var err error
					h, err = Batch(func(ctx context.Context, msgs []*Message) error {
						for _, m := range msgs {
							log.add(m.Body)
							release(ctx, m)
						}
						return nil
					}, 10, 100*time.Millisecond)
					require.NoError(t, err)
				}
				c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(10))
				require.NoError(t, err)
				sendGroup(t, b, "b", "b0", "b1", "b2")
				start := time.Now()
				stop := running(t, c)
				time.Sleep(time.Minute)
				// b0's release hands the group back: b1 and b2 are never
				// deleted before b0, which comes back after 20 s.
				var at [3]time.Time
				for _, m := range b.srv.Messages(b.url) {
					require.True(t, m.Deleted, "message %s", m.Body)
					at[m.Body[1]-'0'] = m.DeletedAt
				}
				require.True(t, !at[1].Before(at[0]) && !at[2].Before(at[1]), "deleted out of order: b0 %v, b1 %v, b2 %v", at[0], at[1], at[2])
				require.GreaterOrEqual(t, at[1].Sub(start), 20*time.Second, "b1 was deleted before b0 came back")
				got := log.get()
				require.Equal(t, "b0", got[0])
				if !batch {
					require.Equal(t, []string{"b0", "b0", "b1", "b2"}, got, "the group ran ahead of the released b0")
				}
				for _, m := range b.srv.Messages(b.url) {
					require.True(t, m.Deleted, "message %s", m.Body)
				}
				require.NoError(t, stop())
			})
		})
	}
}

// stopWithin is stop (from running), failing the test if Run has not
// returned within d of virtual time: a delivery stuck in the Consumer
// keeps its lease renewing, so Run would wait, and the clock run, forever.
func stopWithin(t *testing.T, stop func() error, d time.Duration) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- stop() }()
	select {
	case err := <-res:
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v of its context's end", d)
		return nil
	}
}

var _ = sqstest.WithGroupID // the helpers above send through the client

// FIFO: one message of a group at a time, in order; a failure hands the
// rest of the group back so the order holds; messages waiting behind a
// running one are leased; other groups run in parallel.
func TestFIFOGroups(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for i := range 3 {
			_, err := b.srv.Send(b.url, fmt.Sprintf("a%d", i), sqstest.WithGroupID("a"))
			require.NoError(t, err)
			_, err = b.srv.Send(b.url, fmt.Sprintf("b%d", i), sqstest.WithGroupID("b"))
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var order []string
		failed := false
		running_ := map[string]int{}
		maxPerGroup := 0
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			running_[m.GroupID]++
			maxPerGroup = max(maxPerGroup, running_[m.GroupID])
			order = append(order, m.Body)
			fail := m.Body == "b1" && !failed
			if fail {
				failed = true
			}
			mu.Unlock()
			time.Sleep(40 * time.Second) // longer than the lease: the waiting ones must be renewed
			mu.Lock()
			running_[m.GroupID]--
			mu.Unlock()
			if fail {
				return RetryAfter(errors.New("b1 failed once"), 5*time.Second)
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithWaitTime(time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, maxPerGroup, "one handler per group at a time")
		var a, bs []string
		for _, o := range order {
			if o[0] == 'a' {
				a = append(a, o)
			} else {
				bs = append(bs, o)
			}
		}
		require.Equal(t, []string{"a0", "a1", "a2"}, a)
		require.Equal(t, []string{"b0", "b1", "b1", "b2"}, bs, "b2 waited for b1's retry")
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, st.Body)
			if st.Body == "a2" {
				require.Equal(t, 1, st.ReceiveCount, "a2 waited in the process, leased, without a redelivery")
				require.NotEmpty(t, st.VisibilityChanges)
			}
		}
	})
}

func TestFIFOShutdownReleasesWaitingMessages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for i := range 3 {
			_, err := b.srv.Send(b.url, fmt.Sprintf("g%d", i), sqstest.WithGroupID("g"))
			require.NoError(t, err)
		}
		started := make(chan struct{}, 3)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			started <- struct{}{}
			time.Sleep(10 * time.Second)
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		<-started
		require.NoError(t, stop())
		require.Len(t, started, 0, "no handler started after the cancel")
		for _, st := range b.srv.Messages(b.url) {
			if st.Body == "g0" {
				require.True(t, st.Deleted)
				continue
			}
			require.False(t, st.Deleted)
			require.False(t, st.InFlight, "%s released (visibility 0)", st.Body)
		}
	})
}

// windDownClient holds the first visibility change of the redelivery of
// watch (a receipt handle other than its first) until the first delivery
// of watch is done: it closes release as the call is made, and lets the
// call through once done is closed. It stands for a slow answer that
// lets the first delivery finish while the redelivery's receive is being
// dispatched.
type windDownClient struct {
	Client
	watch   string // message ID
	release chan struct{}
	done    chan struct{}

	mu      sync.Mutex // guards the fields below
	handles []string   // the receipt handles watch was received with, in order
	held    bool       // a call was held
}

func (c *windDownClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	if err == nil {
		c.mu.Lock()
		for _, m := range out.Messages {
			if aws.ToString(m.MessageId) == c.watch {
				c.handles = append(c.handles, aws.ToString(m.ReceiptHandle))
			}
		}
		c.mu.Unlock()
	}
	return out, err
}

// hold holds a call carrying any of handles, the first such call only.
func (c *windDownClient) hold(handles ...string) {
	c.mu.Lock()
	hit := !c.held && len(c.handles) > 1 && slices.ContainsFunc(handles, func(h string) bool { return slices.Contains(c.handles[1:], h) })
	if hit {
		c.held = true
	}
	c.mu.Unlock()
	if !hit {
		return
	}
	close(c.release)
	<-c.done
	time.Sleep(time.Millisecond) // the first delivery's finish has run
}

func (c *windDownClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	c.hold(aws.ToString(in.ReceiptHandle))
	return c.Client.ChangeMessageVisibility(ctx, in, optFns...)
}

func (c *windDownClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	var hs []string
	for _, e := range in.Entries {
		hs = append(hs, aws.ToString(e.ReceiptHandle))
	}
	c.hold(hs...)
	return c.Client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

// A FIFO message whose lease was lost while its handler runs on (it
// ignores its cancelled context) is delivered again, with the later
// message of its group, while that handler still runs. The redelivery
// must keep its group's place: the later message must not run before it,
// even when the first delivery finishes while the receive that brought
// them is being dispatched. It waits behind the first delivery, and runs
// once that one is over: m0, m0 again, then m1. The negative control
// (broken.WindDownReleased) releases the redelivery for its backoff
// instead, as the Consumer used to: m1 then runs before m0's second run.
// (Not parallel: the control switches the library for the process.)
func TestFIFOOrderRedeliveryWhileWindingDown(t *testing.T) {
	require.Equal(t, []string{"m0", "m0", "m1"}, redeliveryWhileWindingDown(t, true), "the group ran out of order")
	restore := broken.Set(broken.WindDownReleased)
	defer restore()
	require.Equal(t, []string{"m0", "m1", "m0"}, redeliveryWhileWindingDown(t, false), "the negative control: the test no longer shows the bug")
}

// The same with a Batch handler behind middleware: the redelivery waits
// behind the first delivery without taking a handler slot, so the
// middleware never runs for the message twice at once (it used to be
// released; waiting with a slot, as a Batch handler's members of a group
// do, it entered the middleware while the first delivery's batch ran).
func TestFIFORedeliveryWhileWindingDownBatchMiddleware(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	in := map[string]int{} // bodies inside the middleware now
	twice := false
	mw := func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			in[m.Body]++
			twice = twice || in[m.Body] > 1
			mu.Unlock()
			defer func() {
				mu.Lock()
				in[m.Body]--
				mu.Unlock()
			}()
			return next.HandleMessage(ctx, m)
		})
	}
	got := redeliveryWhileWindingDown(t, true, WithMiddleware(mw))
	require.False(t, twice, "a message ran in the middleware twice at once")
	require.Equal(t, []string{"m0", "m0", "m1"}, got, "the group ran out of order")
}

// redeliveryWhileWindingDown runs TestFIFOOrderRedeliveryWhileWindingDown's
// scenario and returns the bodies handled, in order; deleted: every message
// must end deleted. With a WithMiddleware option among opts the handler is
// a Batch handler (size 10, no window) behind it.
func redeliveryWhileWindingDown(t *testing.T, deleted bool, opts ...Option) (handled []string) {
	synctest.Test(t, func(t *testing.T) {
		b := fifoBundle(t)
		ids := sendGroup(t, b, "g", "m0")
		m0 := ids[0]
		wc := &windDownClient{Client: b.client, watch: m0, release: make(chan struct{}), done: make(chan struct{})}
		var log handledLog
		var first atomic.Bool
		var doneOnce sync.Once
		handle := func(ctx context.Context, m *Message) error {
			log.add(m.Body)
			if m.Body == "m0" && first.CompareAndSwap(false, true) {
				// Ignores its context, lost at the first renewal; it
				// returns once the redelivery's release is sent, else
				// at 35 s (the redelivery came at 30 s).
				select {
				case <-wc.release:
				case <-time.After(35 * time.Second):
				}
				return ctx.Err()
			}
			return nil
		}
		var h Handler = HandlerFunc(handle)
		if len(opts) > 0 {
			var err error
			h, err = Batch(func(ctx context.Context, msgs []*Message) error {
				var bf BatchFailures
				for _, m := range msgs {
					if err := handle(ctx, m); err != nil {
						if bf == nil {
							bf = BatchFailures{}
						}
						bf[m.ID] = err
					}
				}
				if bf != nil {
					return bf
				}
				return nil
			}, 10, 0)
			require.NoError(t, err)
		}
		c, err := New(wc, b.url, h, append([]Option{WithVisibilityTimeout(30 * time.Second), WithConcurrency(10),
			WithObserver(ObserverFunc(func(e Event) {
				if e.Kind == EventDone && e.MessageID == m0 {
					doneOnce.Do(func() { close(wc.done) })
				}
			}))}, opts...)...)
		require.NoError(t, err)
		b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
		stop := running(t, c)
		time.Sleep(time.Second)
		// m0 is in flight: SQS holds m1 back until m0 is visible again.
		ids = append(ids, sendGroup(t, b, "g", "m1")...)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())

		require.GreaterOrEqual(t, len(b.state(t, ids[0]).Receives), 2, "m0 was not delivered again while its handler ran: the test needs it")
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted || !deleted, "message %s", id)
		}
		handled = log.get()
	})
	return handled
}

// A redelivery parked behind its message's older delivery, whose handler
// ignores its cancelled context past the shutdown's hard stop, goes back
// when the shutdown begins, like any message not started: it holds no
// handler slot and cannot run before that handler returns, and once the
// hard stop has passed its release could no longer be sent.
func TestFIFOParkedRedeliveryGoesBackAtShutdown(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"single", "batch"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := fifoBundle(t)
				id := sendGroup(t, b, "g", "m0")[0]
				var first atomic.Bool
				handle := func(ctx context.Context, m *Message) error {
					if first.CompareAndSwap(false, true) {
						time.Sleep(3 * time.Minute) // ignores its context
					}
					return ctx.Err()
				}
				var h Handler = HandlerFunc(handle)
				if mode == "batch" {
					var err error
					h, err = Batch(func(ctx context.Context, msgs []*Message) error { return handle(ctx, msgs[0]) }, 10, 0)
					require.NoError(t, err)
				}
				c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithShutdownTimeout(time.Second))
				require.NoError(t, err)
				// The lease is lost at its first renewal; SQS delivers
				// the message again at 30 s, and that delivery parks.
				b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
				stop := running(t, c)
				time.Sleep(40 * time.Second)
				require.Len(t, b.state(t, id).Receives, 2, "m0 was not delivered again while its handler ran: the test needs it")
				done := make(chan error, 1)
				go func() { done <- stop() }()
				time.Sleep(5 * time.Second)
				st := b.state(t, id)
				require.False(t, st.InFlight, "the parked redelivery was not handed back at the shutdown's start")
				require.NoError(t, <-done)
			})
		})
	}
}

// A message of a FIFO group that a receive in flight at the shutdown
// brings while an earlier message of its group runs on past the hard stop
// (its handler ignores its cancelled context) goes back at once, as the
// shutdown's start hands back those it holds: waiting for that handler,
// its release would come after the hard stop, fail, and leave the message
// hidden after Run returned.
func TestFIFOWaitingMessageFromAReceiveAtShutdownGoesBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := fifoBundle(t)
		ids := sendGroup(t, b, "g", "m0")
		var first atomic.Bool
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "m0" && first.CompareAndSwap(false, true) {
				time.Sleep(3 * time.Minute) // ignores its context
			}
			return ctx.Err()
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithShutdownTimeout(5*time.Second), WithWaitTime(20*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		ids = append(ids, sendGroup(t, b, "g", "m1")...) // held back by SQS while m0 is in flight
		time.Sleep(10 * time.Second)
		done := make(chan error, 1)
		go func() { done <- stop() }()
		time.Sleep(10 * time.Millisecond) // the long poll (5 s: the shutdown timeout cuts the wait) is in flight
		// m0's visibility lapses during the shutdown: the long poll in
		// flight brings m0 (adopted by its running lease) and m1, which
		// waits behind it.
		require.NoError(t, b.srv.Expire(b.url, ids[0]))
		require.NoError(t, <-done)
		now := time.Now()
		require.GreaterOrEqual(t, len(b.state(t, ids[1]).Receives), 1, "no receive brought m1 during the shutdown: the test needs it")
		st := b.state(t, ids[1])
		require.False(t, st.InFlight && st.VisibleAt.After(now.Add(time.Second)), "m1 hidden %v after Run returned", st.VisibleAt.Sub(now))
	})
}

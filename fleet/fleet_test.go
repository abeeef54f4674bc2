package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/fleet"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// latency adds a network round trip to every call and counts receives.
type latency struct {
	sqsconsumer.Client
	rtt   time.Duration
	recvs atomic.Int64
}

func (c *latency) trip() func() {
	time.Sleep(c.rtt / 2)
	return func() { time.Sleep(c.rtt - c.rtt/2) }
}

func (c *latency) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	defer c.trip()()
	c.recvs.Add(1)
	return c.Client.ReceiveMessage(ctx, in, optFns...)
}

func (c *latency) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	defer c.trip()()
	return c.Client.DeleteMessageBatch(ctx, in, optFns...)
}

func (c *latency) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	defer c.trip()()
	return c.Client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

// bed is a server with queues, one client per queue (to count each
// queue's receives), and the slot time each queue's handlers spent.
type bed struct {
	srv     *sqstest.Server
	urls    []string
	clients []*latency

	mu      sync.Mutex
	busy    []time.Duration // slot time within [from, to) per queue
	from    time.Time       // zero: not measuring yet
	to      time.Time       // zero: open
	running int             // handlers running now, all queues
	peak    int             // most handlers running at once
}

func newBed(t *testing.T, rtt time.Duration, names ...string) *bed {
	t.Helper()
	b := &bed{srv: sqstest.New(t), busy: make([]time.Duration, len(names))}
	for _, n := range names {
		url, err := b.srv.CreateQueue(n, nil)
		require.NoError(t, err)
		b.urls = append(b.urls, url)
		b.clients = append(b.clients, &latency{Client: b.srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} }), rtt: rtt})
	}
	return b
}

func (b *bed) fill(t *testing.T, q, n int) {
	t.Helper()
	for i := range n {
		_, err := b.srv.Send(b.urls[q], fmt.Sprintf("%d-%d", q, i))
		require.NoError(t, err)
	}
}

// handler sleeps for d and counts the slot time of queue q.
func (b *bed) handler(q int, d time.Duration) sqsconsumer.Handler {
	return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		b.mu.Lock()
		b.running++
		b.peak = max(b.peak, b.running)
		b.mu.Unlock()
		start := time.Now()
		time.Sleep(d)
		end := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		b.running--
		if !b.from.IsZero() {
			from, to := start, end
			if from.Before(b.from) {
				from = b.from
			}
			if !b.to.IsZero() && to.After(b.to) {
				to = b.to
			}
			if to.After(from) {
				b.busy[q] += to.Sub(from)
			}
		}
		return nil
	})
}

func (b *bed) measure(span time.Duration) []time.Duration {
	b.mu.Lock()
	b.from, b.to = time.Now(), time.Time{}
	clear(b.busy)
	b.mu.Unlock()
	time.Sleep(span)
	b.mu.Lock()
	b.to = time.Now()
	b.mu.Unlock()
	time.Sleep(time.Second) // handlers running at the end report their share
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.busy...)
}

func (b *bed) consumer(t *testing.T, q int, h sqsconsumer.Handler, opts ...sqsconsumer.Option) *sqsconsumer.Consumer {
	t.Helper()
	c, err := sqsconsumer.New(b.clients[q], b.urls[q], h, append([]sqsconsumer.Option{sqsconsumer.WithVisibilityTimeout(time.Minute)}, opts...)...)
	require.NoError(t, err)
	return c
}

func start(t *testing.T, f *fleet.Fleet) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// Two queues of weights 3 and 1, both with a backlog and each allowed the
// whole budget, share the budget's slot time 3:1 (within 5 %), and never
// run more handlers between them than the budget.
func TestWeightsShareSlots(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "heavy", "light")
		const budget, hold = 8, 100 * time.Millisecond
		b.fill(t, 0, 6000)
		b.fill(t, 1, 6000)
		f, err := fleet.New(budget)
		require.NoError(t, err)
		require.NoError(t, f.Add(b.consumer(t, 0, b.handler(0, hold), sqsconsumer.WithConcurrency(budget)), fleet.WithWeight(3)))
		require.NoError(t, f.Add(b.consumer(t, 1, b.handler(1, hold), sqsconsumer.WithConcurrency(budget)), fleet.WithWeight(1)))
		stop := start(t, f)
		time.Sleep(5 * time.Second)
		busy := b.measure(time.Minute)
		require.NoError(t, stop())

		ratio := busy[0].Seconds() / busy[1].Seconds()
		used := (busy[0] + busy[1]).Seconds() / (budget * time.Minute.Seconds())
		t.Logf("slot time heavy %v, light %v: ratio %.3f; budget used %.1f%%; peak running %d", busy[0], busy[1], ratio, 100*used, b.peak)
		require.InEpsilon(t, 3.0, ratio, 0.05, "slot-time ratio of weights 3:1")
		require.LessOrEqual(t, b.peak, budget, "handlers running at once")
		require.Greater(t, used, 0.9, "share of the budget in use under saturation")
	})
}

// A queue of a higher priority takes every slot while it has a backlog;
// the lower one gets the slots when it is done.
func TestPriority(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "urgent", "later")
		const budget, hold = 4, 100 * time.Millisecond
		b.fill(t, 0, 1000) // 25 s of work for the whole budget
		b.fill(t, 1, 4000)
		f, err := fleet.New(budget)
		require.NoError(t, err)
		require.NoError(t, f.Add(b.consumer(t, 0, b.handler(0, hold), sqsconsumer.WithConcurrency(budget)), fleet.WithPriority(1)))
		require.NoError(t, f.Add(b.consumer(t, 1, b.handler(1, hold), sqsconsumer.WithConcurrency(budget))))
		stop := start(t, f)
		time.Sleep(2 * time.Second)
		busy := b.measure(20 * time.Second)
		t.Logf("while urgent has a backlog: urgent %v, later %v", busy[0], busy[1])
		require.Greater(t, busy[0].Seconds(), 0.95*budget*20, "the higher priority's slot time")
		require.Less(t, busy[1].Seconds(), 0.01*budget*20, "the lower priority ran while the higher one had a backlog")

		time.Sleep(10 * time.Second) // urgent is drained
		busy = b.measure(10 * time.Second)
		t.Logf("after: urgent %v, later %v", busy[0], busy[1])
		require.Zero(t, busy[0])
		require.Greater(t, busy[1].Seconds(), 0.95*budget*10, "the lower priority's slot time once the higher one is done")
		require.NoError(t, stop())
	})
}

// A paused queue gives its share to the others, and takes it back on
// Resume.
func TestPauseGivesShareAway(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a", "b")
		const budget, hold = 4, 100 * time.Millisecond
		b.fill(t, 0, 3000)
		b.fill(t, 1, 3000)
		f, err := fleet.New(budget)
		require.NoError(t, err)
		ca := b.consumer(t, 0, b.handler(0, hold), sqsconsumer.WithConcurrency(budget))
		cb := b.consumer(t, 1, b.handler(1, hold), sqsconsumer.WithConcurrency(budget))
		require.NoError(t, f.Add(ca))
		require.NoError(t, f.Add(cb))
		stop := start(t, f)
		time.Sleep(2 * time.Second)
		busy := b.measure(10 * time.Second)
		t.Logf("both: a %v, b %v", busy[0], busy[1])
		require.InEpsilon(t, 1.0, busy[0].Seconds()/busy[1].Seconds(), 0.05)

		cb.Pause()
		time.Sleep(time.Second)
		busy = b.measure(10 * time.Second)
		t.Logf("b paused: a %v, b %v", busy[0], busy[1])
		require.Zero(t, busy[1], "a paused queue's handlers ran")
		require.Greater(t, busy[0].Seconds(), 0.95*budget*10, "the other queue's slot time while one is paused")

		cb.Resume()
		time.Sleep(2 * time.Second)
		busy = b.measure(10 * time.Second)
		t.Logf("resumed: a %v, b %v", busy[0], busy[1])
		require.InEpsilon(t, 1.0, busy[0].Seconds()/busy[1].Seconds(), 0.05)
		require.NoError(t, stop())
	})
}

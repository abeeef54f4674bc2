package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// latency adds a network round trip to every call and counts receives;
// while down is set, every receive fails after its round trip.
type latency struct {
	sqsconsumer.Client
	rtt      time.Duration
	recvs    atomic.Int64
	lastEnd  atomic.Int64 // when the latest receive returned, in Unix nanoseconds
	inFlight atomic.Int64 // receives in flight now
	down     atomic.Bool
}

func (c *latency) trip() func() {
	time.Sleep(c.rtt / 2)
	return func() { time.Sleep(c.rtt - c.rtt/2) }
}

func (c *latency) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	defer c.trip()()
	c.recvs.Add(1)
	defer func() { c.lastEnd.Store(time.Now().UnixNano()) }()
	if c.down.Load() {
		return nil, errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
	}
	return c.Client.ReceiveMessage(ctx, in, optFns...)
}

func (c *latency) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	defer c.trip()()
	return c.Client.GetQueueAttributes(ctx, in, optFns...)
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

// With the default (no idle pause) an idle queue in a fleet costs what a
// Consumer alone costs, 3 receives a minute with 20 s long polls, and a
// first message is received within a round trip or two: the figures
// WithIdlePause's documentation and the README state, exact in virtual
// time.
func TestIdleQueueCostByDefault(t *testing.T) {
	t.Parallel()
	fig := measureIdle(t, 2, nil)
	t.Logf("default: %.2f receives/min per idle queue (%.1f for the fleet); first message: worst %v, mean %v", fig.perMinute, fig.fleetMinute, fig.worst, fig.mean)
	require.Equal(t, 3.0, fig.perMinute, "receives a minute per idle queue")
	require.Equal(t, 6.0, fig.fleetMinute, "receives a minute by a fleet of two idle queues")
	// The latencies are exact to a few milliseconds: which of two
	// goroutines due at the same virtual instant runs first varies.
	require.GreaterOrEqual(t, fig.worst, idleRTT, "first message sent just after an empty receive: a round trip at least")
	require.LessOrEqual(t, fig.worst, 2*idleRTT, "first message sent just after an empty receive: two round trips at most")
	require.LessOrEqual(t, fig.mean, idleRTT, "first message, mean over the idle cycle")

	alone := 0.0
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, idleRTT, "alone")
		c := b.consumer(t, 0, b.handler(0, time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(time.Minute)
		before := b.clients[0].recvs.Load()
		time.Sleep(10 * time.Minute)
		alone = float64(b.clients[0].recvs.Load()-before) / 10
		cancel()
		require.NoError(t, <-done)
	})
	require.Equal(t, alone, fig.perMinute, "an idle queue costs a fleet what it costs a Consumer alone")
}

// With an idle pause, an idle queue costs 60 s / (20 s long poll + pause)
// receives a minute, a message sent at the worst moment (just after an
// empty long poll) is received within one pause, and once traffic flows
// the pauses stop.
func TestIdlePauseEndsWithTraffic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const rtt, pause = 10 * time.Millisecond, 20 * time.Second
		b := newBed(t, rtt, "idle")
		var mu sync.Mutex
		got := map[string]time.Time{}
		f, err := fleet.New(4, fleet.WithIdlePause(pause))
		require.NoError(t, err)
		require.NoError(t, f.Add(b.consumer(t, 0, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			mu.Lock()
			got[m.Body] = time.Now()
			mu.Unlock()
			return nil
		}))))
		stop := start(t, f)
		time.Sleep(10 * time.Minute)
		recvs := b.clients[0].recvs.Load()
		perMinute := float64(recvs) / 10
		t.Logf("idle queue: %d receives in 10 virtual minutes (%.2f a minute)", recvs, perMinute)
		require.LessOrEqual(t, perMinute, 1.5, "receives a minute on an idle queue")
		require.GreaterOrEqual(t, perMinute, 1.4, "the idle queue is still watched")

		// The worst moment: just after an empty long poll returned.
		ended := b.clients[0].lastEnd.Load()
		for b.clients[0].lastEnd.Load() == ended {
			time.Sleep(time.Millisecond)
		}
		sent := time.Now()
		_, err = b.srv.Send(b.urls[0], "late")
		require.NoError(t, err)
		mu.Lock()
		for got["late"].IsZero() {
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
		}
		wait := got["late"].Sub(sent)
		mu.Unlock()
		t.Logf("a message sent to the idle queue just after an empty long poll waited %v", wait)
		require.Greater(t, wait, pause-time.Second, "the test meant to send in an idle pause")
		require.LessOrEqual(t, wait, pause+2*rtt, "a message on an idle queue waits at most one idle pause")

		// Traffic: a message every 5 s is received at once (every receive
		// gets one, so none comes back empty and no pause follows).
		for i := range 10 {
			time.Sleep(5 * time.Second)
			sent := time.Now()
			body := fmt.Sprintf("busy%d", i)
			_, err = b.srv.Send(b.urls[0], body)
			require.NoError(t, err)
			time.Sleep(time.Second)
			mu.Lock()
			require.WithinDuration(t, sent, got[body], 2*rtt, "message %s, sent while the queue has traffic", body)
			mu.Unlock()
		}
		require.NoError(t, stop())
	})
}

// Stopping the fleet stops every queue as gracefully as one Consumer:
// running handlers finish and their messages are deleted, messages read
// ahead are released at once, and Run returns nil within the shutdown
// timeout with every goroutine joined.
func TestShutdown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a", "b")
		b.fill(t, 0, 50)
		b.fill(t, 1, 50)
		f, err := fleet.New(4)
		require.NoError(t, err)
		for q := range 2 {
			require.NoError(t, f.Add(b.consumer(t, q, b.handler(q, 8*time.Second), sqsconsumer.WithConcurrency(4), sqsconsumer.WithShutdownTimeout(10*time.Second))))
		}
		stop := start(t, f)
		time.Sleep(3 * time.Second)
		b.mu.Lock()
		running := b.running
		b.mu.Unlock()
		require.Equal(t, 4, running, "handlers running at the stop: the budget")
		begun := time.Now()
		require.NoError(t, stop())
		took := time.Since(begun)
		t.Logf("fleet stopped in %v", took)
		require.LessOrEqual(t, took, 10*time.Second, "within the shutdown timeout")
		deleted, held := 0, 0
		for q := range 2 {
			for _, m := range b.srv.Messages(b.urls[q]) {
				switch {
				case m.Deleted:
					deleted++
				case m.InFlight:
					held++
				}
			}
		}
		require.Equal(t, 4, deleted, "the handlers running at the stop finished and were deleted")
		require.Zero(t, held, "messages left invisible after the stop")
	})
}

// If one queue's Consumer fails (its queue does not exist), the fleet
// stops the others gracefully and returns the error naming the queue.
func TestRunStopsOnAQueueError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a")
		b.fill(t, 0, 10)
		f, err := fleet.New(4)
		require.NoError(t, err)
		require.NoError(t, f.Add(b.consumer(t, 0, b.handler(0, time.Second))))
		missing := b.urls[0] + "-missing"
		c, err := sqsconsumer.New(b.clients[0], missing, b.handler(0, time.Second)) // reads the queue's VisibilityTimeout: fails
		require.NoError(t, err)
		require.NoError(t, f.Add(c))
		err = f.Run(context.Background())
		require.Error(t, err)
		require.ErrorContains(t, err, "queue "+missing)
		require.ErrorContains(t, err, "does not exist")
	})
}

// When a queue's Consumer fails, the fleet's error names that queue only:
// the queues the fleet stopped because of it are not failures, even one
// stopped while it was still reading its queue's attributes (its call then
// ends with "context canceled").
func TestRunNamesOnlyTheFailedQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		healthyRTT, firstRTT time.Duration // the healthy queue's, and the missing queues'
		missing              int
	}{
		{"the healthy queue still starting", 200 * time.Millisecond, 10 * time.Millisecond, 1},
		{"the healthy queue running", 10 * time.Millisecond, 2 * time.Second, 1},
		{"two queues missing", 200 * time.Millisecond, 10 * time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := newBed(t, tc.healthyRTT, "healthy")
				b.fill(t, 0, 10)
				f, err := fleet.New(4)
				require.NoError(t, err)
				h := b.handler(0, time.Second)
				healthy, err := sqsconsumer.New(b.clients[0], b.urls[0], h) // reads its VisibilityTimeout at Run
				require.NoError(t, err)
				require.NoError(t, f.Add(healthy))
				var missing []string
				for i := range tc.missing {
					url := fmt.Sprintf("%s-missing%d", b.urls[0], i)
					missing = append(missing, url)
					cl := &latency{Client: b.srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} }), rtt: tc.firstRTT}
					c, err := sqsconsumer.New(cl, url, h)
					require.NoError(t, err)
					require.NoError(t, f.Add(c))
				}
				err = f.Run(context.Background())
				require.Error(t, err)
				t.Logf("fleet.Run: %v", err)
				for _, url := range missing {
					require.ErrorContains(t, err, "queue "+url+": ")
				}
				require.ErrorContains(t, err, "does not exist")
				require.NotContains(t, err.Error(), "queue "+b.urls[0]+": ", "the healthy queue is listed")
				require.NotErrorIs(t, err, context.Canceled)
				require.Len(t, strings.Split(err.Error(), "\n"), tc.missing, "one line per failed queue")
			})
		})
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	_, err := fleet.New(0)
	require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
	require.ErrorContains(t, err, "concurrency must be from 1 to 100000")
	_, err = fleet.New(4, fleet.WithIdlePause(-time.Second), nil)
	require.ErrorContains(t, err, "WithIdlePause(-1s): must be from 0 to 15m0s")
	require.ErrorContains(t, err, "option 1 is nil")

	srv := sqstest.New(t)
	url, err := srv.CreateQueue("q", nil)
	require.NoError(t, err)
	h := sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil })
	c, err := sqsconsumer.New(srv.Client(), url, h)
	require.NoError(t, err)
	f, err := fleet.New(4)
	require.NoError(t, err)
	require.ErrorContains(t, f.Add(nil), "Consumer is nil")
	require.ErrorContains(t, f.Add(c, fleet.WithWeight(0)), "WithWeight(0): must be from 1 to 1000")
	require.ErrorContains(t, f.Add(c, nil), "option 0 is nil")
	require.NoError(t, f.Add(c, fleet.WithWeight(2), fleet.WithPriority(-1)))
	require.ErrorContains(t, f.Add(c), "already belongs to a fleet")
	other, err := fleet.New(2)
	require.NoError(t, err)
	require.ErrorContains(t, other.Add(c), "already belongs to a fleet")
	require.ErrorContains(t, other.Run(context.Background()), "no Consumer was added")
	//lint:ignore SA1012 a nil context is what is tested
	require.ErrorContains(t, f.Run(nil), "a context is required")

}

func TestRunOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("q", nil)
		require.NoError(t, err)
		h := sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil })
		c, err := sqsconsumer.New(srv.Client(), url, h)
		require.NoError(t, err)
		f, err := fleet.New(4)
		require.NoError(t, err)
		require.NoError(t, f.Add(c))
		stop := start(t, f)
		time.Sleep(time.Second)
		require.ErrorContains(t, f.Run(context.Background()), "only once")
		require.NoError(t, stop())
		c2, err := sqsconsumer.New(srv.Client(), url, h)
		require.NoError(t, err)
		require.ErrorContains(t, f.Add(c2), "the fleet has stopped")
	})
}

// A queue that was idle while another used the whole budget gets its
// share as soon as it has messages, and no more: it banked no credit
// while idle.
func TestIdleQueueEarnsNoCredit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "busy", "quiet")
		const budget, hold = 4, 100 * time.Millisecond
		b.fill(t, 0, 20000)
		f, err := fleet.New(budget)
		require.NoError(t, err)
		require.NoError(t, f.Add(b.consumer(t, 0, b.handler(0, hold), sqsconsumer.WithConcurrency(budget))))
		require.NoError(t, f.Add(b.consumer(t, 1, b.handler(1, hold), sqsconsumer.WithConcurrency(budget))))
		stop := start(t, f)
		busy := b.measure(2 * time.Minute)
		t.Logf("quiet idle: busy %v, quiet %v", busy[0], busy[1])
		require.Greater(t, busy[0].Seconds(), 0.95*budget*120, "the busy queue takes the whole budget while the other is idle")

		b.fill(t, 1, 2000)
		time.Sleep(time.Second) // the quiet queue's long poll, waiting, takes them at once
		busy = b.measure(20 * time.Second)
		t.Logf("both busy: busy %v, quiet %v", busy[0], busy[1])
		require.InEpsilon(t, 1.0, busy[0].Seconds()/busy[1].Seconds(), 0.05, "equal weights share equally after an idle spell")
		require.NoError(t, stop())
	})
}

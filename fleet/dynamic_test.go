package fleet_test

import (
	"context"
	"math"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/fleet"
)

// listed returns the queues a fleet's Health lists, and their statuses.
func listed(h fleet.Health) map[string]string {
	out := map[string]string{}
	for _, q := range h.Queues {
		out[q.Queue] = q.Health.Status
	}
	return out
}

// Queues join a running fleet's budget and leave it under load: a queue
// Added while Run runs starts at once and takes its share, a Serve'd one
// joins with or without Run and gives its share back when its Run
// returns; the budget is never exceeded and the shares follow (within
// 5 %).
func TestQueuesJoinAndLeaveTheBudgetUnderLoad(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a", "b", "c")
		const budget, hold = 4, 100 * time.Millisecond
		for q := range 3 {
			b.fill(t, q, 10000)
		}
		f, err := fleet.New(budget)
		require.NoError(t, err)
		require.NoError(t, f.Add(b.consumer(t, 0, b.handler(0, hold), sqsconsumer.WithConcurrency(budget))))
		stop := start(t, f)
		busy := b.measure(10 * time.Second)
		require.InDelta(t, budget*10, busy[0].Seconds(), 0.05*budget*10, "a alone: the whole budget")

		require.NoError(t, f.Add(b.consumer(t, 1, b.handler(1, hold), sqsconsumer.WithConcurrency(budget))), "Add while Run runs")
		time.Sleep(time.Second)
		busy = b.measure(10 * time.Second)
		t.Logf("a, b: %v", busy)
		require.InEpsilon(t, 1.0, busy[0].Seconds()/busy[1].Seconds(), 0.05, "b takes its share at once")

		cctx, cstop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		c := b.consumer(t, 2, b.handler(2, hold), sqsconsumer.WithConcurrency(budget))
		go func() { served <- f.Serve(cctx, c) }()
		time.Sleep(time.Second)
		busy = b.measure(15 * time.Second)
		t.Logf("a, b, c: %v", busy)
		for q := range 3 {
			require.InDelta(t, budget*15/3.0, busy[q].Seconds(), 0.05*budget*15/3, "queue %d: a third", q)
		}
		require.Len(t, f.Health().Queues, 3)

		cstop()
		require.NoError(t, <-served, "Serve returns c's Run's nil")
		require.Len(t, f.Health().Queues, 2, "c left the view")
		time.Sleep(time.Second)
		busy = b.measure(10 * time.Second)
		t.Logf("a, b after c left: %v", busy)
		require.InDelta(t, budget*10, (busy[0] + busy[1]).Seconds(), 0.05*budget*10, "c's share went back to a and b")
		require.InEpsilon(t, 1.0, busy[0].Seconds()/busy[1].Seconds(), 0.05)
		require.Zero(t, busy[2])
		b.mu.Lock()
		require.LessOrEqual(t, b.peak, budget, "never more handlers than the budget")
		b.mu.Unlock()
		require.NoError(t, stop())
	})
}

// One fleet as the process's health and scaling view while queues come and
// go: no queue (unhealthy), a queue in Serve (healthy, listed; its figure
// the process's), a second one (both listed and added up; the process's
// figure unknown until the newcomer's is known), a Consumer running on its
// own and watched (listed; its own figure counts, not its slots), then each
// leaving as its Run returns nil: the health and the figures are the
// remaining queues' at once.
func TestProcessViewWhileQueuesComeAndGo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a", "b", "w")
		f, err := fleet.New(10)
		require.NoError(t, err)
		h := f.Health()
		require.False(t, h.Healthy)
		require.Equal(t, []string{"no Consumer is in the fleet"}, h.Problems)
		code, _ := healthGet(t, f, http.MethodGet)
		require.Equal(t, http.StatusServiceUnavailable, code)

		policy := sqsconsumer.WithScaling(sqsconsumer.ScalingPolicy{Target: time.Minute, ScaleInAfter: -1})
		feeding, stopFeeding := context.WithCancel(context.Background())
		var feeders sync.WaitGroup
		feed := func(q int) { // 4 msg/s
			feeders.Go(func() {
				for feeding.Err() == nil {
					b.fill(t, q, 1)
					time.Sleep(250 * time.Millisecond)
				}
			})
		}
		serve := func(q int) (stop func() error) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			c := b.consumer(t, q, b.handler(q, time.Second), sqsconsumer.WithConcurrency(10), policy)
			go func() { done <- f.Serve(ctx, c) }()
			return func() error { cancel(); return <-done }
		}

		feed(0)
		stopA := serve(0)
		time.Sleep(2 * time.Minute)
		h = f.Health()
		require.True(t, h.Healthy, "%v", h.Problems)
		require.True(t, h.Ready)
		require.Equal(t, "running", h.Status)
		require.Equal(t, map[string]string{b.urls[0]: "running"}, listed(h))
		s := f.Scaling()
		require.True(t, s.Known, s.Reason)
		require.Len(t, s.Queues, 1)
		require.InDelta(t, 4, s.SlotsNeeded, 0.8, "4 msg/s × 1 s")
		require.Equal(t, 1, s.Replicas)

		feed(1)
		stopB := serve(1)
		time.Sleep(time.Second)
		s = f.Scaling()
		require.False(t, s.Known, "b has no figure yet")
		require.Contains(t, s.Reason, b.urls[1])
		require.Equal(t, 1, s.Replicas, "the last known figure")
		time.Sleep(2 * time.Minute)
		h = f.Health()
		require.True(t, h.Healthy, "%v", h.Problems)
		require.Equal(t, map[string]string{b.urls[0]: "running", b.urls[1]: "running"}, listed(h))
		s = f.Scaling()
		require.True(t, s.Known, s.Reason)
		require.Len(t, s.Queues, 2)
		require.InDelta(t, 8, s.SlotsNeeded, 1.6, "the two queues added up")

		// A Consumer already running joins the view only.
		feed(2)
		wctx, wstop := context.WithCancel(context.Background())
		w, err := sqsconsumer.New(b.clients[2], b.urls[2], sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error {
			time.Sleep(time.Second)
			return nil
		}), sqsconsumer.WithVisibilityTimeout(time.Minute), sqsconsumer.WithConcurrency(2), policy)
		require.NoError(t, err)
		wdone := make(chan error, 1)
		go func() { wdone <- w.Run(wctx) }()
		time.Sleep(time.Second)
		require.ErrorContains(t, f.Add(w), "has already started", "a running Consumer cannot join the budget")
		require.ErrorContains(t, f.Serve(context.Background(), w), "has already started")
		require.NoError(t, f.Watch(w))
		require.ErrorContains(t, f.Watch(w), "in the fleet already")
		time.Sleep(2 * time.Minute)
		h = f.Health()
		require.True(t, h.Healthy, "%v", h.Problems)
		require.Len(t, listed(h), 3)
		s = f.Scaling()
		require.True(t, s.Known, s.Reason)
		require.Len(t, s.Queues, 3)
		require.InDelta(t, 8, s.SlotsNeeded, 1.6, "w's slots are its own, not the budget's")
		own := s.Queues[2].Scaling
		require.True(t, own.Known)
		require.GreaterOrEqual(t, own.Replicas, 3, "4 msg/s × 1 s on 2 slots: at least ceil(4 / 1.8)")
		require.Equal(t, max(own.Replicas, int(math.Ceil(s.SlotsNeeded/9))), s.Replicas, "never below a watched queue's own figure")

		require.NoError(t, stopB(), "b's Run returned nil")
		h = f.Health()
		require.Equal(t, map[string]string{b.urls[0]: "running", b.urls[2]: "running"}, listed(h), "b left at once")
		s = f.Scaling()
		require.Len(t, s.Queues, 2)
		require.InDelta(t, 4, s.SlotsNeeded, 0.8, "a's only")

		wstop()
		require.NoError(t, <-wdone)
		h = f.Health()
		require.Equal(t, map[string]string{b.urls[0]: "running"}, listed(h), "w left when its Run returned nil")
		require.True(t, h.Healthy)
		require.Len(t, f.Scaling().Queues, 1)

		require.NoError(t, stopA())
		h = f.Health()
		require.Empty(t, h.Queues)
		require.False(t, h.Healthy, "no queue left")
		stopFeeding()
		feeders.Wait()
	})
}

// A Serve'd queue whose Run fails stays in the view, failed, until Remove;
// the other queues go on (Serve stops nothing else).
func TestServeFailureStaysUntilRemove(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a")
		f, err := fleet.New(4)
		require.NoError(t, err)
		actx, astop := context.WithCancel(context.Background())
		adone := make(chan error, 1)
		go func() { adone <- f.Serve(actx, b.consumer(t, 0, b.handler(0, time.Second))) }()

		missing := b.urls[0] + "-missing"
		bad, err := sqsconsumer.New(b.clients[0], missing, b.handler(0, time.Second))
		require.NoError(t, err)
		err = f.Serve(context.Background(), bad)
		require.Error(t, err)
		time.Sleep(time.Second)
		h := f.Health()
		require.False(t, h.Healthy)
		require.Equal(t, "failed", h.Status)
		require.Equal(t, map[string]string{b.urls[0]: "running", missing: "failed"}, listed(h))
		require.NotEmpty(t, problemsAbout(h, missing))
		require.Empty(t, problemsAbout(h, b.urls[0]))

		require.True(t, f.Remove(bad))
		require.False(t, f.Remove(bad))
		h = f.Health()
		require.True(t, h.Healthy, "%v", h.Problems)
		require.Equal(t, map[string]string{b.urls[0]: "running"}, listed(h))
		astop()
		require.NoError(t, <-adone)
	})
}

// blockedAttrs holds Run in its first call, GetQueueAttributes, until
// release is closed.
type blockedAttrs struct {
	sqsconsumer.Client
	release chan struct{}
}

func (c *blockedAttrs) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	select {
	case <-c.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.Client.GetQueueAttributes(ctx, in, optFns...)
}

// A Consumer whose Run was called joins no budget, even while Run is still
// reading the queue (before, it was accepted then and ran outside the
// budget: Run had read its fleet membership already); it can be watched.
func TestRunCalledJoinsNoBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a")
		client := &blockedAttrs{Client: b.clients[0], release: make(chan struct{})}
		c, err := sqsconsumer.New(client, b.urls[0], b.handler(0, time.Second))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		synctest.Wait() // Run waits in GetQueueAttributes
		f, err := fleet.New(4)
		require.NoError(t, err)
		require.ErrorIs(t, f.Add(c), sqsconsumer.ErrInvalidOption)
		require.ErrorContains(t, f.Add(c), "has already started")
		require.ErrorContains(t, f.Serve(ctx, c), "has already started")
		require.NoError(t, f.Watch(c))
		close(client.release)
		time.Sleep(time.Second)
		require.Equal(t, "running", f.Health().Status)
		cancel()
		require.NoError(t, <-done)
		require.Empty(t, f.Health().Queues, "its Run returned nil: it left")
	})
}

// Health, Scaling, Add, Serve, Watch and Remove from many goroutines while
// queues join and leave (for -race): every Serve returns its Run's nil,
// and the fleet ends with no queue listed.
func TestJoinLeaveConcurrently(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBed(t, 10*time.Millisecond, "a", "b", "c", "d")
		for q := range 4 {
			b.fill(t, q, 200)
		}
		f, err := fleet.New(3)
		require.NoError(t, err)
		stop := start(t, f) // no queue added: Run returns at once
		require.ErrorContains(t, stop(), "no Consumer was added")

		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for round := range 4 {
			for q := range 4 {
				wg.Go(func() {
					time.Sleep(time.Duration(q*100+round*700) * time.Millisecond)
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(300+q*200)*time.Millisecond)
					defer cancel()
					if q == 3 { // watched, run here, outside the budget (not counted in b.peak)
						c := b.consumer(t, q, sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error {
							time.Sleep(50 * time.Millisecond)
							return nil
						}))
						if err := f.Watch(c); err != nil {
							errs <- err
							return
						}
						errs <- c.Run(ctx)
						return
					}
					errs <- f.Serve(ctx, b.consumer(t, q, b.handler(q, 50*time.Millisecond)))
				})
			}
		}
		wg.Go(func() {
			for range 40 {
				_ = f.Health()
				_ = f.Scaling()
				f.Remove(nil)
				time.Sleep(77 * time.Millisecond)
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Empty(t, f.Health().Queues)
		b.mu.Lock()
		require.LessOrEqual(t, b.peak, 3, "the budget, whoever joined and left")
		require.Positive(t, b.peak)
		b.mu.Unlock()
	})
}

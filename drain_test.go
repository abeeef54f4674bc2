package sqsconsumer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// longJob is a handler's work of d that checkpoints and hands its message
// back when the drain begins (Draining), and returns the context's cause
// if it is cancelled first. It records when it saw the drain and whether
// its context was still live then.
type longJob struct {
	d        time.Duration
	mu       sync.Mutex
	drained  []time.Time
	liveCtx  []bool
	finished int
}

var errCheckpointed = errors.New("draining: checkpointed")

func (j *longJob) run(ctx context.Context) error {
	select {
	case <-Draining(ctx):
		j.mu.Lock()
		j.drained = append(j.drained, time.Now())
		j.liveCtx = append(j.liveCtx, ctx.Err() == nil)
		j.mu.Unlock()
		return RetryAfter(errCheckpointed, 0)
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(j.d):
		j.mu.Lock()
		j.finished++
		j.mu.Unlock()
		return nil
	}
}

// Issue 36 point 6: a handler learns from its context the moment the
// shutdown begins, its context still live (the budget is not over), hands
// its message back, and the message is released at once; Run returns as
// soon as the handlers have, not at the budget's end. A handler that
// ignores the drain runs on to the budget's end and is cut there, as
// before. Single handlers, with middleware (which passes the handler's
// context on), and a Batch handler.
func TestDrainingHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	passThrough := WithMiddleware(func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, m *Message) error { return next.HandleMessage(ctx, m) })
	})
	for _, tc := range []struct {
		name  string
		batch bool
		opts  []Option
	}{
		{name: "single"},
		{name: "single/middleware", opts: []Option{passThrough}},
		{name: "batch", batch: true},
		{name: "batch/middleware", batch: true, opts: []Option{passThrough}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				ids := b.send(t, 4)
				job := &longJob{d: 10 * time.Minute}
				var started atomic.Int32
				var h Handler = HandlerFunc(func(ctx context.Context, m *Message) error {
					started.Add(1)
					return job.run(ctx)
				})
				if tc.batch {
					var err error
					h, err = Batch(func(ctx context.Context, msgs []*Message) error {
						started.Add(int32(len(msgs)))
						return job.run(ctx)
					}, 4, time.Second)
					require.NoError(t, err)
				}
				c, err := New(b.client, b.url, h, append(tc.opts, WithVisibilityTimeout(30*time.Second), WithConcurrency(4),
					WithWaitTime(time.Second), WithShutdownTimeout(time.Minute))...)
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(5 * time.Minute) // the jobs run, renewed
				require.EqualValues(t, 4, started.Load())
				begun := time.Now()
				require.NoError(t, stop())
				took := time.Since(begun)
				require.Less(t, took, 2*time.Second, "Run returned once the handlers handed back, not at the 1 min budget")
				job.mu.Lock()
				defer job.mu.Unlock()
				require.NotEmpty(t, job.drained)
				for i, at := range job.drained {
					require.Equal(t, begun, at, "the drain began with the shutdown")
					require.True(t, job.liveCtx[i], "the handler's context was not cancelled at the drain")
				}
				require.Zero(t, job.finished)
				for _, id := range ids {
					st := b.state(t, id)
					require.False(t, st.Deleted)
					require.False(t, st.InFlight, "released at once")
					require.Equal(t, time.Duration(0), st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout)
				}
				stats := c.Stats()
				require.EqualValues(t, 4, stats.Failed, "a hand-back is the handler's error, counted as any")
			})
		})
	}
}

// A handler that ignores the drain is cut at the budget's end, as before
// Draining existed; its context was live until then.
func TestDrainingIgnoredRunsToTheBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 1)
		var cause error
		started := make(chan struct{})
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		}), WithVisibilityTimeout(30*time.Second), WithShutdownTimeout(20*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		<-started
		begun := time.Now()
		require.NoError(t, stop())
		require.GreaterOrEqual(t, time.Since(begun), 20*time.Second)
		require.ErrorIs(t, cause, ErrShutdown)
	})
}

// Pause does not begin a drain: running handlers go on and settle as
// usual; the shutdown after it does. The channel is the same for every
// handler of a run, and closed once.
func TestDrainingNotOnPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 2)
		chans := make(chan (<-chan struct{}), 2)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			ch := Draining(ctx)
			chans <- ch
			select {
			case <-ch:
				return RetryAfter(errCheckpointed, 0)
			case <-time.After(time.Minute):
				return nil
			}
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(2))
		require.NoError(t, err)
		stop := running(t, c)
		ch1, ch2 := <-chans, <-chans
		require.NotNil(t, ch1)
		require.Equal(t, ch1, ch2, "one drain signal per run")
		c.Pause()
		time.Sleep(10 * time.Second)
		select {
		case <-ch1:
			t.Fatal("a Pause began a drain")
		default:
		}
		c.Resume()
		time.Sleep(time.Minute)
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, "the handlers finished their work across the pause")
		}
		require.NoError(t, stop())
		<-ch1 // closed by the shutdown
	})
}

// Draining on a context no Consumer made is nil (never ready);
// WithDrainSignal gives a handler's test its own signal.
func TestDrainingOutsideAConsumer(t *testing.T) {
	t.Parallel()
	require.Nil(t, Draining(context.Background()))
	//lint:ignore SA1012 a nil context is answered, not a panic
	require.Nil(t, Draining(nil))
	drain := make(chan struct{})
	ctx, cancel := context.WithTimeout(WithDrainSignal(context.Background(), drain), time.Hour)
	defer cancel()
	require.Equal(t, (<-chan struct{})(drain), Draining(ctx), "seen through derived contexts")
	job := &longJob{d: time.Hour}
	close(drain)
	err := job.run(ctx)
	require.ErrorIs(t, err, errCheckpointed)
	d, ok := retryAfterOf(err)
	require.True(t, ok)
	require.Zero(t, d)
	require.Nil(t, Draining(WithDrainSignal(context.Background(), nil)))
}

// A handler that fails during the drain while the breaker is open keeps
// its own delay: the breaker's hold (twice MaxPause), meant for later
// probes, no longer applies once the shutdown has begun.
func TestDrainingWithOpenBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 2)
		var n atomic.Int32
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if n.Add(1) == 1 {
				return errors.New("downstream down") // opens the breaker
			}
			<-Draining(ctx)
			return RetryAfter(errCheckpointed, 0)
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(2), WithBackoff(func(int) time.Duration { return time.Hour }),
			WithBreaker(Breaker{Failures: 1, Pause: time.Minute, MaxPause: 10 * time.Minute}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		_, _, opens := c.runOf().br.status()
		require.Equal(t, 1, opens)
		require.NoError(t, stop())
		released := 0
		for _, st := range b.srv.Messages(b.url) {
			last := st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout
			if last == 0 {
				released++
				require.False(t, st.InFlight)
			}
		}
		require.Equal(t, 1, released, "the drained message released at once, the failed one held")
	})
}

package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// A paused Consumer sends no receive; the long poll in flight at the
// pause is not cancelled, and the messages it brings back are released at
// once, unhandled; a handler running at the pause finishes under its
// renewed lease, past the lease length, and its message is deleted;
// Resume takes up the released messages without a restart.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		s := &spy{Client: b.client}
		var mu sync.Mutex
		var handled []string
		c, err := New(s, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.Body == "slow" {
				time.Sleep(90 * time.Second) // three leases
			}
			mu.Lock()
			handled = append(handled, m.Body)
			mu.Unlock()
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(2))
		require.NoError(t, err)
		stop := running(t, c)
		slow, err := b.srv.Send(b.url, "slow")
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait() // the slow handler runs; a long poll waits on the empty queue

		c.Pause()
		require.True(t, c.Paused())
		s.mu.Lock()
		before := len(s.maxN)
		s.mu.Unlock()
		ids := b.send(t, 3) // the long poll in flight returns them
		time.Sleep(time.Second)
		brought := 0
		for _, id := range ids {
			m, ok := b.srv.Message(b.url, id)
			require.True(t, ok)
			if len(m.Receives) == 0 {
				continue
			}
			brought++
			require.Len(t, m.Receives, 1, "message %s", id)
			require.NotEmpty(t, m.VisibilityChanges, "message %s was not released", id)
			require.Zero(t, m.VisibilityChanges[0].Timeout, "message %s: the release", id)
			require.WithinDuration(t, m.Receives[0].At, m.VisibilityChanges[0].At, 100*time.Millisecond, "message %s was not released at once", id)
			require.False(t, m.InFlight, "message %s", id)
		}
		require.Positive(t, brought, "the long poll in flight at the pause brought nothing back: the test needs it to")

		time.Sleep(3 * time.Minute)
		s.mu.Lock()
		require.Equal(t, before, len(s.maxN), "receives sent while paused")
		s.mu.Unlock()
		m, _ := b.srv.Message(b.url, slow)
		require.True(t, m.Deleted, "the handler running at the pause settles")
		require.Len(t, m.Receives, 1, "the running handler's lease lapsed")
		mu.Lock()
		require.Equal(t, []string{"slow"}, handled, "handled while paused")
		mu.Unlock()

		c.Resume()
		require.False(t, c.Paused())
		time.Sleep(time.Second)
		for _, id := range ids {
			m, _ := b.srv.Message(b.url, id)
			require.True(t, m.Deleted, "message %s after Resume", id)
		}
		mu.Lock()
		require.ElementsMatch(t, []string{"slow", "m000", "m001", "m002"}, handled)
		mu.Unlock()
		require.NoError(t, stop())
	})
}

// Pause before Run: Run starts paused and receives nothing until Resume.
func TestPauseBeforeRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		s := &spy{Client: b.client}
		ids := b.send(t, 2)
		c, err := New(s, b.url, HandlerFunc(func(ctx context.Context, m *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		c.Pause()
		stop := running(t, c)
		time.Sleep(time.Minute)
		s.mu.Lock()
		require.Empty(t, s.maxN, "receives sent while paused")
		s.mu.Unlock()
		c.Resume()
		time.Sleep(time.Second)
		for _, id := range ids {
			m, _ := b.srv.Message(b.url, id)
			require.True(t, m.Deleted, "message %s after Resume", id)
		}
		require.NoError(t, stop())
	})
}

// On a FIFO queue a pause releases the messages waiting behind a running
// one of their group, which keeps running; after Resume the group goes on
// in order.
func TestPauseFIFO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		var ids []string
		for i := range 3 {
			id, err := b.srv.Send(b.url, fmt.Sprintf("g%d", i), sqstest.WithGroupID("g"))
			require.NoError(t, err)
			ids = append(ids, id)
		}
		var mu sync.Mutex
		var order []string
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			order = append(order, m.Body)
			mu.Unlock()
			time.Sleep(45 * time.Second)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(3))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		synctest.Wait() // g0 runs, g1 and g2 wait behind it
		m, _ := b.srv.Message(b.url, ids[1])
		require.Len(t, m.Receives, 1, "g1 was not read ahead: the test needs it waiting")

		c.Pause() // returns once the releases are answered
		for _, id := range ids[1:] {
			m, _ := b.srv.Message(b.url, id)
			if len(m.Receives) > 0 {
				require.NotEmpty(t, m.VisibilityChanges, "message %s waiting at the pause was not released", id)
				require.Zero(t, m.VisibilityChanges[len(m.VisibilityChanges)-1].Timeout)
			}
		}
		time.Sleep(time.Minute)
		m, _ = b.srv.Message(b.url, ids[0])
		require.True(t, m.Deleted, "g0 running at the pause settles")
		mu.Lock()
		require.Equal(t, []string{"g0"}, order)
		mu.Unlock()

		c.Resume()
		time.Sleep(2 * time.Minute)
		mu.Lock()
		require.Equal(t, []string{"g0", "g1", "g2"}, order)
		mu.Unlock()
		for _, id := range ids {
			m, _ := b.srv.Message(b.url, id)
			require.True(t, m.Deleted, "message %s", id)
		}
		require.NoError(t, stop())
	})
}

// Pausing and resuming over and over while a FIFO queue's groups are
// handled loses no message, never runs two messages of a group at once,
// and keeps each group's order.
func TestPauseResumeChurnFIFO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		const groups, per = 5, 20
		for i := range per {
			for g := range groups {
				_, err := b.srv.Send(b.url, fmt.Sprintf("%d/%03d", g, i), sqstest.WithGroupID(fmt.Sprint(g)))
				require.NoError(t, err)
			}
		}
		var mu sync.Mutex
		busy := map[string]bool{}
		last := map[string]string{} // the latest body handled per group
		done := map[string]bool{}
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			require.False(t, busy[m.GroupID], "two messages of group %s at once", m.GroupID)
			require.GreaterOrEqual(t, m.Body, last[m.GroupID], "group %s out of order", m.GroupID)
			busy[m.GroupID], last[m.GroupID] = true, m.Body
			mu.Unlock()
			time.Sleep(time.Duration(len(m.Body)%3+1) * 300 * time.Millisecond)
			mu.Lock()
			busy[m.GroupID] = false
			done[m.Body] = true
			mu.Unlock()
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(1), WithBatchSize(1))
		require.NoError(t, err)
		stop := running(t, c)
		for i := range 40 {
			time.Sleep(time.Duration(i%7+1) * 130 * time.Millisecond)
			if i%2 == 0 {
				c.Pause()
			} else {
				c.Resume()
			}
		}
		c.Resume()
		time.Sleep(5 * time.Minute)
		mu.Lock()
		require.Len(t, done, groups*per, "messages handled")
		mu.Unlock()
		for _, m := range b.srv.Messages(b.url) {
			require.True(t, m.Deleted, "message %s", m.Body)
		}
		require.NoError(t, stop())
	})
}

// pauseProbe checks that c's paused state and its receiving agree: paused,
// a message sent now is not handled (within 3 s); not paused, it is. It
// returns the message's body; handled receives each handled body.
func pauseProbe(t *testing.T, b bundle, c *Consumer, handled <-chan string, n int) {
	t.Helper()
	body := fmt.Sprintf("probe%04d", n)
	_, err := b.srv.Send(b.url, body)
	require.NoError(t, err)
	paused := c.Paused()
	select {
	case got := <-handled:
		require.False(t, paused, "round %d: handled %s while Paused() says paused", n, got)
		require.Equal(t, body, got, "round %d", n)
		return
	case <-time.After(3 * time.Second):
		require.True(t, paused, "round %d: Paused() says not paused, but nothing was handled: the run stayed paused", n)
	}
	c.Resume()
	select {
	case got := <-handled:
		require.Equal(t, body, got, "round %d: after Resume", n)
	case <-time.After(3 * time.Second):
		require.Fail(t, "nothing handled after Resume", "round %d", n)
	}
}

// Pause and Resume called at once, in every order and with Pause slowed
// between its change and the run (a delay as a contended lock or a busy
// CPU would make), leave Paused() and the Consumer's receiving in
// agreement: the later of the two decides both. In virtual time, so the
// offsets place each call exactly: Resume before, inside and after
// Pause's window, from a running and from a paused Consumer.
func TestPauseResumeAgreeInEveryOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		handled := make(chan string, 16)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			handled <- m.Body
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		var delay time.Duration // set before each round's calls, read by Pause
		c.pause.delay = func() { time.Sleep(delay) }
		stop := running(t, c)
		time.Sleep(time.Second)
		const rounds = 96
		for n := range rounds {
			startPaused := n%2 == 1
			if startPaused {
				c.Pause()
			}
			delay = time.Duration(n/2%4) * time.Millisecond       // 0 to 3 ms inside Pause
			resumeAt := time.Duration(n/8%6) * time.Millisecond   // Resume at 0 to 5 ms
			pauseAt := time.Duration(n/48) * 2 * time.Millisecond // Pause at 0 or 2 ms
			var wg sync.WaitGroup
			wg.Go(func() { time.Sleep(pauseAt); c.Pause() })
			wg.Go(func() { time.Sleep(resumeAt); c.Resume() })
			wg.Wait()
			pauseProbe(t, b, c, handled, n)
			require.False(t, c.Paused())
		}
		require.NoError(t, stop())
		for _, m := range b.srv.Messages(b.url) {
			require.True(t, m.Deleted, "message %s", m.Body)
		}
	})
}

// Many Pause and Resume pairs called at once from goroutines of their
// own, with real parallelism (the race detector perturbs the schedule):
// after each pair Paused() and the Consumer's receiving agree. Bounded:
// 300 pairs, each checked.
func TestPauseResumeConcurrentPairs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		handled := make(chan string, 16)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			handled <- m.Body
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second)
		for n := range 300 {
			start := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { <-start; c.Pause() })
			wg.Go(func() { <-start; c.Resume() })
			close(start)
			wg.Wait()
			pauseProbe(t, b, c, handled, n)
		}
		require.NoError(t, stop())
	})
}

// A paused Consumer is healthy however long the pause (HealthHandler 200,
// Status "paused"), and not ready (ReadyHandler 503): a liveness probe
// must not restart it, which would undo the pause. Paused before Run with
// the queue's attributes unreadable (nothing answered yet), too. A
// running handler's renewals still count while paused.
func TestPausedIsHealthy(t *testing.T) {
	t.Parallel()
	ready := func(c *Consumer) int {
		rec := httptest.NewRecorder()
		c.ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}
	t.Run("paused while running", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithVisibilityTimeout(30*time.Second))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.Equal(t, "running", c.Health().Status)
			c.Pause()
			time.Sleep(30 * time.Minute) // past any stall limit
			h := c.Health()
			require.True(t, h.Healthy, h.Problems)
			require.False(t, h.Ready)
			require.True(t, h.Paused)
			require.Equal(t, "paused", h.Status)
			code, body := healthGet(t, c, http.MethodGet)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, "paused", body["status"])
			require.Equal(t, true, body["paused"])
			require.Equal(t, http.StatusServiceUnavailable, ready(c))

			c.Resume()
			h = c.Health()
			require.True(t, h.Healthy, "the stall clock starts again at Resume: %v", h.Problems)
			require.True(t, h.Ready)
			require.Equal(t, "running", h.Status)
			require.Equal(t, http.StatusOK, ready(c))
			require.NoError(t, stop())
		})
	})
	t.Run("paused before Run, nothing answered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.srv.FailNext("GetQueueAttributes", 1, sqstest.FaultAccessDenied) // WithVisibilityTimeout makes it optional
			c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }), WithVisibilityTimeout(30*time.Second))
			require.NoError(t, err)
			c.Pause()
			stop := running(t, c)
			time.Sleep(10 * time.Minute) // past the startup limit
			h := c.Health()
			require.True(t, h.Healthy, h.Problems)
			require.Equal(t, "paused", h.Status)
			require.Equal(t, http.StatusServiceUnavailable, ready(c))
			c.Resume()
			time.Sleep(21 * time.Second) // the first long poll's answer: SQS has answered
			require.True(t, c.Health().Ready)
			require.NoError(t, stop())
		})
	})
	t.Run("paused with a handler whose renewals fail", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			down := &renewalsDown{Client: b.client}
			b.send(t, 1)
			release := make(chan struct{})
			c, err := New(down, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}), WithVisibilityTimeout(5*time.Minute), WithHealthLimits(0, time.Hour))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Second)
			c.Pause()
			down.down.Store(true)
			time.Sleep(4 * time.Minute)
			h := c.Health()
			require.False(t, h.Healthy, "a running handler's renewals go unanswered while paused")
			require.Equal(t, "paused", h.Status)
			require.Contains(t, h.Problems[0], "no ReceiveMessage, visibility change or delete was answered")
			close(release)
			down.down.Store(false)
			require.NoError(t, stop())
		})
	})
}

// renewalsDown fails every visibility change while down is set.
type renewalsDown struct {
	Client
	down atomic.Bool
}

func (d *renewalsDown) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if d.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return d.Client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

// Pause and Resume during the shutdown's drain and after Run returned
// neither block nor break it: Run returns in time, and Paused() says what
// the later call asked.
func TestPauseDuringShutdownAndAfterRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for i := range 3 {
			_, err := b.srv.Send(b.url, fmt.Sprintf("g%d", i), sqstest.WithGroupID("g"))
			require.NoError(t, err)
		}
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(10 * time.Second)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithShutdownTimeout(time.Minute))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(time.Second) // g0 runs, g1 and g2 wait behind it
		cancel()
		time.Sleep(time.Second) // draining
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(c.Pause)
			wg.Go(c.Resume)
		}
		wg.Wait()
		c.Pause()
		require.Equal(t, "draining", c.Health().Status)
		require.True(t, c.Health().Paused)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(2 * time.Minute):
			require.Fail(t, "Run did not return")
		}
		c.Resume()
		c.Pause()
		require.True(t, c.Paused())
		c.Resume()
		require.False(t, c.Paused())
		require.Equal(t, "stopped", c.Health().Status)
		for _, m := range b.srv.Messages(b.url) {
			require.False(t, m.InFlight, "message %s left hidden", m.Body)
		}
	})
}

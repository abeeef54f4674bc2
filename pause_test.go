package sqsconsumer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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

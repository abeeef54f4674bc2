package sqsconsumer

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Adaptive leases: on work that shifts from fast to slow, the visibility
// asked for on receive follows within a bounded number of messages, the
// heartbeat covers the messages received with a short lease, and no
// message is delivered twice.
func TestAdaptiveVisibilityFollowsTheWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		var mu sync.Mutex
		runs := map[string]int{}
		var settledSlow int
		var firstAfter20 time.Time
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			runs[m.ID]++
			mu.Unlock()
			if strings.HasPrefix(m.Body, "slow") {
				time.Sleep(90 * time.Second)
				mu.Lock()
				settledSlow++
				if settledSlow == 20 {
					firstAfter20 = time.Now()
				}
				mu.Unlock()
			} else {
				time.Sleep(500 * time.Millisecond)
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithAdaptiveVisibility(10*time.Second, 15*time.Minute), WithConcurrency(10))
		require.NoError(t, err)
		stop := running(t, c)
		for i := range 300 {
			_, err := b.srv.Send(b.url, "fast"+string(rune('a'+i%26)))
			require.NoError(t, err)
		}
		time.Sleep(2 * time.Minute)
		for range 100 {
			_, err := b.srv.Send(b.url, "slow")
			require.NoError(t, err)
		}
		time.Sleep(30 * time.Minute)
		require.NoError(t, stop())

		var fastVis, slowEarly, slowLate []time.Duration
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, "%s processed", st.ID)
			require.Equal(t, 1, st.ReceiveCount, "no overrun duplicate")
			require.Equal(t, 1, runs[st.ID])
			v := st.Receives[0].VisibilityTimeout
			switch {
			case strings.HasPrefix(st.Body, "fast"):
				fastVis = append(fastVis, v)
			case st.Receives[0].At.After(firstAfter20):
				slowLate = append(slowLate, v)
			default:
				slowEarly = append(slowEarly, v)
			}
		}
		require.Equal(t, 30*time.Second, fastVis[0], "before 20 settled: the configured lease")
		require.Equal(t, 10*time.Second, fastVis[len(fastVis)-1], "fast work: the floor")
		require.NotEmpty(t, slowEarly)
		require.NotEmpty(t, slowLate)
		for _, v := range slowLate {
			require.GreaterOrEqual(t, v, 180*time.Second, "after 20 slow messages the lease is twice their p99")
			require.LessOrEqual(t, v, 15*time.Minute)
		}
		t.Logf("visibility asked: first fast %v, last fast %v, slow before 20 settled %v..., after %v...", fastVis[0], fastVis[len(fastVis)-1], slowEarly[:3], slowLate[:3])
	})
}

func TestConsumerStatsLogged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"VisibilityTimeout": "600"})
		var logs bytes.Buffer
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(time.Duration(len(m.Body)) * time.Second)
			return nil
		}), WithConcurrency(50), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		for i := range 200 {
			_, err := b.srv.Send(b.url, strings.Repeat("x", 5+i%20))
			require.NoError(t, err)
		}
		stop := running(t, c)
		time.Sleep(10 * time.Minute)
		require.NoError(t, stop())
		st := c.Stats()
		require.Equal(t, int64(200), st.Processed)
		require.InDelta(t, 24*time.Second, st.P99, float64(2*time.Second))
		require.Contains(t, logs.String(), "sqsconsumer: stats", "Run logs its figures at the end")
		require.Contains(t, logs.String(), "stats.processed=200")
	})
}

func TestAdaptiveOptionValidation(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	_, err := New(&spy{}, "u", h, WithAdaptiveVisibility(time.Second, time.Minute))
	require.ErrorContains(t, err, "WithAdaptiveVisibility(1s, 1m0s)")
	_, err = New(&spy{}, "u", h, WithAdaptiveVisibility(time.Minute, 30*time.Second))
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = New(&spy{}, "u", h, WithAdaptiveVisibility(10*time.Second, time.Minute), WithHeartbeatInterval(5*time.Second))
	require.ErrorContains(t, err, "cannot be combined")
}

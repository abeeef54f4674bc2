package doctor

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// measure runs a real Consumer on the in-memory SQS, inside a synctest
// bubble (virtual time: ten thousand messages of minutes each take well
// under a second), over one message per duration, each handled in exactly
// that long, and returns the Consumer's Stats. Every message runs at once
// (concurrency len(durations)), so no message waits in the process; a
// measured duration is the handler's plus its delete's batching window.
// opts are added to the Consumer's options (a 10-minute lease by
// default).
func measure(t *testing.T, durations []time.Duration, opts ...sqsconsumer.Option) sqsconsumer.Stats {
	t.Helper()
	var st sqsconsumer.Stats
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("work", nil)
		require.NoError(t, err)
		for i := range durations {
			_, err := srv.Send(url, strconv.Itoa(i))
			require.NoError(t, err)
		}
		h := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			i, err := strconv.Atoi(m.Body)
			if err != nil {
				return err
			}
			time.Sleep(durations[i])
			return nil
		})
		all := append([]sqsconsumer.Option{sqsconsumer.WithVisibilityTimeout(10 * time.Minute),
			sqsconsumer.WithConcurrency(max(len(durations), 1)), sqsconsumer.WithPollers(50)}, opts...)
		c, err := sqsconsumer.New(srv.Client(), url, h, all...)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(slices.Max(append(durations, 0)))
		for c.Stats().Processed < int64(len(durations)) {
			time.Sleep(time.Second)
		}
		cancel()
		require.NoError(t, <-done)
		st = c.Stats()
	})
	require.EqualValues(t, len(durations), st.Processed, "every message measured once")
	return st
}

// spread returns n durations evenly spread from lo to hi.
func spread(n int, lo, hi time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = lo + time.Duration(float64(hi-lo)*float64(i)/float64(max(n-1, 1)))
	}
	return out
}

// steps is 1,000 messages: 900 of 1 s, 90 of 5 s, 10 of 20 s (p90 1 s, p99
// 5 s, p99.9 20 s).
func steps() []time.Duration {
	return append(append(spread(900, time.Second, time.Second), spread(90, 5*time.Second, 5*time.Second)...), spread(10, 20*time.Second, 20*time.Second)...)
}

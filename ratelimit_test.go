package sqsconsumer

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTokenBucket(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at        time.Duration // after t0
		op        string        // "ready" (readyAt for n), "take", "back"
		n         int
		wantReady time.Duration // for "ready": when n tokens are there, after t0
	}
	tests := []struct {
		name  string
		limit float64
		burst int
		steps []step
	}{
		{"starts full", 50, 10, []step{
			{0, "ready", 10, 0},
		}},
		{"refills at the limit", 50, 10, []step{
			{0, "take", 10, 0},
			{0, "ready", 10, 200 * time.Millisecond},
			{100 * time.Millisecond, "ready", 5, 100 * time.Millisecond},
			{100 * time.Millisecond, "ready", 10, 200 * time.Millisecond},
			{200 * time.Millisecond, "ready", 10, 200 * time.Millisecond},
		}},
		{"never beyond the burst", 50, 10, []step{
			{time.Hour, "take", 10, 0},
			{time.Hour, "ready", 1, time.Hour + 20*time.Millisecond},
		}},
		{"unused tokens come back", 50, 10, []step{
			{0, "take", 10, 0},
			{0, "back", 7, 0},
			{0, "ready", 7, 0},
			{0, "ready", 8, 20 * time.Millisecond},
		}},
		{"given back up to the burst only", 1, 3, []step{
			{0, "take", 1, 0},
			{0, "back", 5, 0},
			{0, "take", 3, 0},
			{0, "ready", 1, time.Second},
		}},
		{"slow limits", 0.5, 1, []step{
			{0, "take", 1, 0},
			{time.Second, "ready", 1, 2 * time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTokenBucket(tt.limit, tt.burst)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "ready":
					got := b.readyAt(now, s.n)
					require.Equal(t, t0.Add(s.wantReady), got, "step %d: readyAt(%d)", i, s.n)
				case "take":
					require.False(t, b.readyAt(now, s.n).After(now), "step %d: take(%d) not allowed", i, s.n)
					b.take(now, s.n)
				case "back":
					b.giveBack(now, s.n)
				}
			}
		})
	}
}

func TestWithRateLimitValidates(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	const u = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	for _, tt := range []struct {
		limit float64
		burst int
		want  string
	}{
		{0, 1, "limit must be above 0"},
		{-1, 1, "limit must be above 0"},
		{math.NaN(), 1, "limit must be above 0"},
		{math.Inf(1), 1, "limit must be above 0"},
		{200_000, 1, "at most 100000"},
		{10, 0, "burst must be from 1"},
		{10, 100_001, "burst must be from 1"},
	} {
		_, err := New(&fakeNoCalls{}, u, h, WithRateLimit(tt.limit, tt.burst))
		require.ErrorIs(t, err, ErrInvalidOption, "WithRateLimit(%v, %d)", tt.limit, tt.burst)
		require.ErrorContains(t, err, tt.want, "WithRateLimit(%v, %d)", tt.limit, tt.burst)
	}
	_, err := New(&fakeNoCalls{}, u, h, WithRateLimit(0.01, 1))
	require.NoError(t, err)
}

// fakeNoCalls is a Client for tests that never reach SQS.
type fakeNoCalls struct{ Client }

// A rate of 50 messages a second holds within 2 % over a virtual minute,
// from a backlog the handlers could take 20 times faster, and the limit
// costs no message a release or a second receive: every receive asked
// only for what the limiter allowed.
func TestRateLimitHoldsBeforeTheReceive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		client := &latencyClient{Client: b.client, rtt: 10 * time.Millisecond}
		b.send(t, 4000)
		var mu sync.Mutex
		var starts []time.Time
		c, err := New(client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			return nil
		}), WithVisibilityTimeout(time.Minute), WithConcurrency(20), WithRateLimit(50, 10))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		t0 := time.Now()
		time.Sleep(time.Minute)
		t1 := time.Now()
		require.NoError(t, stop())

		received, started := 0, 0
		for _, m := range b.srv.Messages(b.url) {
			require.LessOrEqual(t, len(m.Receives), 1, "message %s received again", m.ID)
			for _, r := range m.Receives {
				if !r.At.Before(t0) && r.At.Before(t1) {
					received++
				}
			}
			for _, v := range m.VisibilityChanges {
				if v.At.Before(t1) {
					require.NotZero(t, v.Timeout, "message %s was released at %v, before the shutdown", m.ID, v.At.Sub(t0))
				}
			}
		}
		mu.Lock()
		for _, s := range starts {
			if !s.Before(t0) && s.Before(t1) {
				started++
			}
		}
		mu.Unlock()
		require.InDelta(t, 3000, received, 60, "messages received in the minute")
		require.InDelta(t, 3000, started, 60, "handlers started in the minute")
		t.Logf("received %d, started %d in a virtual minute at 50/s; receives sent %d asking %d", received, started, client.recvs.Load(), client.asked.Load())
	})
}

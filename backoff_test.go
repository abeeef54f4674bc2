package sqsconsumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		n           int
		base, limit time.Duration
		want        time.Duration
	}{
		{-1, 100 * ms, 10 * time.Second, 100 * ms},
		{0, 100 * ms, 10 * time.Second, 100 * ms},
		{1, 100 * ms, 10 * time.Second, 200 * ms},
		{6, 100 * ms, 10 * time.Second, 6400 * ms},
		{7, 100 * ms, 10 * time.Second, 10 * time.Second},
		{1 << 20, 100 * ms, 10 * time.Second, 10 * time.Second}, // no overflow, no long loop
		{3, 5 * time.Second, 15 * time.Minute, 40 * time.Second},
		{9, 5 * time.Second, 15 * time.Minute, 15 * time.Minute},
		{2, time.Second, 500 * ms, 500 * ms}, // base above the limit
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, backoffDelay(tt.n, tt.base, tt.limit), "backoffDelay(%d, %v, %v)", tt.n, tt.base, tt.limit)
	}
}

func TestBetween(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Second, between(time.Second, time.Second))
	require.Equal(t, time.Second, between(time.Second, 0), "an empty range gives its lower end")
	lo, hi := 50*time.Millisecond, 100*time.Millisecond
	seenLow, seenHigh := false, false
	for range 10_000 {
		d := between(lo, hi)
		require.GreaterOrEqual(t, d, lo)
		require.LessOrEqual(t, d, hi)
		seenLow = seenLow || d < lo+5*time.Millisecond
		seenHigh = seenHigh || d > hi-5*time.Millisecond
	}
	require.True(t, seenLow && seenHigh, "the jitter spans the range")
}

// The schedules built on backoffDelay keep their documented ranges.
func TestBackoffSchedules(t *testing.T) {
	t.Parallel()
	for range 1000 {
		d := receiveBackoff(0)
		require.True(t, d >= 50*time.Millisecond && d <= 100*time.Millisecond, "receiveBackoff(0) = %v", d)
		d = receiveBackoff(100)
		require.True(t, d >= 5*time.Second && d <= 10*time.Second, "receiveBackoff(100) = %v", d)
		d = DefaultBackoff(1)
		require.True(t, d >= 4*time.Second && d <= 6*time.Second, "DefaultBackoff(1) = %v", d)
		d = DefaultBackoff(4)
		require.True(t, d >= 32*time.Second && d <= 48*time.Second, "DefaultBackoff(4) = %v", d)
		d = DefaultBackoff(1000)
		require.True(t, d >= 12*time.Minute && d <= 18*time.Minute, "DefaultBackoff(1000) = %v", d)
	}
}

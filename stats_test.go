package sqsconsumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestAdaptiveVisibility(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		p99, lo, hi time.Duration
		want        time.Duration
	}{
		{"no data gives the lower bound", 0, 30 * time.Second, time.Hour, 30 * time.Second},
		{"negative p99 gives the lower bound", -time.Second, 30 * time.Second, time.Hour, 30 * time.Second},
		{"twice p99", 5 * time.Minute, 10 * time.Second, time.Hour, 10 * time.Minute},
		{"rounded up to whole seconds", 7200 * time.Millisecond, 10 * time.Second, time.Hour, 15 * time.Second},
		{"clamped to hi", 50 * time.Minute, 10 * time.Second, time.Hour, time.Hour},
		{"clamped to lo", 2 * time.Second, 20 * time.Second, time.Hour, 20 * time.Second},
		{"fast work meets the floor", 100 * time.Millisecond, 0, time.Hour, MinAdaptiveVisibility},
		{"lo below the floor is raised", time.Second, 3 * time.Second, time.Hour, MinAdaptiveVisibility},
		{"fractional lo rounds up", 0, 12500 * time.Millisecond, time.Hour, 13 * time.Second},
		{"fractional hi rounds down", time.Hour, 10 * time.Second, 90500 * time.Millisecond, 90 * time.Second},
		{"hi below lo: lo wins", time.Hour, 30 * time.Second, 5 * time.Second, 30 * time.Second},
		{"hi 0: lo wins", time.Hour, 30 * time.Second, 0, 30 * time.Second},
		{"hi above 12 h is capped", 20 * time.Hour, 10 * time.Second, 100 * time.Hour, MaxVisibilityTimeout},
		{"huge p99 does not overflow", time.Duration(math.MaxInt64), 10 * time.Second, 2 * time.Hour, 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := AdaptiveVisibility(tt.p99, tt.lo, tt.hi)
			require.Equal(t, tt.want, got, "AdaptiveVisibility(%v, %v, %v)", tt.p99, tt.lo, tt.hi)
			require.Zero(t, got%time.Second, "whole seconds")
		})
	}
}

func TestAdaptiveFollowsShift(t *testing.T) {
	t.Parallel()
	r := newStatsRecorder()
	const lo, hi, fallback = 15 * time.Second, 30 * time.Minute, 45 * time.Second
	settle := func(d time.Duration) {
		r.countKind(EventReceived, 1)
		r.settled(d, 0)
	}
	require.Equal(t, fallback, r.adaptiveVisibility(lo, hi, fallback), "no data: the fallback")
	require.Equal(t, hi, r.adaptiveVisibility(lo, hi, time.Hour), "the fallback is clamped")
	i := 0
	for ; i < adaptiveMinSamples-1; i++ {
		settle(2 * time.Second)
	}
	require.Equal(t, fallback, r.adaptiveVisibility(lo, hi, fallback), "too few samples: the fallback")
	for ; i < 1000; i++ {
		settle(2 * time.Second)
	}
	require.Equal(t, lo, r.adaptiveVisibility(lo, hi, fallback), "fast work: the lower bound")

	// The work turns slow: the lease follows within a few messages.
	n := 0
	for ; r.adaptiveVisibility(lo, hi, fallback) < 4*time.Minute; n++ {
		require.Less(t, n, 10, "the lease did not follow slow work")
		settle(2 * time.Minute)
	}
	require.Equal(t, 4*time.Minute, AdaptiveVisibility(r.Stats().RecentP99, lo, hi))
	t.Logf("the lease followed slow work after %d messages", n)

	// Fast again: it comes back down within the window (at most 512).
	n = 0
	for ; r.adaptiveVisibility(lo, hi, fallback) > lo; n++ {
		require.Less(t, n, 2*recentHalf, "the lease did not come back down")
		settle(2 * time.Second)
	}
	t.Logf("the lease came back down after %d messages", n)
}

// TestConsumerStatsMeasureEachMessageOnce runs a Consumer over messages
// that succeed, fail, lose their lease while the handler runs, and wait
// unstarted at shutdown, and reads Stats at each step: a message's
// duration runs from its arrival to its settlement and is recorded once,
// after its handler returned (not when its lease was lost); a message
// released before its handler started is only counted.
func TestConsumerStatsMeasureEachMessageOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		var mu sync.Mutex
		runs := map[string]int{}
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			runs[m.Body]++
			n := runs[m.Body]
			mu.Unlock()
			switch m.Body {
			case "ok":
				time.Sleep(4 * time.Second)
			case "fail":
				if n == 1 {
					time.Sleep(2 * time.Second)
					return errors.New("fails once")
				}
			case "lost":
				time.Sleep(20 * time.Second) // ignores the lost lease
			}
			return nil
		}), WithConcurrency(1), WithMaxReadAhead(0), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)

		// A success: nothing is recorded while the handler runs; then one
		// duration, the work plus the delete (its batching window).
		_, err = b.srv.Send(b.url, "ok")
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		st := c.Stats()
		require.Zero(t, st.Processed, "running: not yet recorded")
		require.Equal(t, 1, st.Running)
		time.Sleep(7 * time.Second)
		st = c.Stats()
		require.EqualValues(t, 1, st.Processed)
		require.EqualValues(t, 1, st.Deleted)
		require.GreaterOrEqual(t, st.Max, 4*time.Second)
		require.LessOrEqual(t, st.Max, 4*time.Second+2*coalesceWindow, "arrival to delete: the work and the delete")

		// A failure: recorded at its release, once; its second delivery
		// (after the 5 s backoff) succeeds at once and is one more.
		_, err = b.srv.Send(b.url, "fail")
		require.NoError(t, err)
		time.Sleep(time.Second)
		require.EqualValues(t, 1, c.Stats().Processed)
		time.Sleep(2 * time.Second)
		st = c.Stats()
		require.EqualValues(t, 2, st.Processed, "recorded at the release")
		require.EqualValues(t, 1, st.Released)
		time.Sleep(10 * time.Second)
		st = c.Stats()
		require.EqualValues(t, 3, st.Processed, "the redelivery is a second duration")
		require.EqualValues(t, 1, st.ReceiveCounts[2])
		require.EqualValues(t, 1, st.Redeliveries())

		// A lease lost while the handler runs: another consumer takes the
		// message; the loss is counted at the first renewal, and the
		// duration when the handler returns (20 s after arrival).
		_, err = b.srv.Send(b.url, "lost")
		require.NoError(t, err)
		time.Sleep(time.Second)
		msgs := b.srv.Messages(b.url)
		var id string
		for _, m := range msgs {
			if m.Body == "lost" {
				id = m.ID
			}
		}
		require.NoError(t, b.srv.Expire(b.url, id))
		out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(b.url), VisibilityTimeout: 600})
		require.NoError(t, err)
		require.Len(t, out.Messages, 1)
		time.Sleep(10 * time.Second) // past the first renewal
		st = c.Stats()
		require.EqualValues(t, 1, st.LeasesLost)
		require.EqualValues(t, 3, st.Processed, "the handler still runs: not recorded at the loss")
		time.Sleep(10 * time.Second)
		st = c.Stats()
		require.EqualValues(t, 4, st.Processed, "recorded when the handler returned")
		require.GreaterOrEqual(t, st.Max, 20*time.Second)
		require.Less(t, st.Max, 21*time.Second)
		_, err = b.client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(b.url), ReceiptHandle: out.Messages[0].ReceiptHandle})
		require.NoError(t, err)
		require.NoError(t, stop())
		require.Zero(t, c.Stats().ReleasedUnstarted)
	})
}

// TestStatsReleasedUnstartedOnlyCounted: messages waiting behind their
// FIFO group at shutdown are released before their handlers started; they
// are counted, and are in no percentile.
func TestStatsReleasedUnstartedOnlyCounted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(3 * time.Second)
			return nil
		}), WithConcurrency(4), WithVisibilityTimeout(30*time.Second), WithShutdownTimeout(10*time.Second))
		require.NoError(t, err)
		b.send(t, 4, sqstest.WithGroupID("g"))
		stop := running(t, c)
		time.Sleep(time.Second)
		synctest.Wait()
		st := c.Stats()
		require.Equal(t, 1, st.Running)
		require.Equal(t, 3, st.Waiting, "three behind their group")
		require.NoError(t, stop())
		st = c.Stats()
		require.EqualValues(t, 1, st.Processed, "the running handler finished within the budget")
		require.EqualValues(t, 3, st.ReleasedUnstarted)
		require.EqualValues(t, 1, st.Deleted)
		require.GreaterOrEqual(t, st.Max, 3*time.Second)
		require.Less(t, st.Max, 4*time.Second, "only the handled message's duration")
	})
}

// TestStatsLogJSON logs Stats through slog's JSON handler and checks the
// shape: durations as duration strings rounded to the millisecond (the
// microsecond below one), ratios to two decimals, leases lost and expired
// apart.
func TestStatsLogJSON(t *testing.T) {
	t.Parallel()
	st := Stats{
		Received: 12, Deleted: 9, Released: 2, Failed: 2, Renewals: 4, RenewalFailures: 1,
		LeasesLost: 2, LeasesExpired: 5, CeilingHits: 1, Adopted: 1,
		Processed: 11,
		P50:       345678 * time.Nanosecond, P90: 1234567891 * time.Nanosecond, P99: 9999600 * time.Microsecond,
		P999: 40 * time.Second, Max: 3*time.Minute + 10500400*time.Microsecond, Mean: 2 * time.Second,
		ReceiveCounts:      map[int]int64{1: 10, 2: 2},
		RenewalsPerMessage: 4.0 / 11, RenewedShare: 2.0 / 3,
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("stats", "stats", st)
	var got struct {
		Stats map[string]any `json:"stats"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got), buf.String())
	require.Equal(t, map[string]any{
		"processed": 11.0,
		"p50":       "346µs", "p90": "1.235s", "p99": "10s", "p999": "40s", "max": "3m10.5s", "mean": "2s",
		"received": 12.0, "redeliveries": 3.0, "deleted": 9.0, "released": 2.0, "failed": 2.0,
		"renewals": 4.0, "renewal_failures": 1.0, "renewals_per_message": 0.36, "renewed_share": 0.67,
		"leases_lost": 2.0, "leases_expired": 5.0, "ceiling_hits": 1.0,
	}, got.Stats)
	for _, k := range []string{"p50", "p90", "p99", "p999", "max", "mean"} {
		_, err := time.ParseDuration(got.Stats[k].(string))
		require.NoError(t, err, "%s reads back as a duration", k)
	}
}

// A Stats prints as its figures, not as its fields (an unexported pointer
// among them would print as an address).
func TestStatsString(t *testing.T) {
	t.Parallel()
	st := Stats{Processed: 3, P50: 1500 * time.Millisecond, Received: 4, Running: 2}
	for _, got := range []string{st.String(), fmt.Sprintf("%v", st), fmt.Sprintf("%+v", st)} {
		require.Contains(t, got, "processed=3 p50=1.5s")
		require.Contains(t, got, "received=4")
		require.Contains(t, got, "running=2 waiting=0 asked=0")
		require.NotContains(t, got, "0x")
	}
}

// The scaling signal's time in flight is the time SQS counts messages as
// not visible per handler run: a message handed back unstarted adds its
// time (it was in flight) but no run, and a release's retry visibility
// adds the time SQS hides the message after it; the window forgets the
// oldest half once a half is full.
func TestMeanNotVisiblePerRun(t *testing.T) {
	t.Parallel()
	r := newStatsRecorder()
	require.Zero(t, r.meanNotVisible())
	r.notVisible(200*time.Millisecond, false) // handed back unstarted
	require.Zero(t, r.meanNotVisible(), "no run yet")
	r.notVisible(time.Second, true)
	r.notVisible(time.Second+10*time.Second, true) // failed, retried after 10 s
	require.Equal(t, (200*time.Millisecond+12*time.Second)/2, r.meanNotVisible())
	for range 2 * recentHalf {
		r.notVisible(time.Second, true)
	}
	require.Equal(t, time.Second, r.meanNotVisible(), "the old records are forgotten")
}

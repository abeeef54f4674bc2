package sqsconsumer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// A long poll that waited for its messages is no round trip: ten messages
// that become visible together 12 s into a poll come back in one full
// answer after 12 s. Taken for the round trip, it made the coalesced calls
// wait for the one poller (back in a 20 s poll on the empty queue) up to
// twice that: the renewals of 3 s leases missed their deadlines, and the
// deletes came 20 s late.
func TestLongPollIsNoRoundTrip(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		rec := &recorder{}
		ids := b.send(t, 10, sqstest.WithDelay(12*time.Second))
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(2500 * time.Millisecond) // needs two renewals of its 3 s lease
			return ctx.Err()
		}), WithVisibilityTimeout(3*time.Second), WithPollers(1), WithConcurrency(20), WithObserver(rec))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(15 * time.Second) // visible at 12 s, handled by 14.5 s
		synctest.Wait()
		var states []sqstest.MessageState
		for _, id := range ids {
			states = append(states, b.state(t, id))
		}
		f := c.flowOf()
		f.mu.Lock()
		rtt := f.rtt.value()
		f.mu.Unlock()
		require.NoError(t, stop())
		for _, st := range states {
			require.True(t, st.Deleted, "message %s deleted within a second of its handler's success", st.ID)
			require.Equal(t, 1, st.ReceiveCount)
		}
		require.Zero(t, rec.count(EventRenewalFailed), "no renewal waited for the poller past its deadline")
		require.Zero(t, rec.count(EventLeaseExpired))
		require.Less(t, rtt, time.Second, "the round trip estimate is not the long poll's wait")
	})
}

// However slow the round trip, a renewal never waits for a poller longer
// than a share of its lease's slack: with every call taking 2 s, jobs
// would wait 4 s for the one poller, busy in a 20 s long poll, and the
// renewals of a 12 s lease, 8 s before its deadline with 4 s to answer,
// would time out.
func TestJobWaitWithinLeaseSlack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		rec := &recorder{}
		client := &latencyClient{Client: b.client, rtt: 2 * time.Second} // a slow network
		first := b.send(t, 1)
		c, err := New(client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.ID != first[0] {
				time.Sleep(10 * time.Second) // needs two renewals of its 12 s lease
			}
			return ctx.Err()
		}), WithVisibilityTimeout(12*time.Second), WithPollers(1), WithConcurrency(20), WithObserver(rec))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		f := c.flowOf()
		f.mu.Lock()
		rtt := f.rtt.value()
		f.mu.Unlock()
		second := b.send(t, 1)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		firstState, secondState := b.state(t, first[0]), b.state(t, second[0])
		require.NoError(t, stop())
		require.Equal(t, 2*time.Second, rtt, "the round trip")
		require.True(t, firstState.Deleted)
		require.True(t, secondState.Deleted)
		require.Equal(t, 1, secondState.ReceiveCount)
		require.Zero(t, rec.count(EventRenewalFailed), "no renewal waited for the poller past its deadline")
		require.Zero(t, rec.count(EventLeaseExpired))
	})
}

// A job waits for a poller about two round trips, at least 20 ms, and never
// more than its bound (a share of the shortest lease's slack), however slow
// the round trip.
func TestJobWaitFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rtt, limit, want time.Duration
	}{
		{0, 0, 20 * time.Millisecond},
		{5 * time.Millisecond, 0, 20 * time.Millisecond},
		{30 * time.Millisecond, 0, 60 * time.Millisecond},
		{30 * time.Millisecond, time.Second, 60 * time.Millisecond},
		{2 * time.Second, 0, 4 * time.Second},
		{2 * time.Second, jobWaitBound(3*time.Second, time.Second), 250 * time.Millisecond},
		{2 * time.Second, jobWaitBound(30*time.Second, 10*time.Second), 2500 * time.Millisecond},
		{10 * time.Millisecond, jobWaitBound(3*time.Second, time.Second), 20 * time.Millisecond},
	} {
		require.Equal(t, tc.want, jobWaitFor(tc.rtt, tc.limit), "rtt %v, limit %v", tc.rtt, tc.limit)
	}
}

// The round trip estimate: the smoothed samples, within the least recent
// one and twice it; one slow call moves it only until a quick one, and a
// round trip of 0 (in virtual time) is an estimate of 0, not none.
func TestRTTEstimate(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	type sample struct {
		at time.Duration // since t0
		d  time.Duration
	}
	for _, tc := range []struct {
		name    string
		samples []sample
		want    time.Duration
	}{
		{"none", nil, 0},
		{"the first, whole", []sample{{0, 10 * ms}}, 10 * ms},
		{"smoothed by 1/8", []sample{{0, 10 * ms}, {ms, 18 * ms}}, 11 * ms},
		{"a slow call after a quick one: at most twice the quick one", []sample{{0, 10 * ms}, {ms, 9 * time.Second}}, 20 * ms},
		{"a slow first call, then a quick one", []sample{{0, 9 * time.Second}, {ms, 10 * ms}}, 20 * ms},
		{"zero round trips and a slow one", []sample{{0, 0}, {ms, 9 * time.Second}, {2 * ms, 0}}, 0},
		{"the least of the last 10 to 20 s bounds it", []sample{{0, 10 * ms}, {11 * time.Second, 100 * ms}}, 20 * ms},
		{"older windows forgotten: the network got slower", []sample{{0, 10 * ms}, {11 * time.Second, 100 * ms}, {22 * time.Second, 100 * ms}}, 100 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e rttEstimate
			for _, s := range tc.samples {
				e.add(t0.Add(s.at), s.d)
			}
			require.Equal(t, tc.want, e.value())
		})
	}
}

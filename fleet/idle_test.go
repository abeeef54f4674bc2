package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/fleet"
)

// idleFigures are what an idle pause costs and buys, measured in virtual
// time for a fleet of idle queues.
type idleFigures struct {
	perMinute    float64       // receives a minute by one idle queue
	fleetMinute  float64       // receives a minute by the whole fleet
	worst, mean  time.Duration // first-message latency: sent just after an empty receive; averaged over a cycle
	inFlightMean float64       // long polls in flight on average, the whole fleet
}

// The round trip of every call in these measurements.
const idleRTT = 10 * time.Millisecond

// phases is how many evenly spaced moments of an idle cycle the mean
// first-message latency is taken over.
const phases = 20

// measureIdle runs a fleet of n idle queues with the idle pause (nil: the
// default) and measures, on the virtual clock: receives in 10 idle
// minutes, the long polls in flight meanwhile, and the latency of a first
// message sent to queue 0 at evenly spaced moments of its idle cycle,
// starting just after an empty receive returned (the worst moment).
func measureIdle(t *testing.T, n int, pause *time.Duration) idleFigures {
	t.Helper()
	var fig idleFigures
	synctest.Test(t, func(t *testing.T) {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("q%d", i)
		}
		b := newBed(t, idleRTT, names...)
		var mu sync.Mutex
		got := map[string]time.Time{}
		var opts []fleet.Option
		if pause != nil {
			opts = append(opts, fleet.WithIdlePause(*pause))
		}
		f, err := fleet.New(4*n, opts...)
		require.NoError(t, err)
		for q := range n {
			require.NoError(t, f.Add(b.consumer(t, q, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				mu.Lock()
				defer mu.Unlock()
				got[m.Body] = time.Now()
				return nil
			}))))
		}
		stop := start(t, f)
		time.Sleep(time.Minute) // past the start

		// Receives and long polls in flight over 10 idle minutes, sampled
		// every 100 ms.
		before := make([]int64, n)
		for q := range n {
			before[q] = b.clients[q].recvs.Load()
		}
		const span = 10 * time.Minute
		var inFlight, samples float64
		for range int(span / (100 * time.Millisecond)) {
			time.Sleep(100 * time.Millisecond)
			for q := range n {
				inFlight += float64(b.clients[q].inFlight.Load())
			}
			samples++
		}
		var total int64
		for q := range n {
			total += b.clients[q].recvs.Load() - before[q]
		}
		fig.fleetMinute = float64(total) / span.Minutes()
		fig.perMinute = fig.fleetMinute / float64(n)
		fig.inFlightMean = inFlight / samples

		// First-message latency on queue 0, at evenly spaced moments of its
		// cycle: an idle pause, then an empty long poll and its round trip.
		p := fleet.DefaultIdlePause
		if pause != nil {
			p = *pause
		}
		cycle := p + 20*time.Second + idleRTT
		var sum time.Duration
		for k := range phases {
			ended := b.clients[0].lastEnd.Load()
			for b.clients[0].lastEnd.Load() == ended { // the next empty receive returns
				time.Sleep(time.Millisecond)
			}
			time.Sleep(cycle * time.Duration(k) / phases)
			body := fmt.Sprintf("first-%d", k)
			sent := time.Now()
			_, err := b.srv.Send(b.urls[0], body)
			require.NoError(t, err)
			mu.Lock()
			for got[body].IsZero() {
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
			}
			wait := got[body].Sub(sent)
			mu.Unlock()
			if k == 0 {
				fig.worst = wait
			}
			sum += wait
			// The queue turns idle again after its next empty receive,
			// which the next phase waits for.
		}
		fig.mean = sum / phases
		require.NoError(t, stop())
	})
	return fig
}

// TestIdlePauseFigures measures, in virtual time, what fleet.WithIdlePause
// trades: receives a minute by idle queues against the latency of the
// first message sent to one, for fleets of 2 and 10 queues. Run with -v to
// see the table; the figures follow from 60 s / (20 s long poll + pause)
// and are checked against it.
func TestIdlePauseFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("12 fleets for 20 virtual minutes each")
	}
	t.Parallel()
	for _, n := range []int{2, 10} {
		for _, p := range []time.Duration{0, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second} {
			t.Run(fmt.Sprintf("%d queues, pause %v", n, p), func(t *testing.T) {
				t.Parallel()
				fig := measureIdle(t, n, &p)
				t.Logf("pause %4v, %2d queues: %.2f receives/min per idle queue (%.1f for the fleet, %.1f long polls in flight); first message: worst %v, mean %v",
					p, n, fig.perMinute, fig.fleetMinute, fig.inFlightMean, fig.worst.Round(time.Millisecond), fig.mean.Round(time.Millisecond))
				cycle := 20*time.Second + p + idleRTT
				require.InDelta(t, time.Minute.Seconds()/cycle.Seconds(), fig.perMinute, 0.11, "receives a minute per idle queue")
				require.InDelta(t, float64(n)*20/cycle.Seconds(), fig.inFlightMean, 0.05*float64(n), "long polls in flight")
				require.LessOrEqual(t, fig.worst, p+2*idleRTT, "worst first-message latency")
				require.GreaterOrEqual(t, fig.worst, p, "the worst moment waits out the whole pause")
			})
		}
	}
}

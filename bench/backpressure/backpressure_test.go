package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 36's measurement, shortened to a 40 s backlog: against a
// downstream that admits R requests a second and answers 429 above it,
// with Throttled and WithAdaptiveConcurrency the success rate settles
// within 10 % of R within a minute (5 s windows), the limit's mean within
// 10 % of R × the call's time, no message reaches the dead-letter queue,
// and the receives per message stay within 10 % of a run against a
// downstream without a limit. Every figure is of virtual time.
func TestBackPressureSettles(t *testing.T) {
	for _, r := range []float64{50, 200} {
		base := simulate(t, config{rate: r, mode: unthrottled, backlogFor: 40 * time.Second})
		res := simulate(t, config{rate: r, mode: adaptive, backlogFor: 40 * time.Second})
		t.Logf("R = %v: settled after %v (1 s windows: %v) at %.1f/s; limit %d to %d, mean %.1f (R × 100 ms = %.0f); %d of %d in the DLQ; %.3f receives a message (%.3f without a limit downstream); %d 429s, %d falls",
			r, res.settled, res.settled1s, res.meanRate, res.limitLo, res.limitHi, res.limitMean, r*latency.Seconds(), res.dlq, res.messages, res.receives, base.receives, res.throttled, res.falls)
		require.GreaterOrEqual(t, res.settled, time.Duration(0), "R = %v: the rate settles", r)
		require.LessOrEqual(t, res.settled, time.Minute, "R = %v", r)
		require.InEpsilon(t, r, res.meanRate, 0.1, "R = %v", r)
		require.InEpsilon(t, r*latency.Seconds(), res.limitMean, 0.1, "R = %v", r)
		require.Zero(t, res.dlq, "R = %v", r)
		require.Zero(t, base.dlq, "R = %v", r)
		require.LessOrEqual(t, res.receives, 1.1*base.receives, "R = %v", r)
		require.GreaterOrEqual(t, res.limitLo, 1)
		require.LessOrEqual(t, res.limitHi, concurrency)
	}
}

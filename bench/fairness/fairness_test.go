package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 31's measurement, shortened to 30 s of sending (three bursts):
// beside the noisy tenant, the quiet tenants' p99 wait from send to
// handler start stays within 1.5 × their p99 without it plus 50 ms, with
// fair dispatch, for one and four Consumers; throughput is at least 0.97
// × arrival-order dispatch's, and calls per message within 2 % of it.
// Every figure is of virtual time.
func TestQuietTenantsBesideNoisy(t *testing.T) {
	for _, n := range []int{1, 4} {
		with := simulate(t, config{consumers: n, noisy: true, d: fairOrder, send: 30 * time.Second})
		without := simulate(t, config{consumers: n, noisy: false, d: fairOrder, send: 30 * time.Second})
		fifo := simulate(t, config{consumers: n, noisy: true, d: fifoOrder, send: 30 * time.Second})
		t.Logf("%d Consumers: quiet p99 %v beside the noisy tenant, %v without it; arrival order %v", n, with.quietP99, without.quietP99, fifo.quietP99)
		require.LessOrEqual(t, with.quietP99, without.quietP99*3/2+50*time.Millisecond, "%d Consumers", n)
		require.GreaterOrEqual(t, with.throughput, 0.97*fifo.throughput, "%d Consumers", n)
		require.InEpsilon(t, fifo.callsPerMessage, with.callsPerMessage, 0.02, "%d Consumers", n)
		require.Equal(t, "noisy", with.topGroup, "Stats names the noisy tenant")
		require.Equal(t, 1, with.noisyGroups)
	}
}

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 35's measurement (case 8 and point 4), shortened to 30 s of
// sending (three bursts), for each mix (one, two and three noisy tenants)
// and for one and four Consumers: with fair dispatch the quiet tenants'
// p99 wait from send to handler start stays within their p99 without the
// noisy tenants plus one round trip plus 20 ms, however many noisy
// tenants there are; throughput stays within 2 % of arrival-order
// dispatch's; the calls per message, which the paced receives raise, stay
// within 1.35 × arrival order's. Every figure is of virtual time.
func TestQuietTenantsBesideNoisy(t *testing.T) {
	for _, m := range mixes {
		for _, n := range []int{1, 4} {
			t.Run(fmt.Sprintf("%d noisy, %d Consumers", m.noisy, n), func(t *testing.T) { quietBesideNoisy(t, m, n) })
		}
	}
}

func quietBesideNoisy(t *testing.T, m mix, n int) {
	with := simulate(t, config{consumers: n, mix: m, noisy: true, d: fairOrder, send: 30 * time.Second})
	without := simulate(t, config{consumers: n, mix: m, noisy: false, d: fairOrder, send: 30 * time.Second})
	fifo := simulate(t, config{consumers: n, mix: m, noisy: true, d: fifoOrder, send: 30 * time.Second})
	t.Logf("%s, %d Consumers: quiet p99 %v beside the noisy tenants (bound %v), %v without them; arrival order %v; throughput × %.3f, calls/msg %.3f (× %.2f)",
		m.name, n, with.quietP99, bound(without.quietP99), without.quietP99, fifo.quietP99,
		with.throughput/fifo.throughput, with.callsPerMessage, with.callsPerMessage/fifo.callsPerMessage)
	require.LessOrEqual(t, with.quietP99, bound(without.quietP99), "%s, %d Consumers", m.name, n)
	require.GreaterOrEqual(t, with.throughput, 0.98*fifo.throughput, "%s, %d Consumers", m.name, n)
	require.LessOrEqual(t, with.callsPerMessage, 1.35*fifo.callsPerMessage, "%s, %d Consumers", m.name, n)
	require.True(t, strings.HasPrefix(with.topGroup, "noisy-"), "Stats names a noisy tenant first, not %q", with.topGroup)
	require.Equal(t, m.noisy, with.noisyGroups, "Stats counts the noisy tenants")
}

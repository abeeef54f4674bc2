package main

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRun drains small queues with every contender over plain HTTP, the
// server side in this process, on real loopback listeners: the program
// under test is about sockets and HTTP, so it cannot run in a synctest
// bubble. Nothing in it sleeps; a drain ends when its last delete is
// confirmed, and the 1 s long poll bounds the shutdown. The RTT is 1 ms:
// at 0 the SDK's client can lose an answer to its request-body race
// (sqstest's package documentation, "Over a real socket") and stall for
// the 30 s visibility timeout.
func TestRun(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Messages, cfg.Warmup, cfg.Rounds, cfg.Pollers = 300, 50, 2, 2
	cfg.Concurrency = []int{20, 60}
	cfg.Wait = time.Second
	cfg.Proto, cfg.Place = protoHTTP, placeInProcess
	cfg.RTTs = []time.Duration{time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, cfg))
	t.Log("\n" + out.String())
	for _, want := range []string{
		"raw", "consumer c=20", "consumer c=60", "median msg/s", "DeleteMessageBatch", "redelivered",
		"plain HTTP/1.1 · client: the SDK's default HTTP client", "sqstest in this process (CPU figures include the server's)",
		"conns/1k msg", "TLS handshakes/1k msg",
	} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "delivered twice")
}

// TestCompare runs the compare mode small, over plain HTTP with the
// server side in this process (see TestRun), with the SDK's default client
// and a pool of 4 built by sqsclient, and checks the report names every
// contender and figure.
func TestCompare(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Compare = true
	cfg.Messages, cfg.Warmup, cfg.Rounds, cfg.Warm = 300, 50, 2, 100
	cfg.RawList, cfg.Concurrency, cfg.Fixed, cfg.ConsumerPollers, cfg.ConnTrace = []int{2, 4}, []int{20}, true, []int{3}, true
	cfg.Wait = time.Second
	cfg.Proto, cfg.Place = protoHTTP, placeInProcess
	cfg.RTTs = []time.Duration{time.Millisecond}
	cfg.Pools = []clientSpec{{}, {pool: 4, sqsclient: true}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, cfg))
	t.Log("\n" + out.String())
	for _, want := range []string{
		"bare loop, 2 pollers", "bare loop, 4 pollers", "Consumer c=20 |", "Consumer c=20, WithPollers(20): before issue 37", "Consumer c=20, WithPollers(3)",
		"× best bare loop", "CPU × best loop's", "after the first 100 msgs: new conns /1k msgs", "calls in flight at the end",
		"MaxIdleConnsPerHost 4", "built by sqsclient.New", "Load average (1, 5, 15 min) before:",
		"connections by action: DeleteMessageBatch:", "Stats: max calls in flight",
	} {
		require.Contains(t, out.String(), want)
	}
	require.Equal(t, 8, todaysPollers(20, 4), "twice the pool of 4")
	require.Equal(t, 20, todaysPollers(20, 0), "twice the SDK's 10")
	require.Equal(t, 103, todaysPollers(20, 256), "what the read-ahead needs")
}

// TestFinishLine checks the drain's bookkeeping: the time of the n-th
// delete, and redeliveries noticed from the receive count.
func TestFinishLine(t *testing.T) {
	t.Parallel()
	stopped, halfway := false, 0
	f := newFinishLine(withHalfway(context.Background(), func() { halfway++ }), 20, func() { stopped = true })
	f.received(map[string]string{"ApproximateReceiveCount": "1"})
	f.add(9)
	require.Zero(t, halfway)
	f.add(1)
	require.Equal(t, 1, halfway, "half of the 20 deleted")
	_, err := f.result()
	require.ErrorContains(t, err, "stopped after 10 of 20 messages")
	require.False(t, stopped)

	warm := 0
	g := newFinishLine(withWarm(context.Background(), 5, func() { warm++ }), 20, func() {})
	g.add(4)
	require.Zero(t, warm)
	g.add(3)
	g.add(3)
	require.Equal(t, 1, warm, "called once, at 5 deleted")

	first := f.start.Add(1500 * time.Millisecond).UnixMilli()
	f.received(map[string]string{"ApproximateReceiveCount": "2", "ApproximateFirstReceiveTimestamp": strconv.FormatInt(first, 10)})
	f.received(map[string]string{"ApproximateReceiveCount": "3"})
	f.add(10)
	require.True(t, stopped)
	require.Equal(t, 1, halfway, "called once")
	d, err := f.result()
	require.NoError(t, err)
	require.False(t, d.end.IsZero())
	require.Equal(t, 2, d.redelivered)
	require.Contains(t, d.note, "2 messages delivered twice; the first had first been received 1.5s after the drain started")
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*benchConfig)
		want string
	}{
		{"no messages", func(c *benchConfig) { c.Messages = 0 }, "-n, -rounds and -pollers"},
		{"no pollers", func(c *benchConfig) { c.Pollers = 0 }, "-n, -rounds and -pollers"},
		{"wait too long", func(c *benchConfig) { c.Wait = 21 * time.Second }, "-wait"},
		{"wait fractional", func(c *benchConfig) { c.Wait = 1500 * time.Millisecond }, "-wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig()
			tt.edit(&cfg)
			require.ErrorContains(t, run(context.Background(), &bytes.Buffer{}, cfg), tt.want)
		})
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	m := func(msgs int, elapsed time.Duration, receives, deletes int) measurement {
		return measurement{messages: msgs, elapsed: elapsed, calls: map[string]int{"ReceiveMessage": receives, "DeleteMessageBatch": deletes}, cpu: elapsed}
	}
	raw := []measurement{m(1000, time.Second, 100, 100), m(1000, 2*time.Second, 100, 100), m(1000, time.Second, 100, 100)}
	cons := []measurement{m(1000, time.Second, 120, 100), m(1000, 4*time.Second, 150, 100), m(1000, 1250*time.Millisecond, 110, 100)}
	got := summarize(cons, raw)
	require.InDelta(t, 800, got.rate, 1e-9, "median of 1000, 250, 800 msg/s")
	require.InDelta(t, 0.8, got.ratio, 1e-9, "median of 1, 0.5, 0.8")
	require.InDelta(t, 0.22, got.calls, 1e-9, "median of 0.22, 0.25, 0.21")
	require.Equal(t, 1250*time.Microsecond, got.cpu)
	require.InDelta(t, 2.5, median([]float64{4, 1, 3, 2}), 1e-9)
}

package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMatrix runs a tiny matrix (two RTTs, two handlers, one concurrency,
// 200 messages a row) over a real loopback listener, so the harness cannot
// rot. It checks what was measured and printed, never a rate.
func TestMatrix(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Matrix = true
	cfg.Messages, cfg.Warmup, cfg.Rounds, cfg.Pollers = 200, 0, 1, 2
	cfg.RTTs = []time.Duration{2 * time.Millisecond, 0}
	cfg.Handlers = []time.Duration{0, time.Millisecond}
	cfg.Concurrency = []int{10}
	cfg.Overrun = 0
	cfg.Wait = time.Second
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, cfg))
	t.Log("\n" + out.String())
	s := out.String()
	for _, want := range []string{
		"CPU ceiling (raw loop at RTT 0, 2 pollers, no handler)",
		"RTT 0s (in-process sqstest", "RTT 2ms (in-process sqstest",
		"sqsconsumer msg/s", "Go CDK msg/s", "naive msg/s", "x ideal", "calls/msg", "CPU µs/msg", "busy",
	} {
		require.Contains(t, s, want)
	}
	require.NotContains(t, s, "duplicate handler runs")
	// Four rows (2 RTTs × 2 handlers), each stating its RTT, with five
	// figures per contender.
	rows := 0
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 6+3*5 && (f[0] == "0s" || f[0] == "2ms") {
			rows++
			require.Equal(t, "200", f[4], "messages per row: "+line)
		}
	}
	require.Equal(t, 4, rows)
}

// TestOverrun runs the overrun case small (4 messages, lease 3 s, handlers
// 3.5 s): the Consumer renews its leases and handles each message once;
// the naive loop, which receives 10 at a time and handles them in turn,
// lets the later ones expire and handles them again.
func TestOverrun(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Wait = time.Second
	cfg.Overrun, cfg.OverrunConcurrency = 4, 4
	cfg.OverrunLease, cfg.OverrunHandler = 3*time.Second, 3500*time.Millisecond
	b, err := newBench(cfg, 0)
	require.NoError(t, err)
	defer b.close()
	r := &rttResult{}
	require.NoError(t, measureOverrun(context.Background(), b, cfg, r))
	var out bytes.Buffer
	reportOverrun(&out, r)
	t.Log("\n" + out.String())
	require.Contains(t, out.String(), "overrun at RTT 0s: 4 messages, lease (visibility timeout) 3s, handlers 3.5s, concurrency 4")
	got := map[string]overrunResult{}
	for _, res := range r.overrunResults {
		got[res.name] = res
	}
	require.Len(t, got, 3)
	c := got["sqsconsumer"]
	require.Equal(t, overrunResult{name: "sqsconsumer", runs: 4, messages: 4, deletes: 4}, c)
	require.Positive(t, got["naive"].duplicates)
	require.Equal(t, 4, got["Go CDK"].messages)
}

// TestDelay checks the RTT transport: each request waits half the RTT
// before it is sent and half after its answer, and concurrent requests
// wait side by side, not one after the other.
func TestDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var arrived []time.Duration
		start := time.Now()
		next := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			arrived = append(arrived, time.Since(start))
			mu.Unlock()
			rec := httptest.NewRecorder()
			rec.WriteString("ok")
			return rec.Result(), nil
		})
		d := delay{rtt: 10 * time.Millisecond, next: next}
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				req := httptest.NewRequest(http.MethodPost, "http://sqs.test/", strings.NewReader("{}"))
				resp, err := d.RoundTrip(req)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, 10*time.Millisecond, time.Since(start))
			})
		}
		wg.Wait()
		require.Equal(t, []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond}, arrived)

		// A request cancelled while it waits fails with its context's error
		// and is never sent.
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest(http.MethodPost, "http://sqs.test/", strings.NewReader("{}")).WithContext(ctx)
		time.AfterFunc(time.Millisecond, cancel)
		_, err := d.RoundTrip(req)
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, arrived, 5)

		// RTT 0 forwards at once.
		resp, err := delay{next: next}.RoundTrip(httptest.NewRequest(http.MethodPost, "http://sqs.test/", nil))
		require.NoError(t, err)
		resp.Body.Close()
		require.Len(t, arrived, 6)
	})
}

func TestIdealAndRowMessages(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 30000, ideal(0, 20, 30000), 1e-9, "no handler: the CPU ceiling")
	require.InDelta(t, 4000, ideal(5*time.Millisecond, 20, 30000), 1e-9, "20 handlers of 5 ms")
	require.InDelta(t, 30000, ideal(time.Millisecond, 100, 30000), 1e-9, "C/H above the ceiling")
	require.Equal(t, 400, rowMessages(400, 5000))
	require.Equal(t, 5000, rowMessages(30000, 5000))
	require.Equal(t, 200, rowMessages(50, 5000))
	require.Equal(t, 100, rowMessages(50, 100))
}

func TestMatrixRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*benchConfig)
		want string
	}{
		{"negative rtt", func(c *benchConfig) { c.RTTs = []time.Duration{-time.Millisecond} }, "-rtt -1ms"},
		{"long handler", func(c *benchConfig) { c.Handlers = []time.Duration{2 * time.Minute} }, "-handlers 2m0s"},
		{"huge concurrency", func(c *benchConfig) { c.Concurrency = []int{5000} }, "-concurrency 5000"},
		{"negative overrun", func(c *benchConfig) { c.Overrun = -1 }, "-overrun -1"},
		{"handler within lease", func(c *benchConfig) { c.OverrunHandler = 2 * time.Second }, "the handler longer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.Matrix = true
			tt.edit(&cfg)
			require.ErrorContains(t, run(context.Background(), &bytes.Buffer{}, cfg), tt.want)
		})
	}
	cfg := defaultConfig()
	cfg.RTTs = []time.Duration{0, time.Millisecond}
	require.ErrorContains(t, run(context.Background(), &bytes.Buffer{}, cfg), "-rtt takes a list only with -matrix")
	_, err := parseDuration("-3ms")
	require.ErrorContains(t, err, `"-3ms" is not a duration`)
}

package sqsconsumer

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// The rule, window by window (see nextCallLimit).
func TestNextCallLimit(t *testing.T) {
	t.Parallel()
	w := callWindowFor(20) // 50 calls
	base := callRule{limit: 20, lo: 10, hi: 103, fast: 20, backoff: 2}
	with := func(f func(*callRule)) callRule {
		r := base
		f(&r)
		return r
	}
	for _, tt := range []struct {
		name string
		in   callRule
		want callRule
	}{
		{"mid-window, one loss: nothing yet",
			with(func(r *callRule) { r.calls, r.lost, r.wanted = 20, 1, true }),
			with(func(r *callRule) { r.calls, r.lost, r.wanted = 20, 1, true })},
		{"mid-window, two new connections while wanted: down an eighth at once, the old limit the ceiling",
			with(func(r *callRule) { r.limit, r.calls, r.lost, r.wanted = 40, 20, 2, true }),
			with(func(r *callRule) { r.limit, r.ceiling, r.lowered, r.lossRate = 35, 40, true, lossBudget/2 })},
		{"mid-window, two losses, not wanted: nothing yet",
			with(func(r *callRule) { r.calls, r.lost = 20, 2 }),
			with(func(r *callRule) { r.calls, r.lost = 20, 2 })},
		{"wanted, clean, never lowered, below fast: up a quarter, not above fast",
			with(func(r *callRule) { r.limit, r.fast, r.calls, r.wanted = 10, 20, w, true }),
			with(func(r *callRule) { r.limit, r.fast = 12, 20 })},
		{"the quarter stops at fast",
			with(func(r *callRule) { r.limit, r.fast, r.calls, r.wanted = 18, 20, w, true }),
			with(func(r *callRule) { r.limit, r.fast = 20, 20 })},
		{"beyond fast, no ceiling: up one",
			with(func(r *callRule) { r.calls, r.wanted = w, true }),
			with(func(r *callRule) { r.limit = 21 })},
		{"never above hi",
			with(func(r *callRule) { r.limit, r.hi, r.calls, r.wanted = 103, 103, callWindowFor(103), true }),
			with(func(r *callRule) { r.limit, r.hi = 103, 103 })},
		{"lowered, below the ceiling: up one, whatever the hold",
			with(func(r *callRule) { r.calls, r.wanted, r.lowered, r.ceiling, r.hold = w, true, true, 25, 3 }),
			with(func(r *callRule) { r.limit, r.lowered, r.ceiling, r.hold = 21, true, 25, 2 })},
		{"just below the ceiling, held: the hold counts down",
			with(func(r *callRule) { r.calls, r.wanted, r.lowered, r.ceiling, r.hold = w, true, true, 21, 3 }),
			with(func(r *callRule) { r.lowered, r.ceiling, r.hold = true, 21, 2 })},
		{"just below the ceiling, the hold passed: try it",
			with(func(r *callRule) { r.calls, r.wanted, r.lowered, r.ceiling = w, true, true, 21 }),
			with(func(r *callRule) { r.limit, r.lowered, r.ceiling, r.probing = 21, true, 21, true })},
		{"a try that held: the next level the ceiling, held as long",
			with(func(r *callRule) {
				r.calls, r.wanted, r.lowered, r.ceiling, r.probing, r.backoff = w, true, true, 20, true, 8
			}),
			with(func(r *callRule) { r.lowered, r.ceiling, r.backoff, r.hold = true, 21, 8, 8 })},
		{"a try that lost: down one, held, backoff doubled",
			with(func(r *callRule) {
				r.calls, r.lost, r.wanted, r.lowered, r.ceiling, r.probing, r.backoff = 10, 2, true, true, 20, true, 8
			}),
			with(func(r *callRule) {
				r.limit, r.lowered, r.ceiling, r.backoff, r.hold, r.lossRate = 19, true, 20, 16, 8, lossBudget/2
			})},
		{"backoff at most maxCallHold",
			with(func(r *callRule) { r.calls, r.lost, r.wanted, r.probing, r.backoff = 10, 2, true, true, maxCallHold }),
			with(func(r *callRule) {
				r.limit, r.lowered, r.ceiling, r.backoff, r.hold, r.lossRate = 19, true, 20, maxCallHold, maxCallHold, lossBudget/2
			})},
		{"one loss in a window: into the rate, below half the budget: up",
			with(func(r *callRule) { r.calls, r.lost, r.wanted = 4*w, 1, true }),
			with(func(r *callRule) { r.limit, r.lossRate = 21, 1.0/float64(4*w)/8 })},
		{"the rate above half the budget: the limit stays",
			with(func(r *callRule) { r.calls, r.wanted, r.lossRate = w, true, 0.8*lossBudget }),
			with(func(r *callRule) { r.lossRate = 0.7 * lossBudget })},
		{"the rate above the budget: down one",
			with(func(r *callRule) {
				r.limit, r.calls, r.lost, r.wanted, r.lossRate = 40, callWindowFor(40), 1, true, lossBudget
			}),
			with(func(r *callRule) { r.limit, r.ceiling, r.lowered, r.lossRate = 39, 40, true, lossBudget/2 })},
		{"the cut is at least one, never below lo",
			with(func(r *callRule) { r.limit, r.calls, r.lost, r.wanted = 10, w, 3, true }),
			with(func(r *callRule) { r.limit, r.ceiling, r.lowered, r.lossRate = 10, 10, true, lossBudget/2 })},
		{"wanted only within the last second, losses: they count, down one",
			with(func(r *callRule) {
				r.limit, r.calls, r.lost, r.recent, r.lowered, r.lossRate = 40, callWindowFor(40), 1, true, true, lossBudget
			}),
			with(func(r *callRule) { r.limit, r.ceiling, r.lowered, r.lossRate = 39, 40, true, lossBudget/2 })},
		{"wanted only within the last second, clean: no rise",
			with(func(r *callRule) { r.calls, r.recent = w, true }),
			base},
		{"not wanted, losses: the work fell, nothing moves, a try stays a try",
			with(func(r *callRule) { r.limit, r.calls, r.lost, r.hold, r.probing = 40, callWindowFor(40), 5, 2, true }),
			with(func(r *callRule) { r.limit, r.hold, r.probing = 40, 2, true })},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := nextCallLimit(tt.in)
			require.InDelta(t, tt.want.lossRate, got.lossRate, 1e-12)
			got.lossRate = tt.want.lossRate
			require.Equal(t, tt.want, got)
		})
	}
}

// callRun is what simulateCalls saw over its measured span.
type callRun struct {
	rate        float64 // messages deleted per virtual second
	dialsPer1k  float64 // new connections per 1,000 messages
	lostPer1k   float64 // connections lost per 1,000 messages
	lowest, top int     // the limit's range (Stats.MaxCallsInFlight) over the span, sampled
	peak        int     // most calls in flight at once
	stats       Stats
}

func (r callRun) String() string {
	return fmt.Sprintf("%.0f msg/s, %.2f new and %.2f lost connections per 1,000 messages, limit %d to %d, at most %d calls in flight",
		r.rate, r.dialsPer1k, r.lostPer1k, r.lowest, r.top, r.peak)
}

// simulateCalls runs a Consumer with handlers of h and concurrency conc
// over an endless backlog through p (over instantSQS), in virtual time,
// and measures from warm to warm + span.
func simulateCalls(t *testing.T, p *poolClient, h time.Duration, conc int, warm, span time.Duration, opts ...Option) callRun {
	t.Helper()
	var r callRun
	synctest.Test(t, func(t *testing.T) {
		f := &instantSQS{limit: 1 << 20, done: make(chan struct{})}
		f.prepare()
		p.Client = f
		c, err := New(p, "https://sqs.example/q", HandlerFunc(func(ctx context.Context, m *Message) error {
			if h > 0 {
				time.Sleep(h)
			}
			return nil
		}), append([]Option{WithVisibilityTimeout(30 * time.Second), WithConcurrency(conc), WithShutdownTimeout(0)}, opts...)...)
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(warm)
		d0, _, l0, _ := p.counts()
		m0 := p.deleted.Load()
		r.lowest = 1 << 30
		for range 20 {
			time.Sleep(span / 20)
			n := c.Stats().MaxCallsInFlight
			r.lowest, r.top = min(r.lowest, n), max(r.top, n)
		}
		d1, _, l1, peak := p.counts()
		m1 := p.deleted.Load()
		r.stats = c.Stats()
		require.NoError(t, stop())
		msgs := float64(m1 - m0)
		r.rate, r.peak = msgs/span.Seconds(), peak
		r.dialsPer1k, r.lostPer1k = float64(d1-d0)/msgs*1000, float64(l1-l0)/msgs*1000
	})
	return r
}

// The calls in flight follow what the client sustains: over a client that
// loses a connection whenever more than k calls are in flight, the limit
// rises from the pool to about k and stays there, losing few connections,
// at the rate k calls in flight allow; over one that sustains more than
// the work needs, it rises no further than the work needs and loses none.
func TestCallsInFlightFollowTheClient(t *testing.T) {
	t.Parallel()
	const rtt = 10 * time.Millisecond
	for _, tt := range []struct {
		name     string
		sustains int
		pool     int
		conc     int
		h        time.Duration
	}{
		{"a client that sustains 16 calls", 16, 10, 40, 2 * time.Millisecond},
		{"a client that sustains 30 calls", 30, 10, 100, 2 * time.Millisecond},
		{"a client that sustains more than the work needs", 1000, 10, 20, 5 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &poolClient{n: tt.pool, rtt: rtt, traced: true, jitter: true, sustains: tt.sustains}
			r := simulateCalls(t, p, tt.h, tt.conc, 2*time.Second, 2*time.Second)
			t.Logf("%v", r)
			require.True(t, r.stats.Conns.Traced)
			require.LessOrEqual(t, r.dialsPer1k, 2.5, "new connections per 1,000 messages")
			if tt.sustains < 1000 {
				require.GreaterOrEqual(t, r.lowest, tt.sustains*3/4, "the limit stays near what the client sustains")
				require.LessOrEqual(t, r.top, tt.sustains+1, "the limit stays near what the client sustains")
				require.GreaterOrEqual(t, r.rate, 0.8*float64(tt.sustains)*5/rtt.Seconds(), "about what k calls in flight move: 10 messages a receive and a delete")
				require.True(t, r.stats.LimitedByPool, "the client bounds the calls")
			} else {
				require.Zero(t, r.lostPer1k)
				require.GreaterOrEqual(t, r.rate, 0.95*float64(tt.conc)/tt.h.Seconds(), "the work's rate")
				require.False(t, r.stats.LimitedByPool)
			}
		})
	}
}

// When the client comes to sustain fewer calls than the limit, the limit
// falls to them within a second and the losses stop.
func TestCallsInFlightFallWithTheClient(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &instantSQS{limit: 1 << 20, done: make(chan struct{})}
		f.prepare()
		p := &poolClient{Client: f, n: 10, rtt: 10 * time.Millisecond, traced: true, jitter: true, sustains: 30}
		c, err := New(p, "https://sqs.example/q", HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(2 * time.Millisecond)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(100), WithShutdownTimeout(0))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Second)
		before := c.Stats().MaxCallsInFlight
		p.mu.Lock()
		p.sustains = 12
		p.mu.Unlock()
		time.Sleep(time.Second)
		_, _, l0, _ := p.counts()
		m0 := p.deleted.Load()
		time.Sleep(time.Second)
		_, _, l1, _ := p.counts()
		msgs := p.deleted.Load() - m0
		after := c.Stats().MaxCallsInFlight
		require.NoError(t, stop())
		t.Logf("limit %d while the client sustained 30, %d a second after it came to sustain 12; then %d lost connections in %d messages", before, after, l1-l0, msgs)
		require.GreaterOrEqual(t, before, 24)
		require.LessOrEqual(t, after, 13)
		require.LessOrEqual(t, float64(l1-l0)/float64(msgs)*1000, 2.5, "connections lost per 1,000 messages, the second after")
	})
}

// Over a client with net/http's idle pool, whose calls end within 0.7 to
// 1.3 round trips as over a network, the calls in flight rise past the
// pool to what the work needs, losing next to no connection (none with a
// pool of 64 the work never exceeds): in the steady state at most 2.5 new
// connections per 1,000 messages, at a higher rate than the fixed rule the
// Consumer had before (twice the pool). With calls that all take exactly
// one round trip (lock-step cohorts: each cohort's calls end at the same
// instant, so more of them go idle at once than the pool keeps, the worst
// case for a pool) the rule still holds the new connections within that
// budget, at no less than the fixed rule's rate.
func TestCallsInFlightOverAnIdlePool(t *testing.T) {
	t.Parallel()
	const rtt = 10 * time.Millisecond
	for _, tt := range []struct {
		pool     int
		jitter   bool
		maxDials float64
	}{
		{10, true, 2.5}, {64, true, 0.1}, {10, false, 2.5},
	} {
		t.Run(fmt.Sprintf("pool %d, jitter %v", tt.pool, tt.jitter), func(t *testing.T) {
			t.Parallel()
			const h, conc = 2 * time.Millisecond, 40 // at most 20,000 messages a second
			adaptive := simulateCalls(t, &poolClient{n: tt.pool, rtt: rtt, traced: true, jitter: tt.jitter}, h, conc, time.Second, time.Second)
			fixed := simulateCalls(t, &poolClient{n: tt.pool, rtt: rtt, traced: true, jitter: tt.jitter}, h, conc, time.Second, time.Second,
				WithPollers(min(lanesPerIdleConn*tt.pool, (conc+1000+9)/10+1)))
			t.Logf("adaptive %v; fixed at twice the pool %v", adaptive, fixed)
			require.LessOrEqual(t, adaptive.dialsPer1k, tt.maxDials, "new connections per 1,000 messages in the steady state")
			// Where both reach the work's rate (a pool of 64), they tie
			// within the sampling of the measured second.
			require.GreaterOrEqual(t, adaptive.rate, 0.98*fixed.rate, "messages a second against the fixed rule")
		})
	}
}

// Through the SDK's own client over a real socket, the trace sees the
// connections: the first receive's call dials one, later calls reuse it.
// Real time, no sleep: the drain of three messages ends the test.
func TestConnsTracedThroughTheSDK(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(nil)
	srv := sqstest.NewServer(sqstest.WithBaseURL("http://" + ts.Listener.Addr().String()))
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	url, err := srv.CreateQueue("q", nil)
	require.NoError(t, err)
	for range 3 {
		_, err := srv.Send(url, "m")
		require.NoError(t, err)
	}
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(ts.URL), Credentials: aws.AnonymousCredentials{}})
	done := make(chan struct{}, 3)
	c, err := New(client, url, HandlerFunc(func(context.Context, *Message) error {
		done <- struct{}{}
		return nil
	}), WithVisibilityTimeout(30*time.Second), WithWaitTime(time.Second), WithShutdownTimeout(time.Second))
	require.NoError(t, err)
	stop := running(t, c)
	for range 3 {
		<-done
	}
	require.NoError(t, stop())
	st := c.Stats()
	t.Logf("%+v", st.Conns)
	require.True(t, st.Conns.Traced)
	require.GreaterOrEqual(t, st.Conns.Got, int64(2), "a receive and a delete at least")
	require.GreaterOrEqual(t, st.Conns.New, int64(1))
	require.Less(t, st.Conns.New, st.Conns.Got, "later calls reuse the connection")
	require.Equal(t, 10, st.IdleConnsPerHost)
}

// Over a pool larger than the work needs, with handlers that finish at
// once whatever the receives bring, against a server short of CPU (its
// answers come no faster than 2,000 calls a second, the more calls in
// flight the later), the calls in flight go to the limit as soon as the
// queue shows a backlog and stay there, as a bare loop's do: no new
// connection after the start. Calls in flight that followed the
// read-ahead's wants wandered (each want is twice the rate over the round
// trip, which grows with the calls in flight) and dialled at each new peak.
func TestCallsInFlightSteadyOverALargePool(t *testing.T) {
	t.Parallel()
	p := &poolClient{n: 256, rtt: 10 * time.Millisecond, traced: true, jitter: true, serves: 2000}
	r := simulateCalls(t, p, 50*time.Microsecond, 20, time.Second, 2*time.Second)
	t.Logf("%v", r)
	require.Equal(t, 103, r.stats.MaxCallsInFlight, "the work's need: (20 + 1000) / 10 + 1")
	require.Equal(t, 103, r.peak, "the calls in flight at the limit")
	require.Zero(t, r.dialsPer1k, "new connections after the first second")
	require.GreaterOrEqual(t, r.rate, 0.95*2000*5, "what the server answers: 5 messages a call (a receive of 10 and a delete)")
}

package sqsconsumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// Without WithAdaptiveConcurrency, a Throttled pauses the Consumer for its
// delay before the next receive: nothing is received and none of the
// messages it holds starts until then; the message comes back after the
// delay; the breaker does not count it; Health stays healthy through a
// pause longer than the stall limit.
func TestThrottledPausesReceivingAndStarting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		ids := b.send(t, 10)
		rl := &receiveLog{Client: b.client}
		const pause = 3 * time.Minute
		var mu sync.Mutex
		var starts []time.Time
		start := time.Now()
		c, err := New(rl, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			if m.Body == "m000" && m.ReceiveCount == 1 {
				return Throttled(errors.New("429 Too Many Requests"), pause)
			}
			time.Sleep(time.Second)
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithConcurrency(1), WithBreaker(Breaker{Failures: 1}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(pause / 2)
		st := c.Stats()
		h := c.Health()
		time.Sleep(pause/2 + 30*time.Second)
		require.NoError(t, stop())

		require.Equal(t, int64(1), st.Throttled)
		require.Equal(t, start.Add(pause), st.ThrottledUntil)
		require.True(t, h.Healthy, "a pause on purpose is no stall: %v", h.Problems)
		require.Equal(t, "closed", h.Breaker, "Throttled is no failure of the breaker")
		require.Equal(t, st.Concurrency, st.ConcurrencyLimit)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, start, starts[0])
		for _, at := range starts[1:] {
			require.False(t, at.Before(start.Add(pause)), "nothing starts during the pause (started at %v)", at.Sub(start))
		}
		require.Empty(t, rl.between(start.Add(time.Second), start.Add(pause)), "no receive during the pause")
		st0 := b.state(t, ids[0])
		require.Equal(t, pause, st0.VisibilityChanges[0].Timeout, "the message comes back after the delay")
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted)
		}
	})
}

// bpAt drives a backPressure by hand.
type bpAt struct {
	*backPressure
	wakes  atomic.Int32 // from the pause's timer too
	pauses []time.Time
}

func newTestBackPressure(t *testing.T, conc int, opts ...Option) *bpAt {
	t.Helper()
	s, errs := settingsFor(&sqs.Client{}, "https://sqs.us-east-1.amazonaws.com/1/q", append([]Option{WithConcurrency(conc)}, opts...))
	errs = append(append(errs, s.errs...), s.adaptiveConflicts()...)
	require.NoError(t, errors.Join(errs...))
	b := &bpAt{backPressure: newBackPressure(&s)}
	b.wake = func() { b.wakes.Add(1) }
	b.paused = func(until time.Time, _ bool, _ time.Duration) { b.pauses = append(b.pauses, until) }
	return b
}

func TestBackPressureLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newTestBackPressure(t, 50, WithAdaptiveConcurrency(AdaptiveConcurrency{Floor: 2}))
		defer b.stop()
		require.Equal(t, 10, b.slots(50), "Initial's default")
		require.Equal(t, 7, b.slots(7), "never above the slots the flow has")
		started := time.Now()
		time.Sleep(100 * time.Millisecond)

		b.outcome(outcomeSuccess, started, 5, 0)
		require.Equal(t, 10, b.slots(50), "the limit holds nothing back: no growth")
		for i := range 5 {
			b.outcome(outcomeSuccess, started, 10+i, 0)
		}
		require.Equal(t, 15, b.slots(50), "slow start: a slot a success")
		require.EqualValues(t, 5, b.wakes.Load(), "each new slot wakes the flow")
		b.outcome(outcomeNeutral, started, 15, 0)
		b.outcome(outcomeFailure, started, 15, 0)
		require.Equal(t, 15, b.slots(50), "failures and neutral outcomes leave it")

		// A fall, then the further throttles of messages started before it.
		before := time.Now()
		time.Sleep(time.Millisecond)
		b.outcome(outcomeThrottled, time.Now(), 0, time.Second)
		require.InDelta(t, 15*0.95, b.limit, 1e-9)
		b.outcome(outcomeThrottled, before, 0, time.Second)
		b.outcome(outcomeThrottled, before, 0, time.Second)
		require.InDelta(t, 15*0.95-2, b.limit, 1e-9, "one slot off for each of the same excess")
		require.Equal(t, 0.5, b.gain)
		require.EqualValues(t, 3, b.throttles)
		require.EqualValues(t, 1, b.cuts)
		require.Empty(t, b.pauses, "above the floor the limit falls, no pause")

		// The growth halves at each fall, to a hundredth of a slot a success.
		for i := 0; int(b.limit) > 2; i++ {
			require.Less(t, i, 100)
			time.Sleep(time.Millisecond)
			b.outcome(outcomeThrottled, time.Now(), 0, time.Second)
		}
		require.Equal(t, minGain, b.gain)
		require.Equal(t, 2, b.slots(50), "down to the floor")
		require.Empty(t, b.pauses)

		// At the floor a Throttled pauses for its delay; a later one
		// pushes the pause back; its end wakes the flow; the limit starts
		// again as from Initial, a slot a success.
		b.outcome(outcomeThrottled, time.Now(), 0, 5*time.Second)
		require.Len(t, b.pauses, 1)
		require.Equal(t, 1.0, b.gain)
		require.Equal(t, 2.0, b.limit)
		require.Equal(t, []time.Time{time.Now().Add(5 * time.Second)}, b.pauses)
		time.Sleep(2 * time.Second)
		b.outcome(outcomeThrottled, time.Now(), 0, 5*time.Second)
		require.Equal(t, time.Now().Add(5*time.Second), b.pausedUntil())
		wakes := b.wakes.Load()
		time.Sleep(5*time.Second - time.Millisecond)
		synctest.Wait()
		require.Equal(t, wakes, b.wakes.Load(), "not before the later pause's end")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, wakes+1, b.wakes.Load())

		b.outcome(outcomeSuccess, time.Now().Add(-100*time.Millisecond), 2, 0)
		require.Equal(t, 3, b.slots(50))

		// After a calm spell the growth doubles again.
		time.Sleep(time.Millisecond)
		b.outcome(outcomeThrottled, time.Now(), 0, time.Second)
		gain := b.gain
		require.Equal(t, 0.5, gain)
		time.Sleep(11 * time.Second)
		b.outcome(outcomeSuccess, time.Now().Add(-100*time.Millisecond), 2, 0)
		require.Equal(t, 2*gain, b.gain)
	})
}

func TestBackPressureWithoutTheLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newTestBackPressure(t, 50)
		require.Equal(t, 50, b.slots(50))
		b.outcome(outcomeSuccess, time.Now(), 50, 0)
		require.Zero(t, b.wakes.Load())
		b.outcome(outcomeThrottled, time.Now(), 0, 0)
		require.Empty(t, b.pauses, "a delay of 0 pauses nothing")
		b.outcome(outcomeThrottled, time.Now(), 0, 10*time.Second)
		require.Len(t, b.pauses, 1)
		b.outcome(outcomeThrottled, time.Now(), 0, 3*time.Second)
		require.Len(t, b.pauses, 1, "a shorter pause does not shorten it")
		b.stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Zero(t, b.wakes.Load(), "stopped: no wake of its own")
	})
}

func TestWithAdaptiveConcurrencyValidates(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	for _, tt := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithAdaptiveConcurrency(AdaptiveConcurrency{Floor: -1})}, "WithAdaptiveConcurrency: Floor -1 must be from 1"},
		{[]Option{WithAdaptiveConcurrency(AdaptiveConcurrency{Initial: -1})}, "WithAdaptiveConcurrency: Initial -1"},
		{[]Option{WithAdaptiveConcurrency(AdaptiveConcurrency{Floor: 10})}, "WithAdaptiveConcurrency's Floor 10 must be below WithConcurrency(10)"},
		{[]Option{WithAdaptiveConcurrency(AdaptiveConcurrency{}), WithConcurrency(1)}, "WithAdaptiveConcurrency's Floor 1 must be below WithConcurrency(1)"},
		{[]Option{WithConcurrency(20), WithAdaptiveConcurrency(AdaptiveConcurrency{Floor: 5, Initial: 3})}, "WithAdaptiveConcurrency's Initial 3 is below its Floor 5"},
		{[]Option{WithAdaptiveConcurrency(AdaptiveConcurrency{Initial: 30}), WithConcurrency(20)}, "WithAdaptiveConcurrency's Initial 30 is above WithConcurrency(20)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			_, err := New(&sqs.Client{}, "https://sqs.us-east-1.amazonaws.com/1/q", h, tt.opts...)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, tt.want)
		})
	}
	c, err := New(&sqs.Client{}, "https://sqs.us-east-1.amazonaws.com/1/q", h, WithConcurrency(4), WithAdaptiveConcurrency(AdaptiveConcurrency{}))
	require.NoError(t, err)
	require.Equal(t, 4, c.Stats().ConcurrencyLimit, "Initial's default, within WithConcurrency")
}

// downstream is a service that takes at most cap calls at once and
// answers the rest at once with a 429 (a pool of connections, a quota of
// concurrent requests).
type downstream struct {
	mu       sync.Mutex
	cap, now int
	most     int // the most calls it saw at once, refused ones included
	refused  int
}

func (d *downstream) call(took time.Duration) error {
	d.mu.Lock()
	d.most = max(d.most, d.now+1)
	if d.now >= d.cap {
		d.refused++
		d.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return Throttled(errors.New("429 Too Many Requests"), 2*time.Second)
	}
	d.now++
	d.mu.Unlock()
	time.Sleep(took)
	d.mu.Lock()
	d.now--
	d.mu.Unlock()
	return nil
}

// The adaptive limit finds a downstream that takes 4 calls at once, with
// WithConcurrency 50: single handlers, a Batch handler (one call a batch:
// it takes 4 batches of 5), and a FIFO queue. It bounds what is asked for,
// not only what starts: the messages held (running, waiting, asked for)
// stay within the limit plus one receive; no message reaches the
// dead-letter queue; the breaker never opens; the scaling signal's
// capacity is WithConcurrency's, not the limit's.
func TestAdaptiveLimitFindsTheDownstream(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		fifo   bool
		batch  int
		target int // the limit the downstream needs; 0: the limit is not what binds
		n      int // messages: a backlog of about 15 s
	}{
		{name: "single", target: 4, n: 600},
		{name: "Batch", batch: 5, target: 20, n: 2400},
		// FIFO: a receive brings few groups' messages, which run one at a
		// time: the groups keep the downstream at its 4 or below, and the
		// limit, not what holds the Consumer back, does not grow.
		{name: "FIFO", fifo: true, n: 600},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setupDLQ(t, tt.fifo, 5, map[string]string{"VisibilityTimeout": "30"})
				n := int64(tt.n)
				for i := range tt.n {
					var opts []sqstest.SendOption
					if tt.fifo {
						opts = append(opts, sqstest.WithGroupID("g"+strconv.Itoa(i%40)))
					}
					_, err := b.srv.Send(b.url, fmt.Sprintf("%05d", i), opts...)
					require.NoError(t, err)
				}
				down := &downstream{cap: 4}
				var order sync.Map // group -> last body handled
				var outOfOrder atomic.Int32
				handled := func(m *Message) {
					if prev, ok := order.Swap(m.GroupID, m.Body); ok && tt.fifo && prev.(string) > m.Body {
						outOfOrder.Add(1)
					}
				}
				var h Handler = HandlerFunc(func(ctx context.Context, m *Message) error {
					if err := down.call(100 * time.Millisecond); err != nil {
						return err
					}
					handled(m)
					return nil
				})
				if tt.batch > 0 {
					var err error
					h, err = Batch(func(ctx context.Context, msgs []*Message) error {
						if err := down.call(100 * time.Millisecond); err != nil {
							return err
						}
						for _, m := range msgs {
							handled(m)
						}
						return nil
					}, tt.batch, 10*time.Millisecond)
					require.NoError(t, err)
				}
				// Receives take 10 ms, as over a network: in virtual time
				// without it every round trip is 0, and the read-ahead
				// follows the long polls' times instead.
				c, err := New(slowReceives{b.client}, b.url, h, WithConcurrency(50), WithAdaptiveConcurrency(AdaptiveConcurrency{}),
					WithBreaker(Breaker{Failures: 1}), WithScaling(ScalingPolicy{Target: time.Minute, Interval: 5 * time.Second}))
				require.NoError(t, err)
				stop := running(t, c)
				start := time.Now()
				// Held beyond the limit: against the highest limit of the
				// last second, since a fall does not take back what was
				// already received.
				mostHeld, limitSum, samples := 0, 0, 0
				var recent []int
				for time.Since(start) < 2*time.Minute {
					time.Sleep(50 * time.Millisecond)
					st := c.Stats()
					require.GreaterOrEqual(t, st.ConcurrencyLimit, 1)
					require.LessOrEqual(t, st.ConcurrencyLimit, 50)
					recent = append(recent, st.ConcurrencyLimit)
					if len(recent) > 20 {
						recent = recent[1:]
					}
					if st.Deleted < n-50 {
						// While the backlog lasts: at its end the read-ahead
						// follows long polls that wait for the last messages.
						mostHeld = max(mostHeld, st.Running+st.Waiting+st.Asked-slices.Max(recent))
					}
					if time.Since(start) > 5*time.Second { // settled
						limitSum += st.ConcurrencyLimit
						samples++
					}
					if st.Deleted == n {
						break
					}
				}
				fig := c.Scaling()
				st := c.Stats()
				took := time.Since(start)
				require.NoError(t, stop())

				meanLimit := float64(limitSum) / float64(samples)
				receives := 0
				for _, m := range b.srv.Messages(b.url) {
					receives += len(m.Receives)
				}
				t.Logf("%s: limit %.1f on average (the downstream takes %d), %d held beyond it at most, %d refused of %d calls, %.3f receives a message, capacity %.0f/s, done in %v",
					tt.name, meanLimit, tt.target, mostHeld, down.refused, st.Started, float64(receives)/float64(n), fig.CapacityPerReplica, took)
				require.Equal(t, int64(n), st.Deleted)
				require.Empty(t, b.srv.Messages(b.dlq))
				require.Zero(t, outOfOrder.Load())
				_, _, opens := c.runOf().br.status()
				require.Zero(t, opens, "Throttled never opens the breaker")
				if tt.target > 0 {
					lo := 0.65 * float64(tt.target)
					if tt.batch > 0 {
						// The downstream counts calls, the limit messages: four
						// partial batches fill it with fewer slots, and five
						// overflow it with as many.
						lo = 0.5 * float64(tt.target)
					}
					require.GreaterOrEqual(t, meanLimit, lo)
					require.LessOrEqual(t, meanLimit, 1.35*float64(tt.target))
				} else {
					require.LessOrEqual(t, meanLimit, 10.0, "no growth while the limit holds nothing back")
				}
				// Without the limit the Consumer would hold WithConcurrency
				// (50) and its read-ahead.
				require.LessOrEqual(t, mostHeld, 10+2*max(tt.batch, 1)+2, "what is asked for stays within the limit and one receive's read-ahead")
				require.LessOrEqual(t, float64(receives)/float64(n), 1.1)
				// Capacity: WithConcurrency (50) over the slot time, about
				// 100 ms: the limit (4 or 20) would make it 40 or 200.
				require.Greater(t, fig.CapacityPerReplica, 300.0, "the scaling signal's capacity is WithConcurrency's")
				require.False(t, math.IsInf(fig.CapacityPerReplica, 0))
			})
		})
	}
}

// slowReceives makes each receive take 10 ms more, after the server's
// answer.
type slowReceives struct{ Client }

func (c slowReceives) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	time.Sleep(10 * time.Millisecond)
	return out, err
}

// In a fleet the flow claims only its limit from the shared budget.
func TestAdaptiveLimitBoundsTheFleetDemand(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newTestBackPressure(t, 20, WithAdaptiveConcurrency(AdaptiveConcurrency{Initial: 3}))
		f := newFlow[*delivery](flowConfig{conc: 20, size: 10, maxAhead: 10, maxPollers: 1, spawn: func() {}, limit: b.backPressure})
		f.mu.Lock()
		defer f.mu.Unlock()
		f.waiting = 1 // not idle
		require.Equal(t, 3, f.demandLocked())
		require.Equal(t, 3, f.countsLocked(time.Now()).conc, "receives are sized for the limit")
		b.outcome(outcomeThrottled, time.Now(), 0, time.Second) // not at the floor: a fall
		require.Equal(t, 2, f.demandLocked())
	})
}

// A Throttled (or Neutral) error never reaches the breaker's count; the
// log line of a throttled message is at Debug.
func TestThrottledIsLoggedAtDebug(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 1)
		var logs bytes.Buffer
		var mu sync.Mutex
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.ReceiveCount == 1 {
				return Throttled(errors.New("slow down"), 2*time.Second)
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithLogger(newTestLogger(&mu, &logs)))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Second)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Contains(t, logs.String(), `level=DEBUG msg="sqsconsumer: handler throttled by the downstream; message released for a retry"`)
		require.Contains(t, logs.String(), `level=INFO msg="sqsconsumer: a handler returned Throttled: receiving and starting paused" queue_url=http://sqstest.local/123456789012/q for=2s`)
		require.NotContains(t, logs.String(), "level=WARN")
	})
}

// newTestLogger logs every level as text to w, under mu.
func newTestLogger(mu *sync.Mutex, w *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{mu, w}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// A Pause and Resume within a Throttled's pause do not restart Health's
// stall clock over the pause's end: the stall clock counts from the later
// of the two. Before, Pause and Resume stamped their instant over the
// pause's end, and a pause longer than the stall limit (2 minutes by
// default) that spanned them made the Consumer unhealthy, though it held
// back on purpose.
func TestThrottledPauseOutlastsAPauseAndResume(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 1)
		const pause = 5 * time.Minute
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			if m.ReceiveCount == 1 {
				return Throttled(errors.New("429 Too Many Requests"), pause)
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		start := time.Now()
		stop := running(t, c)
		time.Sleep(30 * time.Second)
		c.Pause()
		time.Sleep(10 * time.Second)
		c.Resume()
		time.Sleep(3*time.Minute - 40*time.Second) // 2 m 20 s after Resume, the pause holds until 5 m
		until := c.Stats().ThrottledUntil
		h := c.Health()
		require.NoError(t, stop())
		require.Equal(t, start.Add(pause), until)
		require.True(t, h.Healthy, "a pause on purpose is no stall: %v", h.Problems)
	})
}

// The stall clock's restart keeps the later instant: an instant before
// the one it holds (a Pause within a Throttled's pause) leaves it.
func TestProgressResumeKeepsTheLater(t *testing.T) {
	t.Parallel()
	var p progress
	now := time.Now()
	p.resumeAt(now.Add(time.Minute))
	p.resumeAt(now)
	require.Equal(t, now.Add(time.Minute).UnixNano(), p.resumed.Load())
	p.resumeAt(now.Add(2 * time.Minute))
	require.Equal(t, now.Add(2*time.Minute).UnixNano(), p.resumed.Load())
}

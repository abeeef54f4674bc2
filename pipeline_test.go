package sqsconsumer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// latencyClient adds a network round trip to every call: half before the
// request reaches the server, half before the answer is back. Inside a
// synctest bubble the delay is exact.
type latencyClient struct {
	Client
	rtt   time.Duration
	calls atomic.Int64
	recvs atomic.Int64 // ReceiveMessage calls
	asked atomic.Int64 // messages they asked for
	got   atomic.Int64 // messages they got
	// renewing, if set, is called as each visibility change is sent.
	renewing func()
}

func (c *latencyClient) trip() func() {
	c.calls.Add(1)
	time.Sleep(c.rtt / 2)
	return func() { time.Sleep(c.rtt - c.rtt/2) }
}

func (c *latencyClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	defer c.trip()()
	c.recvs.Add(1)
	c.asked.Add(int64(in.MaxNumberOfMessages))
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	if err == nil {
		c.got.Add(int64(len(out.Messages)))
	}
	return out, err
}

func (c *latencyClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	defer c.trip()()
	return c.Client.DeleteMessage(ctx, in, optFns...)
}

func (c *latencyClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	defer c.trip()()
	return c.Client.DeleteMessageBatch(ctx, in, optFns...)
}

func (c *latencyClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if c.renewing != nil {
		c.renewing()
	}
	defer c.trip()()
	return c.Client.ChangeMessageVisibility(ctx, in, optFns...)
}

func (c *latencyClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if c.renewing != nil {
		c.renewing()
	}
	defer c.trip()()
	return c.Client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

func (c *latencyClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	defer c.trip()()
	return c.Client.GetQueueAttributes(ctx, in, optFns...)
}

// cell is one measurement of the pipeline table.
type cell struct {
	rtt, handler time.Duration
	conc         int
}

func (c cell) String() string { return fmt.Sprintf("rtt=%v/h=%v/c=%d", c.rtt, c.handler, c.conc) }

// idealRate is what the cell could do at best, in messages per second:
// every slot busy all the time (C / H), unless the read-ahead bound caps
// the messages held or on their way (Little's law over one receive round
// trip plus the handler).
func (c cell) idealRate(maxAhead int) float64 {
	slots := float64(c.conc) / c.handler.Seconds()
	bound := float64(c.conc+maxAhead) / (c.rtt + c.handler).Seconds()
	return min(slots, bound)
}

// cellResult is what measureCell saw.
type cellResult struct {
	utilization float64 // share of slot time spent in handlers over the span
	rate        float64 // messages finished per virtual second over the span
	callsPerMsg float64 // API calls per message finished, over the span
	peakAhead   int     // most messages waiting or asked for beyond the free slots
	peakHeld    int     // most messages received and not started, sampled
}

// measureCell runs a Consumer over a backlog in virtual time: it warms up
// for warm, then measures over span. Handler time is counted as it
// overlaps the span, so slow handlers finishing in bursts measure exactly.
func measureCell(t *testing.T, c cell, warm, span time.Duration) cellResult {
	t.Helper()
	var res cellResult
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		client := &latencyClient{Client: b.client, rtt: c.rtt}
		// Enough backlog for the whole run at the ideal rate, and then some.
		n := int(c.idealRate(defaultMaxReadAhead)*(warm+span).Seconds()*1.2) + 2*c.conc + 20
		for range n {
			_, err := b.srv.Send(b.url, "m")
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var busy time.Duration
		var finished, total int
		var t0, t1 time.Time
		con, err := New(client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			start := time.Now()
			time.Sleep(c.handler)
			end := time.Now()
			mu.Lock()
			defer mu.Unlock()
			total++
			if !t0.IsZero() {
				from, to := start, end
				if from.Before(t0) {
					from = t0
				}
				if !t1.IsZero() && to.After(t1) {
					to = t1
				}
				if to.After(from) {
					busy += to.Sub(from)
				}
				if t1.IsZero() || !end.After(t1) {
					finished++
				}
			}
			return nil
		}), WithVisibilityTimeout(time.Minute), WithConcurrency(c.conc))
		require.NoError(t, err)
		stop := running(t, con)
		// Sample the unstarted messages held every 10 ms, a microsecond
		// off the millisecond grid every event of the run falls on, so no
		// sample sees a receive's messages before they were handed on.
		sampled := make(chan int)
		quit := make(chan struct{})
		go func() {
			peak := 0
			time.Sleep(time.Microsecond)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					if fl := con.flowOf(); fl != nil {
						fl.mu.Lock()
						peak = max(peak, fl.waiting)
						fl.mu.Unlock()
					}
				case <-quit:
					sampled <- peak
					return
				}
			}
		}()
		time.Sleep(warm)
		mu.Lock()
		t0 = time.Now()
		mu.Unlock()
		calls0 := client.calls.Load()
		time.Sleep(span)
		mu.Lock()
		t1 = time.Now()
		mu.Unlock()
		spanCalls := client.calls.Load() - calls0
		time.Sleep(c.handler) // let the handlers running at t1 report their share
		close(quit)
		res.peakHeld = <-sampled
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		res.utilization = busy.Seconds() / (float64(c.conc) * span.Seconds())
		res.rate = float64(finished) / span.Seconds()
		res.callsPerMsg = float64(spanCalls) / float64(finished)
		if testing.Verbose() {
			t.Logf("calls %d, receives %d asking %d getting %d, messages handled %d", client.calls.Load(), client.recvs.Load(), client.asked.Load(), client.got.Load(), total)
		}
		_, _, _, res.peakAhead = con.flowOf().snapshot()
	})
	return res
}

// renewalCalls is what heartbeats add per message in a cell: a renewal
// every 20 s of the minute-long lease, batched 10 to a call at best.
func renewalCalls(c cell) float64 {
	return math.Floor(c.handler.Seconds()/20) / float64(min(c.conc, maxReceiveSize))
}

// tableServerLimit is the highest ideal rate (messages per virtual second)
// the table asserts: above it a cell costs the test too much real CPU for
// what it adds (real SQS serves one consumer process at rates like these).
const tableServerLimit = 5000

// TestPipelineTable is issue 10's deterministic table: over round trips
// from 0 to 100 ms, handlers from 1 ms to 30 s and concurrency from 1 to
// 1000, the Consumer keeps every slot busy (>= 0.95 of the ideal rate),
// with receives and deletes batched, and reads ahead no more than one
// round trip of completions plus one batch. Virtual time makes every
// figure exact.
func TestPipelineTable(t *testing.T) {
	t.Parallel()
	rtts := []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond}
	handlers := []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, time.Second, 30 * time.Second}
	concs := []int{1, 10, 20, 100, 1000}
	if raceEnabled || testing.Short() {
		// The race detector slows each message tenfold: keep a cell of
		// each handler class at a real round trip.
		rtts = []time.Duration{10 * time.Millisecond}
		concs = []int{1, 20, 1000}
	}
	for _, rtt := range rtts {
		for _, h := range handlers {
			for _, conc := range concs {
				c := cell{rtt: rtt, handler: h, conc: conc}
				if h == 0 || float64(conc)/h.Seconds() > tableServerLimit {
					continue // ideal above the server limit
				}
				t.Run(c.String(), func(t *testing.T) {
					t.Parallel()
					warm := max(2*time.Second, 3*h)
					span := max(2*time.Second, 5*h)
					r := measureCell(t, c, warm, span)
					ideal := c.idealRate(defaultMaxReadAhead)
					// Busy slot time is the exact measure of throughput
					// for a fixed handler time: rate = utilization x C / H.
					got := r.utilization * float64(c.conc) / c.handler.Seconds()
					t.Logf("%.1f msg/s (%.1f finished in the span) of ideal %.1f: %.3f; %.3f calls/msg; held unstarted at most %d, read ahead (asked included) at most %d",
						got, r.rate, ideal, got/ideal, r.callsPerMsg, r.peakHeld, r.peakAhead)
					require.GreaterOrEqual(t, got, 0.95*ideal, "throughput")
					if c.handler >= time.Second {
						// Slow handlers hold at most one round trip of
						// completions plus one batch unstarted.
						bound := int(math.Ceil(float64(c.conc)/c.handler.Seconds()*c.rtt.Seconds())) + maxReceiveSize
						require.LessOrEqual(t, r.peakHeld, bound, "unstarted messages held")
					}
					if got >= 10/coalesceWindow.Seconds() {
						// Fast enough that every batch call can fill (10
						// deletes within one batch window): 0.2 calls a
						// message, plus renewals of long handlers.
						require.LessOrEqual(t, r.callsPerMsg, 0.21+renewalCalls(c), "calls per message")
					}
				})
			}
		}
	}
}

// Issue 10 point 2: with slow handlers the read-ahead falls to next to
// nothing, so two processes on one queue share the work instead of one
// hoarding it.
func TestTwoConsumersShareSlowWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		client := &latencyClient{Client: b.client, rtt: 10 * time.Millisecond}
		ids := b.send(t, 100)
		var mu sync.Mutex
		handledBy := map[string]int{}
		var cons []*Consumer
		var stops []func() error
		for i := range 2 {
			c, err := New(client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
				time.Sleep(30 * time.Second)
				mu.Lock()
				handledBy[m.ID] = i
				mu.Unlock()
				return nil
			}), WithVisibilityTimeout(time.Minute), WithConcurrency(10))
			require.NoError(t, err)
			cons = append(cons, c)
			stops = append(stops, running(t, c))
			time.Sleep(time.Second) // the second starts while the first holds its first batch
		}
		peak := [2]int{}
		for range 300 * 10 { // 300 s, sampled every 100 ms off the event grid
			time.Sleep(100 * time.Millisecond)
			for i, c := range cons {
				fl := c.flowOf()
				fl.mu.Lock()
				peak[i] = max(peak[i], fl.waiting)
				fl.mu.Unlock()
			}
		}
		for _, stop := range stops {
			require.NoError(t, stop())
		}
		count := [2]int{}
		for _, id := range ids {
			require.True(t, b.state(t, id).Deleted)
			require.Equal(t, 1, b.state(t, id).ReceiveCount, "handled once")
			count[handledBy[id]]++
		}
		// One round trip of completions (10 / 30 s x 10 ms, rounded up)
		// plus one batch.
		for i := range 2 {
			require.LessOrEqual(t, peak[i], 1+maxReceiveSize, "consumer %d held unstarted", i)
		}
		for i := range 2 {
			require.InDelta(t, 50, count[i], 5, "consumer %d's share of the work (%v)", i, count)
		}
	})
}

// TestNextMessageStartsWhileDeleteWaitsForRenewal: a handler that returns
// while its lease's renewal is in flight cannot have its delete batched
// (one call of a lease at a time), so the delete waits for SQS. The
// message waiting for the freed slot must start at once all the same,
// not a round trip later with the delete.
func TestNextMessageStartsWhileDeleteWaitsForRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		renewing := make(chan struct{}) // closed when the first renewal is sent
		var once sync.Once
		client := &latencyClient{Client: b.client, rtt: 200 * time.Millisecond,
			renewing: func() { once.Do(func() { close(renewing) }) }}
		// Quick messages first, so that the Consumer reads ahead, then one
		// that holds its slot until a renewal is on its way.
		for range 20 {
			_, err := b.srv.Send(b.url, "quick")
			require.NoError(t, err)
		}
		_, err := b.srv.Send(b.url, "slow")
		require.NoError(t, err)
		for range 5 {
			_, err := b.srv.Send(b.url, "after")
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var slowEnd, afterStart time.Time
		con, err := New(client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			switch m.Body {
			case "quick":
				time.Sleep(10 * time.Millisecond)
			case "slow":
				<-renewing
				mu.Lock()
				slowEnd = time.Now()
				mu.Unlock()
			case "after":
				mu.Lock()
				if !slowEnd.IsZero() && afterStart.IsZero() {
					afterStart = time.Now()
				}
				mu.Unlock()
			}
			return nil
		}), WithVisibilityTimeout(3*time.Second), WithConcurrency(1), WithWaitTime(time.Second))
		require.NoError(t, err)
		stop := running(t, con)
		time.Sleep(5 * time.Second)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.False(t, slowEnd.IsZero(), "the slow handler never saw a renewal")
		require.False(t, afterStart.IsZero(), "no message started after the slow one")
		require.Equal(t, slowEnd, afterStart, "the next message waited for the delete")
	})
}

package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

func okBatch(context.Context, []*Message) error { return nil }

// batchWays are the two ways a message reaches a batcher: directly when
// it gets its handler slot (no middleware), or through middleware (a
// goroutine per message, which waits in HandleMessage; here a
// pass-through middleware). Tests of Batch's semantics run both.
var batchWays = []struct {
	name string
	opts []Option
}{
	{"direct", nil},
	{"middleware", []Option{WithMiddleware(func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, m *Message) error { return next.HandleMessage(ctx, m) })
	})}},
}

// eachBatchWay runs f in a subtest for each of batchWays.
func eachBatchWay(t *testing.T, f func(t *testing.T, opts ...Option)) {
	t.Helper()
	for _, way := range batchWays {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			f(t, way.opts...)
		})
	}
}

func TestBatchValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		h      BatchHandler
		size   int
		window time.Duration
		want   string
	}{
		{nil, 10, time.Second, "handler is nil"},
		{okBatch, 0, time.Second, "size 0: must be from 1 to 10000"},
		{okBatch, 10_001, time.Second, "size 10001"},
		{okBatch, 10, -time.Second, "window -1s: must be from 0 to 5m0s"},
		{okBatch, 10, 6 * time.Minute, "window 6m0s"},
	} {
		h, err := Batch(tt.h, tt.size, tt.window)
		require.Nil(t, h)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, tt.want)
	}
	const u = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	h, err := Batch(okBatch, 20, time.Second)
	require.NoError(t, err)
	_, err = New(&sqs.Client{}, u, h, WithConcurrency(10))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "Batch size 20 exceeds WithConcurrency(10)")
	// Joined with the other problems, as New's doc promises: each named.
	_, err = New(&sqs.Client{}, u, h, WithConcurrency(10), WithBatchSize(11))
	require.ErrorContains(t, err, "Batch size 20 exceeds WithConcurrency(10)")
	require.ErrorContains(t, err, "WithBatchSize(11)")
	_, err = New(&sqs.Client{}, u, h, WithConcurrency(20))
	require.NoError(t, err)
	_, err = New(&sqs.Client{}, u, h, WithConcurrency(20))
	require.ErrorContains(t, err, "already used by another Consumer")
}

// batchRecorder records each call of a batch handler.
type batchRecorder struct {
	mu    sync.Mutex
	calls [][]string // bodies per call
}

func (r *batchRecorder) record(msgs []*Message) {
	bodies := make([]string, len(msgs))
	for i, m := range msgs {
		bodies[i] = m.Body
	}
	r.mu.Lock()
	r.calls = append(r.calls, bodies)
	r.mu.Unlock()
}

func (r *batchRecorder) snapshot() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func TestBatchPartialFailures(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, testBatchPartialFailures)
}

func testBatchPartialFailures(t *testing.T, way ...Option) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 40)
		rec := &batchRecorder{}
		var obsMu sync.Mutex
		var batchEvents []Event
		kinds := map[EventKind]int{}
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			rec.record(msgs)
			time.Sleep(time.Second)
			fails := BatchFailures{}
			for _, m := range msgs {
				if m.ReceiveCount > 1 {
					continue // retries succeed
				}
				switch m.Body {
				case "m003":
					fails[m.ID] = RetryAfter(errors.New("m003 later"), 7*time.Second)
				case "m005":
					fails[m.ID] = errors.New("m005 failed")
				case "m007":
					fails[m.ID] = nil // named, but a success
				}
			}
			if len(fails) == 0 {
				return nil
			}
			return fmt.Errorf("wrapped: %w", fails)
		}, 10, 200*time.Millisecond)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(20), WithWaitTime(time.Second),
			WithBackoff(func(int) time.Duration { return 11 * time.Second }),
			WithObserver(ObserverFunc(func(e Event) {
				obsMu.Lock()
				defer obsMu.Unlock()
				kinds[e.Kind]++
				if e.Kind == EventBatch {
					batchEvents = append(batchEvents, e)
				}
			})))...)
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())

		calls := rec.snapshot()
		handled := 0
		for _, call := range calls {
			require.LessOrEqual(t, len(call), 10)
			handled += len(call)
		}
		require.Equal(t, 42, handled, "40 messages, 2 of them twice")
		require.LessOrEqual(t, len(calls), 8, "batches fill: %v", calls)
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, st.Body)
			switch st.Body {
			case "m003":
				require.Equal(t, 2, st.ReceiveCount)
				require.Equal(t, 7*time.Second, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout, "RetryAfter's delay")
			case "m005":
				require.Equal(t, 2, st.ReceiveCount)
				require.Equal(t, 11*time.Second, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout, "the backoff")
			default:
				require.Equal(t, 1, st.ReceiveCount, st.Body)
			}
		}
		obsMu.Lock()
		defer obsMu.Unlock()
		require.Len(t, batchEvents, len(calls))
		failedBatches := 0
		for _, e := range batchEvents {
			require.NotEmpty(t, e.Batch)
			require.Equal(t, time.Second, e.SinceStart)
			if e.Err != nil {
				failedBatches++
			}
		}
		require.Equal(t, 1, min(failedBatches, 1))
		require.Equal(t, 42, kinds[EventStarted])
		require.Equal(t, 40, kinds[EventSucceeded])
		require.Equal(t, 2, kinds[EventFailed])
	})
}

func TestBatchWholeFailures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		fail func(msgs []*Message) error
		want string
	}{
		{"plain error", func([]*Message) error { return errors.New("downstream down") }, "downstream down"},
		{"panic", func([]*Message) error { panic("boom") }, "handler panicked: boom"},
		{"unknown ID", func([]*Message) error { return BatchFailures{"not-in-batch": errors.New("x")} }, `reported message "not-in-batch", which is not in its batch`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachBatchWay(t, func(t *testing.T, way ...Option) { testBatchWholeFailure(t, tt.fail, tt.want, way...) })
		})
	}
}

func testBatchWholeFailure(t *testing.T, fail func(msgs []*Message) error, want string, way ...Option) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 5)
		var mu sync.Mutex
		var errs []error
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			if msgs[0].ReceiveCount == 1 {
				return fail(msgs)
			}
			return nil
		}, 5, time.Second)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(5), WithWaitTime(time.Second),
			WithObserver(ObserverFunc(func(e Event) {
				if e.Kind == EventFailed {
					mu.Lock()
					errs = append(errs, e.Err)
					mu.Unlock()
				}
			})))...)
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(3 * time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, errs, 5, "every message of the batch failed")
		for _, e := range errs {
			require.ErrorContains(t, e, want)
		}
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted)
			require.Equal(t, 2, st.ReceiveCount)
		}
	})
}

// Messages in a batch longer than the lease keep their own heartbeats; one
// whose lease is lost is never deleted, and the handler can tell.
func TestBatchLeases(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, testBatchLeases)
}

func testBatchLeases(t *testing.T, way ...Option) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 4)
		var mu sync.Mutex
		lostSeen := map[string]bool{}
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			if msgs[0].ReceiveCount > 1 {
				return nil
			}
			time.Sleep(15 * time.Second)
			// The next renewal, one call for the four, refuses one entry.
			b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
			time.Sleep(85 * time.Second)
			mu.Lock()
			for _, m := range msgs {
				lostSeen[m.Body] = m.Lease.Err() != nil
			}
			mu.Unlock()
			require.NoError(t, ctx.Err(), "one lost lease does not cancel the batch")
			return nil
		}, 4, time.Second)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(4), WithWaitTime(time.Second))...)
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(3 * time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, lostSeen, 4)
		lost := ""
		for body, l := range lostSeen {
			if l {
				require.Empty(t, lost, "one lease lost: %v", lostSeen)
				lost = body
			}
		}
		require.NotEmpty(t, lost, "the handler sees the lost lease")
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted)
			if st.Body == lost {
				require.GreaterOrEqual(t, st.ReceiveCount, 2, "the lost one came back (while its batch ran it was handed back: it ran once at a time)")
				continue
			}
			require.Equal(t, 1, st.ReceiveCount, "renewed throughout: %s", st.Body)
			require.GreaterOrEqual(t, len(st.VisibilityChanges), 3, st.Body)
		}
	})
}

func TestBatchFIFOKeepsOrder(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, testBatchFIFOKeepsOrder)
}

func testBatchFIFOKeepsOrder(t *testing.T, way ...Option) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for i := range 5 {
			_, err := b.srv.Send(b.url, fmt.Sprintf("a%d", i), sqstest.WithGroupID("a"))
			require.NoError(t, err)
			_, err = b.srv.Send(b.url, fmt.Sprintf("b%d", i), sqstest.WithGroupID("b"))
			require.NoError(t, err)
		}
		rec := &batchRecorder{}
		var mu sync.Mutex
		var order []string // bodies as the handler saw them, per call in order
		failedOnce := false
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			rec.record(msgs)
			time.Sleep(time.Second)
			mu.Lock()
			defer mu.Unlock()
			fails := BatchFailures{}
			for _, m := range msgs {
				order = append(order, m.Body)
				if m.Body == "a2" && !failedOnce {
					failedOnce = true
					fails[m.ID] = RetryAfter(errors.New("a2 once"), 5*time.Second)
				}
			}
			return fails
		}, 10, 100*time.Millisecond)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithWaitTime(time.Second))...)
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())

		mu.Lock()
		defer mu.Unlock()
		var a, bs []string
		for _, o := range order {
			if o[0] == 'a' {
				a = append(a, o)
			} else {
				bs = append(bs, o)
			}
		}
		// a3 and a4 may have run in a2's batch (then they run again) but
		// never after a2 failed and before its retry.
		i := slices.Index(a, "a2")
		require.Equal(t, []string{"a0", "a1", "a2"}, a[:i+1])
		rest := a[i+1:]
		for len(rest) > 0 && rest[0] != "a2" {
			require.Contains(t, []string{"a3", "a4"}, rest[0], "only a2's batch-mates before its retry: %v", a)
			rest = rest[1:]
		}
		require.Equal(t, []string{"a2", "a3", "a4"}, rest, "after the failure the group starts again from a2: %v", a)
		require.Equal(t, []string{"b0", "b1", "b2", "b3", "b4"}, bs)
		several := false
		for _, call := range rec.snapshot() {
			n := 0
			for _, body := range call {
				if body[0] == 'a' {
					n++
				}
			}
			several = several || n > 1
		}
		require.True(t, several, "a batch held several messages of a group: %v", rec.snapshot())
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, st.Body)
			switch st.Body {
			case "a2", "a3", "a4":
				require.Equal(t, 2, st.ReceiveCount, st.Body)
			default:
				require.Equal(t, 1, st.ReceiveCount, st.Body)
			}
		}
	})
}

// A message whose middleware fails never joins a batch, and its group's
// later messages fail behind it without running.
func TestBatchFIFOMiddlewareFailure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		for i := range 4 {
			_, err := b.srv.Send(b.url, fmt.Sprintf("a%d", i), sqstest.WithGroupID("a"))
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var order []string
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				order = append(order, m.Body)
			}
			return nil
		}, 4, time.Second)
		require.NoError(t, err)
		refused := false
		mw := func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, m *Message) error {
				mu.Lock()
				refuse := m.Body == "a1" && !refused
				refused = refused || refuse
				mu.Unlock()
				if refuse {
					time.Sleep(100 * time.Millisecond) // later members joined meanwhile
					return RetryAfter(errors.New("middleware refused a1"), 3*time.Second)
				}
				return next.HandleMessage(ctx, m)
			})
		}
		c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(4), WithWaitTime(time.Second), WithMiddleware(mw))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"a0", "a1", "a2", "a3"}, order)
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, st.Body)
		}
	})
}

// Idempotent runs per message inside a batch: a duplicate is skipped (it
// joins no batch) and counts as a success.
func TestBatchIdempotentSkipsDuplicates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		mw, err := NewIdempotent(NewMemoryStore(), WithIdempotencyKey(func(m *Message) (string, error) {
			return strings.TrimSuffix(m.Body, "-dup"), nil
		}))
		require.NoError(t, err)
		var mu sync.Mutex
		var seen []string
		h, err := Batch(func(ctx context.Context, msgs []*Message) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				seen = append(seen, m.Body)
			}
			return nil
		}, 5, time.Second)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(5), WithWaitTime(time.Second), WithMiddleware(mw))
		require.NoError(t, err)
		stop := running(t, c)
		b.send(t, 3)
		time.Sleep(10 * time.Second)
		_, err = b.srv.Send(b.url, "m001-dup")
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(seen)
		require.Equal(t, []string{"m000", "m001", "m002"}, seen)
		for _, st := range b.srv.Messages(b.url) {
			require.True(t, st.Deleted, st.Body)
		}
	})
}

// At shutdown, messages still gathering for a batch are handed back at
// once, like any message whose work has not started: the batch handler
// never runs, nothing is deleted, every message is visible again at once,
// and Run returns without waiting out the shutdown budget. A batch already
// sent runs to its end.
func TestBatchShutdownWhileGathering(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprintf("fifo=%v", fifo), func(t *testing.T) {
			t.Parallel()
			eachBatchWay(t, func(t *testing.T, way ...Option) { testBatchShutdownWhileGathering(t, fifo, way...) })
		})
	}
}

func testBatchShutdownWhileGathering(t *testing.T, fifo bool, way ...Option) {
	synctest.Test(t, func(t *testing.T) {
		var b bundle
		var opts []sqstest.SendOption
		if fifo {
			b = setup(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
			opts = []sqstest.SendOption{sqstest.WithGroupID("g")}
		} else {
			b = setup(t, nil)
		}
		b.send(t, 3, opts...)
		called := false
		h, err := Batch(func(context.Context, []*Message) error { called = true; return nil }, 10, 5*time.Minute)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithWaitTime(time.Second),
			WithShutdownTimeout(10*time.Second))...)
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute) // gathering, renewed
		begun := time.Now()
		require.NoError(t, stop())
		require.Less(t, time.Since(begun), 2*time.Second, "handed back at once, not after the 10 s budget")
		require.False(t, called, "no batch handler starts after the shutdown began")
		msgs := b.srv.Messages(b.url)
		require.Len(t, msgs, 3)
		for _, st := range msgs {
			require.False(t, st.Deleted)
			require.False(t, st.InFlight, "visible again at once")
			// Released at once, a message may be taken once more by
			// the long poll still in flight (a shutdown never cancels
			// one), which hands it back at once too.
			require.LessOrEqual(t, st.ReceiveCount, 2)
		}
	})
}

// drainOnce runs a Consumer over n messages in an in-memory sqstest (no
// network, round trip 0) until every one is deleted, and returns how long
// that took and how many SQS calls it made. batch: through Batch(size 10).
func drainOnce(b *testing.B, n, conc int, batch bool, work time.Duration) (took time.Duration, calls, handlerCalls int) {
	b.Helper()
	srv := sqstest.NewServer()
	defer srv.Close()
	url, err := srv.CreateQueue("bench", map[string]string{"VisibilityTimeout": "30"})
	require.NoError(b, err)
	for i := range n {
		_, err := srv.Send(url, strconv.Itoa(i))
		require.NoError(b, err)
	}
	var hcalls atomic.Int64
	var h Handler = HandlerFunc(func(context.Context, *Message) error {
		hcalls.Add(1)
		if work > 0 {
			time.Sleep(work)
		}
		return nil
	})
	if batch {
		h, err = Batch(func(context.Context, []*Message) error {
			hcalls.Add(1)
			if work > 0 {
				time.Sleep(work)
			}
			return nil
		}, 10, 5*time.Millisecond)
		require.NoError(b, err)
	}
	var deleted atomic.Int64
	done := make(chan struct{})
	c, err := New(srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} }), url, h,
		WithVisibilityTimeout(30*time.Second), WithConcurrency(conc), WithShutdownTimeout(0),
		WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventDeleted && deleted.Add(1) == int64(n) {
				close(done)
			}
		})))
	require.NoError(b, err)
	srv.ResetCalls()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- c.Run(ctx) }()
	<-done
	took = time.Since(start)
	for action, k := range srv.Calls() {
		if action != "GetQueueAttributes" {
			calls += k
		}
	}
	cancel()
	require.NoError(b, <-errc)
	return took, calls, int(hcalls.Load())
}

// BenchmarkBatchVsSingle drains the same queue with a single-message
// handler and with a batch handler (Batch, size 10, window 5 ms, no
// middleware) at the same concurrency against the in-memory sqstest
// (round trip 0): msg/s of each, their ratio, and the batch runs' SQS
// calls per message and messages per call of the batch handler. Each
// iteration drains single, batch, batch, single, so that a machine load
// that drifts during it weighs on both alike. "noop": handlers that do
// nothing (the library's own cost); "1ms": every handler call costs 1 ms
// (a downstream call), which a batch pays once for ten messages.
func BenchmarkBatchVsSingle(b *testing.B) {
	for _, tc := range []struct {
		name string
		work time.Duration
		n    int
		conc int
	}{{"noop", 0, 20_000, 40}, {"1ms", time.Millisecond, 10_000, 40}, {"noop", 0, 20_000, 200}, {"1ms", time.Millisecond, 20_000, 200}} {
		b.Run(fmt.Sprintf("%s/c=%d", tc.name, tc.conc), func(b *testing.B) {
			var single, batch time.Duration
			calls, hcalls, rounds := 0, 0, 0
			for b.Loop() {
				for _, isBatch := range []bool{false, true, true, false} {
					d, k, h := drainOnce(b, tc.n, tc.conc, isBatch, tc.work)
					if !isBatch {
						single += d
						continue
					}
					batch += d
					calls += k
					hcalls += h
					rounds++
				}
			}
			msgs := float64(tc.n * rounds)
			b.ReportMetric(msgs/single.Seconds(), "single-msg/s")
			b.ReportMetric(msgs/batch.Seconds(), "batch-msg/s")
			b.ReportMetric(single.Seconds()/batch.Seconds(), "batch/single")
			b.ReportMetric(float64(calls)/msgs, "batch-calls/msg")
			b.ReportMetric(msgs/float64(hcalls), "msgs/batch")
		})
	}
}

// A full batch is sent at once, without waiting out its window.
func TestBatchFullSendsAtOnce(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 8)
			begun := time.Now()
			var mu sync.Mutex
			var at []time.Duration
			h, err := Batch(func(_ context.Context, msgs []*Message) error {
				mu.Lock()
				at = append(at, time.Since(begun))
				mu.Unlock()
				require.Len(t, msgs, 4)
				return nil
			}, 4, 5*time.Minute)
			require.NoError(t, err)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(8), WithWaitTime(time.Second))...)
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []time.Duration{0, 0}, at, "both batches full at once, neither waited for its window")
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, st.Body)
			}
		})
	})
}

// With a window of 0 a batch is due as soon as its first message joined;
// it takes whatever joins before it is sent, never more than its size,
// and every message is handled once.
func TestBatchWindowZero(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 30)
			rec := &batchRecorder{}
			h, err := Batch(func(_ context.Context, msgs []*Message) error {
				rec.record(msgs)
				time.Sleep(time.Second)
				return nil
			}, 4, 0)
			require.NoError(t, err)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(8), WithWaitTime(time.Second))...)
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			seen := map[string]int{}
			for _, call := range rec.snapshot() {
				require.NotEmpty(t, call)
				require.LessOrEqual(t, len(call), 4)
				for _, body := range call {
					seen[body]++
				}
			}
			require.Len(t, seen, 30)
			for body, n := range seen {
				require.Equal(t, 1, n, body)
			}
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, st.Body)
				require.Equal(t, 1, st.ReceiveCount, st.Body)
			}
		})
	})
}

// WithHandlerTimeout counts from each message's start (its joining): the
// first message's timeout ends the whole call.
func TestBatchHandlerTimeout(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 3)
			var mu sync.Mutex
			var took []time.Duration
			var causes []error
			h, err := Batch(func(ctx context.Context, msgs []*Message) error {
				if msgs[0].ReceiveCount > 1 {
					return nil
				}
				begun := time.Now()
				<-ctx.Done()
				mu.Lock()
				took = append(took, time.Since(begun))
				causes = append(causes, context.Cause(ctx))
				mu.Unlock()
				return ctx.Err()
			}, 4, 2*time.Second)
			require.NoError(t, err)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(4), WithWaitTime(time.Second),
				WithHandlerTimeout(5*time.Second), WithBackoff(func(int) time.Duration { return time.Second }))...)
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			require.NoError(t, stop())
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []time.Duration{3 * time.Second}, took, "three of four: sent after its 2 s window, cancelled 5 s after the messages started")
			require.ErrorIs(t, causes[0], context.DeadlineExceeded)
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, st.Body)
				require.Equal(t, 2, st.ReceiveCount, st.Body)
			}
		})
	})
}

// A message whose lease is lost while it gathers for a batch leaves it at
// once (its result is the loss; it is never deleted); the others wait for
// the window. The lost one comes back from SQS and joins the same batch.
func TestBatchLeaseLostWhileGathering(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 3)
			begun := time.Now()
			rec := &batchRecorder{}
			var mu sync.Mutex
			var failedAt []time.Duration
			h, err := Batch(func(_ context.Context, msgs []*Message) error {
				rec.record(msgs)
				return nil
			}, 10, time.Minute)
			require.NoError(t, err)
			// The first renewal, one call for the three at 10 s, refuses one.
			b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 1, sqstest.FaultReceiptHandleIsInvalid)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(10), WithWaitTime(time.Second),
				WithObserver(ObserverFunc(func(e Event) {
					if e.Kind == EventFailed {
						require.ErrorIs(t, e.Err, ErrLeaseLost)
						mu.Lock()
						failedAt = append(failedAt, time.Since(begun))
						mu.Unlock()
					}
				})))...)
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(2 * time.Minute)
			require.NoError(t, stop())
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, failedAt, 1)
			require.Less(t, failedAt[0], 11*time.Second, "left at the loss, not at the end of the window")
			calls := rec.snapshot()
			require.Len(t, calls, 1, "the lost one came back within the window: %v", calls)
			require.Len(t, calls[0], 3)
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, st.Body)
				require.LessOrEqual(t, st.ReceiveCount, 2, st.Body)
			}
		})
	})
}

// A batch still running when the shutdown budget runs out has its context
// cancelled with ErrShutdown; its messages are handed back at once.
func TestBatchShutdownCancelsRunningBatch(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 3)
			var cause error
			h, err := Batch(func(ctx context.Context, msgs []*Message) error {
				<-ctx.Done()
				cause = context.Cause(ctx)
				return ctx.Err()
			}, 3, time.Second)
			require.NoError(t, err)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(3), WithWaitTime(time.Second),
				WithShutdownTimeout(10*time.Second))...)
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Minute)
			begun := time.Now()
			require.NoError(t, stop())
			took := time.Since(begun)
			require.GreaterOrEqual(t, took, 10*time.Second, "the batch ran on for the shutdown budget")
			require.Less(t, took, 11*time.Second, "then its messages were handed back at once")
			require.ErrorIs(t, cause, ErrShutdown)
			for _, st := range b.srv.Messages(b.url) {
				require.False(t, st.Deleted, st.Body)
				require.False(t, st.InFlight, "handed back at once: %s", st.Body)
				require.Equal(t, 1, st.ReceiveCount, st.Body)
			}
		})
	})
}

// When every message's lease is lost the batch's context is cancelled;
// one loss alone does not (TestBatchLeases).
func TestBatchAllLeasesLost(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, nil)
			b.send(t, 3)
			var mu sync.Mutex
			var causes []error
			h, err := Batch(func(ctx context.Context, msgs []*Message) error {
				if msgs[0].ReceiveCount > 1 {
					return nil
				}
				b.srv.FailNextEntries("ChangeMessageVisibilityBatch", 3, sqstest.FaultReceiptHandleIsInvalid)
				<-ctx.Done()
				mu.Lock()
				causes = append(causes, context.Cause(ctx))
				mu.Unlock()
				return ctx.Err()
			}, 3, time.Second)
			require.NoError(t, err)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(3), WithWaitTime(time.Second))...)
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(2 * time.Minute)
			require.NoError(t, stop())
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, causes, 1)
			require.ErrorIs(t, causes[0], ErrLeaseLost)
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, st.Body)
				require.Equal(t, 2, st.ReceiveCount, "never deleted on the lost handle: %s", st.Body)
			}
		})
	})
}

// Issue 35 case 2: on a FIFO queue a Batch handler's batch cancelled by
// the shutdown fails its group's later messages that have joined and not
// run (earlierFailed); when direct, those wait in the batcher to be
// settled, and the run that failed them must hand them on, or the
// shutdown waits for them forever. The recipe of the issue: 3 groups of
// 4, batches of 2, concurrency 4, the batch handler waits for its
// context and returns ctx.Err(), Run cancelled 500 ms after the first
// batch started. Run returns at the shutdown timeout plus the release's
// coalescing, and every message is visible again.
func TestBatchFIFOShutdownReturns(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := fifoBundle(t)
			for g := range 3 {
				sendGroup(t, b, fmt.Sprint(g), bodies(fmt.Sprintf("%d/", g), 4)...)
			}
			first := make(chan struct{})
			var once sync.Once
			h, err := Batch(func(ctx context.Context, msgs []*Message) error {
				once.Do(func() { close(first) })
				<-ctx.Done()
				return ctx.Err()
			}, 2, 2*time.Second)
			require.NoError(t, err)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(4),
				WithShutdownTimeout(10*time.Second))...)
			require.NoError(t, err)
			stop := running(t, c)
			<-first
			time.Sleep(500 * time.Millisecond)
			begun := time.Now()
			require.NoError(t, stopWithin(t, stop, 30*time.Minute))
			require.LessOrEqual(t, time.Since(begun), 10*time.Second+2*coalesceWindow, "Run returned at the shutdown timeout")
			synctest.Wait()
			for _, st := range b.srv.Messages(b.url) {
				require.False(t, st.Deleted, st.Body)
				require.False(t, st.InFlight, "visible again at once: %s", st.Body)
			}
		})
	})
}

// The same path without a shutdown: a batch that fails on a FIFO queue
// fails the later messages of its group that have joined and not run
// (they hold handler slots while they wait); they are released at once
// and the group runs again, in order, from the failed message.
func TestBatchFIFOFailureReleasesLaterMembers(t *testing.T) {
	t.Parallel()
	eachBatchWay(t, func(t *testing.T, way ...Option) {
		synctest.Test(t, func(t *testing.T) {
			b := fifoBundle(t)
			sendGroup(t, b, "g", bodies("g/", 4)...)
			var mu sync.Mutex
			var calls [][]string
			h, err := Batch(func(ctx context.Context, msgs []*Message) error {
				mu.Lock()
				defer mu.Unlock()
				var got []string
				for _, m := range msgs {
					got = append(got, m.Body)
				}
				calls = append(calls, got)
				if len(calls) == 1 {
					return errors.New("the first batch fails")
				}
				return nil
			}, 2, 2*time.Second)
			require.NoError(t, err)
			c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(4),
				WithBackoff(func(int) time.Duration { return time.Second }))...)
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(2 * time.Minute)
			require.NoError(t, stopWithin(t, stop, time.Minute))
			for _, st := range b.srv.Messages(b.url) {
				require.True(t, st.Deleted, "%s deleted once the group ran again", st.Body)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []string{"g/00", "g/01"}, calls[0])
			var after []string
			for _, c := range calls[1:] {
				after = append(after, c...)
			}
			require.Equal(t, bodies("g/", 4), after, "the group ran again in order, from the failed message")
		})
	})
}

// Issue 35 case 1b: at the shutdown budget's end the shutdown cancels the
// held messages one at a time; the batch's call is cancelled with the
// member it watches, and the batch handler may return (and its members
// settle) before the shutdown reaches the others. Every member whose call
// the shutdown cancelled is then released at once (visibility 0) and is
// no failure (the breaker, at one failure, stays closed), whichever
// members the shutdown reached first. The test cancels the members as the
// shutdown would, in a chosen order, and lets the batch return between
// two cancels.
func TestBatchShutdownCancelReleasesEveryMember(t *testing.T) {
	t.Parallel()
	for _, order := range [][]int{{0}, {2, 0}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			t.Parallel()
			eachBatchWay(t, func(t *testing.T, way ...Option) {
				synctest.Test(t, func(t *testing.T) {
					b := setup(t, nil)
					b.send(t, 3)
					sent := make(chan []*Message, 1)
					h, err := Batch(func(ctx context.Context, msgs []*Message) error {
						sent <- msgs
						<-ctx.Done()
						return ctx.Err()
					}, 3, time.Second)
					require.NoError(t, err)
					c, err := New(b.client, b.url, h, append(way, WithVisibilityTimeout(30*time.Second), WithConcurrency(3), WithWaitTime(time.Second),
						WithBreaker(Breaker{Failures: 1}))...)
					require.NoError(t, err)
					stop := running(t, c)
					msgs := <-sent
					require.Len(t, msgs, 3)
					time.Sleep(10 * time.Second)
					for _, i := range order {
						synctest.Wait()
						msgs[i].Lease.abort(ErrShutdown) // what the shutdown's loop does to each held message
					}
					synctest.Wait()
					time.Sleep(time.Second) // the releases' calls
					for _, st := range b.srv.Messages(b.url) {
						require.False(t, st.Deleted, st.Body)
						require.NotEmpty(t, st.VisibilityChanges, st.Body)
						require.Equal(t, time.Duration(0), st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout, "released at once, not after a backoff: %s", st.Body)
					}
					_, _, opens := c.runOf().br.status()
					require.Zero(t, opens, "a member cut by the shutdown is no handler failure")
					require.NoError(t, stop())
				})
			})
		})
	}
}

// A member still gathering for a batch when the shutdown begins is
// handed back at once even while the breaker is open: the breaker's hold
// (a failure's least visibility, so that its probes try other messages)
// applies to failures before the shutdown, and no probe follows one.
func TestBatchShutdownWhileGatheringBreakerOpen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.send(t, 3)
		var mu sync.Mutex
		ran := map[string]bool{}
		h, err := Batch(func(_ context.Context, msgs []*Message) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				ran[m.ID] = true
			}
			return errors.New("downstream down")
		}, 2, 5*time.Minute)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(4),
			WithBreaker(Breaker{Failures: 2, Pause: 10 * time.Minute}))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute) // the full batch failed and opened the breaker; the third gathers
		require.Equal(t, "open", c.Health().Breaker)
		stopped := time.Now()
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, ran, 2)
		for _, st := range b.srv.Messages(b.url) {
			release := st.VisibilityChanges[len(st.VisibilityChanges)-1]
			if ran[st.ID] {
				continue
			}
			require.Zero(t, release.Timeout, "the gathering member is handed back at once")
			require.Equal(t, stopped, release.At.Truncate(time.Second), "at the shutdown")
			require.False(t, st.InFlight)
		}
	})
}

// A batch's members settle together, in one coalesced call, even when
// their leases are renewing as the batch returns: a member whose delete
// must wait for its lease's call in flight settles on a goroutine of its
// own, so the others do not wait behind it. Ten members, the batch
// returning at 11 s; with their renewal (at 10 s) answered at 12 s, every
// delete goes out in one call once it is answered. Before, the first
// member's delete waited for the renewal, then for its own coalesced
// call, and the other nine waited behind it for a second call.
func TestBatchMembersSettleTogether(t *testing.T) {
	t.Parallel()
	for _, renewing := range []bool{false, true} {
		t.Run(fmt.Sprintf("renewing=%v", renewing), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				b.send(t, 10)
				h, err := Batch(func(context.Context, []*Message) error {
					time.Sleep(11 * time.Second)
					return nil
				}, 10, time.Second)
				require.NoError(t, err)
				c, err := New(b.client, b.url, h, WithVisibilityTimeout(30*time.Second), WithConcurrency(10))
				require.NoError(t, err)
				deleted := 11 * time.Second // ten entries fill a call: no coalescing window
				if renewing {
					b.srv.DelayNext("ChangeMessageVisibilityBatch", 1, 2*time.Second)
					deleted = 12 * time.Second
				}
				start := time.Now()
				stop := running(t, c)
				time.Sleep(20 * time.Second)
				require.NoError(t, stop())
				require.Equal(t, 1, b.srv.CallCount("ChangeMessageVisibilityBatch"), "one renewal of the ten leases")
				require.Equal(t, 1, b.srv.CallCount("DeleteMessageBatch"), "the ten deletes in one call")
				for _, st := range b.srv.Messages(b.url) {
					require.True(t, st.Deleted)
					require.Equal(t, start.Add(deleted), st.DeletedAt, "at the batch's return, or once the renewal was answered")
				}
			})
		})
	}
}

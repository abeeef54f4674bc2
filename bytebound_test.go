package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// What the next receive may ask for, given the bytes held, the messages
// asked for and the estimate of a message's size.
func TestByteCap(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name             string
		max, held, est   int64
		want, asked      int
		fit              int
		starved, limited bool
	}{
		{"no bound", 0, 1 << 30, 1 << 20, 10, 50, 10, false, false},
		{"room for all", 100, 0, 5, 10, 0, 10, false, false},
		{"room for some", 100, 55, 10, 10, 0, 4, false, true},
		{"what the receives in flight may bring counts", 100, 30, 10, 10, 5, 2, false, true},
		{"none fits beside what is held: starved", 100, 95, 10, 10, 0, 0, true, true},
		{"none fits beside what is asked: starved", 100, 0, 10, 10, 10, 0, true, true},
		{"nothing held or asked: one message alone, however large", 100, 0, 1 << 20, 10, 0, 1, false, true},
		{"held beyond the bound (one large message): starved", 100, 5000, 10, 10, 0, 0, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := &byteBudget{max: tt.max, est: tt.est}
			b.held.Store(tt.held)
			require.Equal(t, tt.fit, b.capLocked(tt.want, tt.asked))
			require.Equal(t, tt.starved, b.starved.Load(), "starved")
			require.Equal(t, tt.limited, b.limited.Load(), "limited")
		})
	}
}

// The estimate: the queue's maximum until the first messages, then their
// largest; it jumps to a larger message and comes down toward the mean by
// a 64th of the gap a message.
func TestByteEstimate(t *testing.T) {
	t.Parallel()
	b := &byteBudget{max: 1 << 30, est: 1 << 20}
	b.receivedLocked(0, 0, 0)
	require.Equal(t, int64(1<<20), b.est, "an empty answer says nothing")
	b.receivedLocked(4, 4000, 1500)
	require.Equal(t, int64(1500), b.est, "the first answer's largest replaces the queue's maximum")
	require.Equal(t, int64(4000), b.held.Load())
	b.receivedLocked(1, 9000, 9000)
	require.Equal(t, int64(9000), b.est, "a larger message: at once")
	b.receivedLocked(8, 8000, 1000)
	require.Equal(t, int64(9000-(9000-1000)*8/64), b.est, "eight messages of 1,000: an eighth of the way down")
	require.Equal(t, int64(21000), b.peak)
	require.False(t, b.release(21000), "nobody waits")
	require.Equal(t, int64(0), b.held.Load())
	require.Equal(t, int64(21000), b.peak, "the peak stays")
}

func TestWithMaxBytesRange(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	for _, n := range []int64{0, -1, MaxBytesLimit + 1} {
		_, err := New(&instantSQS{}, "https://sqs.example/q", h, WithMaxBytes(n))
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, fmt.Sprintf("WithMaxBytes(%d)", n))
	}
	for _, n := range []int64{1, DefaultMaxBytes, MaxBytesLimit} {
		c, err := New(&instantSQS{}, "https://sqs.example/q", h, WithMaxBytes(n))
		require.NoError(t, err)
		require.Equal(t, n, c.Stats().Bytes.Max)
	}
	c, err := New(&instantSQS{}, "https://sqs.example/q", h)
	require.NoError(t, err)
	require.Equal(t, int64(DefaultMaxBytes), c.Stats().Bytes.Max)
}

// sizedSQS hands out n messages of body bytes each, body sizes[i] for
// message i when sizes is set, each answer after rtt, and counts the
// deletes. Its bodies are made when they are received, as an SDK's
// decoding makes them.
type sizedSQS struct {
	instantSQS
	n     int
	sizes func(i int) int
	mu    sync.Mutex
	given int
}

func (f *sizedSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	first := f.given
	k := min(int(in.MaxNumberOfMessages), f.n-first)
	f.given += k
	f.mu.Unlock()
	out := &sqs.ReceiveMessageOutput{}
	if k <= 0 {
		if !sleepCtx(ctx, time.Duration(in.WaitTimeSeconds)*time.Second) {
			return nil, ctx.Err()
		}
		return out, nil
	}
	for i := first; i < first+k; i++ {
		id := fmt.Sprint(i)
		out.Messages = append(out.Messages, types.Message{MessageId: aws.String(id), ReceiptHandle: aws.String("h" + id),
			Body: aws.String(strings.Repeat("x", f.sizes(i)))})
	}
	return out, nil
}

// byteRun is what runBytes saw.
type byteRun struct {
	handled        int
	maxHeld        int64 // the most bytes held at a sample
	maxRunning     int
	overBound      int // samples above the bound
	overBoundAlone int // of them, samples with one message held alone
	stats          Stats
}

// runBytes drains f with a Consumer of concurrency conc whose handlers
// take h, sampling Stats every millisecond of virtual time, in a bubble.
func runBytes(t *testing.T, f *sizedSQS, conc int, h time.Duration, opts ...Option) byteRun {
	t.Helper()
	var r byteRun
	synctest.Test(t, func(t *testing.T) {
		f.done = make(chan struct{})
		f.limit = int64(f.n)
		var handled atomic.Int64
		c, err := New(f, "https://sqs.example/q", HandlerFunc(func(ctx context.Context, m *Message) error {
			time.Sleep(h)
			handled.Add(1)
			return nil
		}), append([]Option{WithVisibilityTimeout(30 * time.Second), WithConcurrency(conc), WithShutdownTimeout(0)}, opts...)...)
		require.NoError(t, err)
		stop := running(t, c)
		for i := 0; handled.Load() < int64(f.n); i++ {
			require.Less(t, i, 1_000_000, "the drain does not end: a deadlock")
			time.Sleep(time.Millisecond)
			st := c.Stats()
			r.maxHeld, r.maxRunning = max(r.maxHeld, st.Bytes.Held), max(r.maxRunning, st.Running)
			if st.Bytes.Held > st.Bytes.Max {
				r.overBound++
				if fl := c.flowOf(); fl != nil {
					running, waiting, _, _ := fl.snapshot()
					if running+waiting+int(fl.settling.Load()) == 1 {
						r.overBoundAlone++ // one message held, settling ones included
					}
				}
			}
		}
		<-f.done // every delete answered
		require.NoError(t, stop())
		r.handled, r.stats = int(handled.Load()), c.Stats()
	})
	return r
}

// With messages of one size the Consumer never holds more bytes than the
// bound, which then bounds how many handlers run, and once the backlog is
// drained it holds none; without the bound it runs every slot.
func TestByteBoundHoldsTheConsumer(t *testing.T) {
	t.Parallel()
	const body = 10_000 // each message weighs body + 2 + 1 to 4 bytes of ID and handle
	sized := func(int) int { return body }
	bounded := runBytes(t, &sizedSQS{instantSQS: instantSQS{rtt: 10 * time.Millisecond}, n: 300, sizes: sized}, 50, 100*time.Millisecond, WithMaxBytes(100_000))
	free := runBytes(t, &sizedSQS{instantSQS: instantSQS{rtt: 10 * time.Millisecond}, n: 300, sizes: sized}, 50, 100*time.Millisecond)
	t.Logf("bound 100,000: at most %d bytes held, %d running; default bound: at most %d bytes, %d running", bounded.maxHeld, bounded.maxRunning, free.maxHeld, free.maxRunning)
	require.Equal(t, 300, bounded.handled)
	require.LessOrEqual(t, bounded.maxHeld, int64(100_000))
	require.LessOrEqual(t, bounded.stats.Bytes.Peak, int64(100_000), "the peak, exact")
	require.Zero(t, bounded.overBound)
	require.LessOrEqual(t, bounded.maxRunning, 9, "9 messages of 10 KB fit in 100,000 bytes")
	require.GreaterOrEqual(t, bounded.maxRunning, 8)
	require.True(t, bounded.stats.Bytes.Limited)
	require.Zero(t, bounded.stats.Bytes.Held, "nothing held once drained")
	require.Equal(t, int64(body), bounded.stats.Bytes.Estimate-bounded.stats.Bytes.Estimate%body, "the estimate follows the messages")

	require.Equal(t, 300, free.handled)
	require.Equal(t, 50, free.maxRunning, "every slot")
	require.False(t, free.stats.Bytes.Limited)
	require.Zero(t, free.stats.Bytes.Held)
}

// Messages larger than the bound, arriving in a receive sized for small
// ones, take the Consumer past the bound by what they exceed the estimate;
// then no receive goes out until they leave, and the messages around them
// go on: no deadlock.
func TestByteBoundOversizedMessage(t *testing.T) {
	t.Parallel()
	sizes := func(i int) int {
		if i == 25 || i == 26 {
			return 50_000 // two in a row, in one receive
		}
		return 100
	}
	r := runBytes(t, &sizedSQS{instantSQS: instantSQS{rtt: 10 * time.Millisecond}, n: 60, sizes: sizes}, 20, 5*time.Millisecond, WithMaxBytes(10_000))
	t.Logf("at most %d bytes held; %d samples above the bound, %d of them with one message held alone", r.maxHeld, r.overBound, r.overBoundAlone)
	require.Equal(t, 60, r.handled)
	require.Zero(t, r.stats.Bytes.Held)
	require.Greater(t, r.overBound, 0, "the large messages were held")
	// The two large ones came in one receive sized for small messages:
	// beside them, at most what the bound let be held or asked.
	require.LessOrEqual(t, r.maxHeld, int64(2*50_010+10_000))
}

// One message larger than the bound from the start: a receive of one goes
// out when nothing is held, so it is handled, and then the rest.
func TestByteBoundFirstMessageOversized(t *testing.T) {
	t.Parallel()
	sizes := func(i int) int {
		if i == 0 {
			return 5_000
		}
		return 10
	}
	r := runBytes(t, &sizedSQS{instantSQS: instantSQS{rtt: 10 * time.Millisecond}, n: 30, sizes: sizes}, 10, time.Millisecond, WithMaxBytes(1_000))
	require.Equal(t, 30, r.handled)
	require.Equal(t, r.overBound, r.overBoundAlone, "above the bound only with one message held alone")
	require.Zero(t, r.stats.Bytes.Held)
}

// errHeap is what heapRun fails with when the drain does not end.
var errHeap = errors.New("the drain did not end")

// BenchmarkHeapOfLargeMessages measures the heap while a Consumer drains a
// backlog of 1 MiB messages with handlers that return at once, with the
// default byte bound and without one (MaxBytesLimit: as before the bound),
// at concurrency 100, every call answered after 10 ms, in real time. Two
// SQS: fake (sizedSQS: no HTTP, each body made when received, as the SDK's
// decoding makes it, but none of the decoding's buffers) and sdk (sqstest
// in memory through the SDK's client and its JSON decoding, every body one
// shared string on the server's side, so the server's own share is an
// answer being encoded at a time). Reported: the heap in use at its
// highest (sampled every millisecond, less the heap before Run), and the
// bytes of messages held at their highest (Stats.Bytes.Peak). Run it
// alone:
//
//	go test -run '^$' -bench HeapOfLargeMessages -benchtime 1x .
func BenchmarkHeapOfLargeMessages(b *testing.B) {
	for _, sqsKind := range []string{"fake", "sdk"} {
		for _, bound := range []struct {
			name string
			n    int64
		}{{"bound=default", DefaultMaxBytes}, {"bound=none", MaxBytesLimit}} {
			b.Run(sqsKind+"/"+bound.name, func(b *testing.B) {
				for range b.N {
					peakHeap, peakHeld, err := heapRun(sqsKind, 400, 100, bound.n)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(peakHeap)/(1<<20), "heap-MiB")
					b.ReportMetric(float64(peakHeld)/(1<<20), "held-MiB")
				}
			})
		}
	}
}

// heapRun drains n messages of 1 MiB at concurrency conc with the byte
// bound, and returns the highest heap in use beyond the heap before Run,
// and the most bytes of messages held.
func heapRun(kind string, n, conc int, bound int64) (peakHeap, peakHeld int64, err error) {
	done := make(chan struct{})
	var client Client
	url := "https://sqs.example/q"
	switch kind {
	case "fake":
		f := &sizedSQS{instantSQS: instantSQS{rtt: 10 * time.Millisecond, limit: int64(n), done: done}, n: n,
			sizes: func(int) int { return 1 << 20 }}
		client = f
	default:
		srv := sqstest.NewServer()
		defer srv.Close()
		if url, err = srv.CreateQueue("q", nil); err != nil {
			return 0, 0, err
		}
		body := strings.Repeat("x", 1<<20)
		for range n {
			if _, err := srv.Send(url, body); err != nil {
				return 0, 0, err
			}
		}
		client = &latencyClient{Client: srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} }), rtt: 10 * time.Millisecond}
	}
	var deleted atomic.Int64
	c, err := New(client, url, HandlerFunc(func(context.Context, *Message) error { return nil }),
		WithVisibilityTimeout(30*time.Second), WithConcurrency(conc), WithShutdownTimeout(0), WithMaxBytes(bound),
		WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventDeleted && deleted.Add(1) == int64(n) && kind != "fake" {
				close(done)
			}
		})))
	if err != nil {
		return 0, 0, err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := int64(ms.HeapInuse)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	deadline := time.After(5 * time.Minute)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
sampling:
	for {
		select {
		case <-done:
			break sampling
		case <-deadline:
			err = errHeap
			break sampling
		case <-tick.C:
			runtime.ReadMemStats(&ms)
			peakHeap = max(peakHeap, int64(ms.HeapInuse)-base)
		}
	}
	cancel()
	if rerr := <-errc; err == nil {
		err = rerr
	}
	return peakHeap, c.Stats().Bytes.Peak, err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// The conditions of issue 36's measurement.
const (
	concurrency     = 100                    // well above what either R needs (R × latency)
	latency         = 100 * time.Millisecond // an admitted request, on average: 80 to 120 ms
	refusalLatency  = 5 * time.Millisecond   // a 429
	retryAfter      = time.Second            // the 429's Retry-After
	callLatency     = 10 * time.Millisecond  // every SQS call, after the server's answer
	visibility      = 30 * time.Second
	maxReceiveCount = 5
	window          = 5 * time.Second // the rate's window for the settling time
)

// mode is how the Consumer meets the downstream's refusals.
type mode int

const (
	unthrottled   mode = iota // a downstream without a limit: the baseline
	plainError                // the 429 returned as an ordinary error (DefaultBackoff)
	throttledOnly             // Throttled(err, 1 s), no adaptive limit
	adaptive                  // Throttled and WithAdaptiveConcurrency
)

func (m mode) String() string {
	switch m {
	case plainError:
		return "plain error"
	case throttledOnly:
		return "Throttled only"
	case adaptive:
		return "Throttled + WithAdaptiveConcurrency"
	}
	return "no limit downstream"
}

// config is one run: a backlog of rate × backlogFor messages, a downstream
// admitting rate requests a second.
type config struct {
	rate       float64 // R, requests a second
	mode       mode
	backlogFor time.Duration // the backlog is rate × backlogFor messages
	initial    int           // AdaptiveConcurrency.Initial; 0 for its default
}

// result is what a run measured, all in virtual time.
type result struct {
	messages  int
	settled   time.Duration // from the start until every later 5 s window's success rate stays within 10 % of R (-1: never)
	settled1s time.Duration // the same with 1 s windows
	limitLo   int           // Stats.ConcurrencyLimit's range once settled
	limitHi   int
	limitMean float64 // its mean once settled
	limitEnd  int
	dlq       int           // messages moved to the dead-letter queue
	receives  float64       // receives per message (every receive, of every message, over the messages)
	throttled int64         // handler calls answered 429
	falls     int64         // Stats.LimitFalls
	meanRate  float64       // successes a second, settled to the backlog's end
	elapsed   time.Duration // from the start to the last success
	handled   int
}

// bucket is the downstream's rate limit: a token bucket of rate a second
// and burst tokens.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	at     time.Time
}

func (b *bucket) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate <= 0 {
		return true
	}
	if !b.at.IsZero() {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	}
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// slowClient makes every call take callLatency more, after the server's
// answer.
type slowClient struct{ *sqs.Client }

func pause(ctx context.Context) {
	t := time.NewTimer(callLatency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (c slowClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, o...)
	pause(ctx)
	return out, err
}

func (c slowClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out, err := c.Client.DeleteMessageBatch(ctx, in, o...)
	pause(ctx)
	return out, err
}

func (c slowClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := c.Client.ChangeMessageVisibilityBatch(ctx, in, o...)
	pause(ctx)
	return out, err
}

var errTooMany = errors.New("429 Too Many Requests")

// simulate runs cfg in a synctest bubble of t.
func simulate(t *testing.T, cfg config) (res result) {
	synctest.Test(t, func(t *testing.T) { res = simulateIn(t, cfg) })
	return res
}

func simulateIn(t *testing.T, cfg config) result {
	srv := sqstest.NewServer()
	defer srv.Close()
	dlq, err := srv.CreateQueue("work-dlq", nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	attrs, err := raw.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	url, err := srv.CreateQueue("work", map[string]string{
		"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second)),
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, attrs.Attributes["QueueArn"], maxReceiveCount),
	})
	if err != nil {
		t.Fatal(err)
	}
	n := int(cfg.rate * cfg.backlogFor.Seconds())
	for i := range n {
		if _, err := srv.Send(url, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}

	down := &bucket{rate: cfg.rate, burst: math.Max(1, cfg.rate/10), tokens: math.Max(1, cfg.rate/10)}
	if cfg.mode == unthrottled {
		down.rate = 0
	}
	start := time.Now()
	var (
		mu        sync.Mutex
		successes []time.Duration // since start
		lastDone  time.Time
		handled   int
		throttled atomic.Int64
	)
	allDone := make(chan struct{})
	h := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		if !down.allow(time.Now()) {
			time.Sleep(refusalLatency)
			throttled.Add(1)
			if cfg.mode == plainError {
				return errTooMany
			}
			return sqsconsumer.Throttled(errTooMany, retryAfter)
		}
		time.Sleep(jitter(m.ID))
		mu.Lock()
		defer mu.Unlock()
		successes = append(successes, time.Since(start))
		lastDone = time.Now()
		handled++
		if handled == n {
			close(allDone)
		}
		return nil
	})
	opts := []sqsconsumer.Option{sqsconsumer.WithConcurrency(concurrency), sqsconsumer.WithShutdownTimeout(5 * time.Second)}
	if cfg.mode == adaptive {
		opts = append(opts, sqsconsumer.WithAdaptiveConcurrency(sqsconsumer.AdaptiveConcurrency{Initial: cfg.initial}))
	}
	c, err := sqsconsumer.New(slowClient{raw}, url, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()

	// Sample the limit every 100 ms until every message is handled or
	// moved, or the run has taken ten times what the backlog needs.
	type sample struct {
		at    time.Duration
		limit int
	}
	var limits []sample
	deadline := start.Add(10 * cfg.backlogFor)
	tick := time.NewTicker(100 * time.Millisecond)
loop:
	for time.Now().Before(deadline) {
		select {
		case <-allDone:
			break loop
		case <-tick.C:
			limits = append(limits, sample{time.Since(start), c.Stats().ConcurrencyLimit})
			if len(srv.Messages(dlq))+handledNow(&mu, &handled) >= n {
				break loop
			}
		}
	}
	tick.Stop()
	st := c.Stats()
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	res := result{messages: n, throttled: throttled.Load(), falls: st.LimitFalls, limitEnd: st.ConcurrencyLimit}
	mu.Lock()
	res.handled = handled
	res.elapsed = lastDone.Sub(start)
	succ := successes
	mu.Unlock()
	res.dlq = len(srv.Messages(dlq))
	receives := 0
	for _, m := range srv.Messages(url) {
		receives += len(m.Receives)
	}
	for _, m := range srv.Messages(dlq) {
		receives += m.ReceiveCount
	}
	res.receives = float64(receives) / float64(n)

	if *verbose {
		for w := time.Duration(0); w+window <= cfg.backlogFor; w += window {
			c := 0
			for _, s := range succ {
				if s >= w && s < w+window {
					c++
				}
			}
			lo, hi := math.MaxInt, 0
			for _, s := range limits {
				if s.at >= w && s.at < w+window {
					lo, hi = min(lo, s.limit), max(hi, s.limit)
				}
			}
			fmt.Printf("  %v: %.1f/s, limit %d-%d\n", w, float64(c)/window.Seconds(), lo, hi)
		}
	}
	if cfg.mode != unthrottled && len(succ) > 0 {
		end := cfg.backlogFor * 8 / 10
		res.settled = settledAfter(succ, cfg.rate, window, end)
		res.settled1s = settledAfter(succ, cfg.rate, time.Second, end)
		if res.settled >= 0 {
			c := 0
			for _, s := range succ {
				if s >= res.settled && s < end {
					c++
				}
			}
			res.meanRate = float64(c) / (end - res.settled).Seconds()
			res.limitLo, res.limitHi = math.MaxInt, 0
			sum, k := 0, 0
			for _, s := range limits {
				if s.at >= res.settled+window && s.at <= end {
					res.limitLo, res.limitHi = min(res.limitLo, s.limit), max(res.limitHi, s.limit)
					sum += s.limit
					k++
				}
			}
			if k > 0 {
				res.limitMean = float64(sum) / float64(k)
			}
		}
	}
	return res
}

// settledAfter is the settling time of the successes (times since the
// start) at rate: windows of w slid by 100 ms over [0, end) (end is before
// the backlog runs out: the downstream admits at most rate a second);
// settled from the start of the first window after which every window's
// success rate is within 10 % of rate. -1: never. The limit's range
// and mean (in simulateIn) skip the first 5 s after it, the ramp.
func settledAfter(succ []time.Duration, rate float64, w, end time.Duration) time.Duration {
	settled := time.Duration(-1)
	for from := time.Duration(0); from+w <= end; from += 100 * time.Millisecond {
		c := 0
		for _, s := range succ {
			if s >= from && s < from+w {
				c++
			}
		}
		switch ok := math.Abs(float64(c)/w.Seconds()-rate) <= 0.1*rate; {
		case !ok:
			settled = -1
		case settled < 0:
			settled = from
		}
	}
	return settled
}

// jitter is an admitted call's time for the message id: 80 to 120 ms,
// the same for a message in every run.
func jitter(id string) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(id))
	return latency*4/5 + time.Duration(h.Sum32()%uint32(latency*2/5/time.Microsecond))*time.Microsecond
}

func handledNow(mu *sync.Mutex, n *int) int {
	mu.Lock()
	defer mu.Unlock()
	return *n
}

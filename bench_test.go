package sqsconsumer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// BenchmarkPlan is the heartbeat's per-wakeup scheduling decision.
func BenchmarkPlan(b *testing.B) {
	now := time.Now()
	s := schedule{lease: 30 * time.Second, interval: 10 * time.Second, grace: 10 * time.Second,
		ceiling: now.Add(12 * time.Hour), deadline: now.Add(20 * time.Second), nextRenew: now}
	b.ReportAllocs()
	for b.Loop() {
		_ = plan(now, s)
	}
}

// BenchmarkRenewalLibrary is the library's own cost of one renewal: the
// request through the batch coalescer and the confirmation, against a
// client that answers at once. Many goroutines keep batches full, as
// thousands of leases do.
func BenchmarkRenewalLibrary(b *testing.B) {
	fake := &slowSQS{deadline: map[string]time.Time{}}
	calls := newCoalescedCalls(&fakeClient{s: fake}, "q", 0, nil)
	defer calls.close()
	cfg, _ := defaultSettingsWith(WithVisibilityTimeout(30 * time.Second)).leaseConfig(30 * time.Second)
	cfg.calls, cfg.events.queueURL = calls, "q"
	b.ReportAllocs()
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		now := time.Now()
		l := &newDelivery(types.Message{MessageId: aws.String("m"), ReceiptHandle: aws.String("h")}, now, now, &cfg).lease
		for pb.Next() {
			now := time.Now()
			if err := calls.changeVisibility(context.Background(), "h", 30); err != nil {
				b.Fatal(err)
			}
			l.confirmVisibility(now, 30*time.Second)
		}
	})
	b.ReportMetric(float64(fake.calls.Load())/float64(b.N), "calls/renewal")
}

// BenchmarkRenewalSDK adds the AWS SDK's serialization and signing and the
// in-memory sqstest server: the whole CPU cost of a batched renewal.
func BenchmarkRenewalSDK(b *testing.B) {
	srv := sqstest.NewServer()
	defer srv.Close()
	url, err := srv.CreateQueue("bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	client := srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	handles := make(chan string, 1000)
	for range 64 * 4 {
		if _, err := srv.Send(url, "x"); err != nil {
			b.Fatal(err)
		}
	}
	for len(handles) < 64*4 {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 3600})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range out.Messages {
			handles <- *m.ReceiptHandle
		}
	}
	calls := newCoalescedCalls(client, url, 0, nil)
	defer calls.close()
	srv.ResetCalls()
	b.ReportAllocs()
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		h := <-handles
		for pb.Next() {
			if err := calls.changeVisibility(context.Background(), h, 3600); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(srv.CallCount("ChangeMessageVisibilityBatch"))/float64(b.N), "calls/renewal")
}

// instantSQS hands out messages as fast as they are asked for and accepts
// every delete: what is left is the Consumer's own cost per message. Its
// messages are made before the timer starts (prepare), so that their
// allocations, which an SDK's decoding would make, are not counted as the
// Consumer's. With
// rtt set, every call answers after rtt (a timer, no socket), as a network
// round trip would, so the Consumer runs with the receives, deletes and
// read-ahead a real round trip makes it keep in flight.
type instantSQS struct {
	Client
	rtt     time.Duration
	next    atomic.Int64
	limit   int64
	deleted atomic.Int64
	done    chan struct{}
	once    sync.Once
	msgs    []types.Message // prepared: message i-1 is the i-th handed out
}

// prepare makes the limit messages the fake hands out.
func (f *instantSQS) prepare() {
	attrs := map[string]string{"ApproximateReceiveCount": "1"} // read only
	f.msgs = make([]types.Message, f.limit)
	for i := range f.msgs {
		id := strconv.Itoa(i + 1)
		f.msgs[i] = types.Message{MessageId: aws.String(id), ReceiptHandle: aws.String("h" + id), Body: aws.String("x"), Attributes: attrs}
	}
}

// wait is the call's round trip: rtt, or until ctx ends.
func (f *instantSQS) wait(ctx context.Context) error {
	if f.rtt > 0 && !sleepCtx(ctx, f.rtt) {
		return ctx.Err()
	}
	return nil
}

func (f *instantSQS) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{}, nil
}

func (f *instantSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	out := &sqs.ReceiveMessageOutput{}
	n := int64(in.MaxNumberOfMessages)
	i := f.next.Add(n) - n // the first taken
	if i >= f.limit {
		// An empty long poll: it waits out its time.
		if !sleepCtx(ctx, time.Duration(in.WaitTimeSeconds)*time.Second) {
			return nil, ctx.Err()
		}
		return out, nil
	}
	out.Messages = f.msgs[i:min(i+n, f.limit):min(i+n, f.limit)]
	return out, nil
}

func (f *instantSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	if f.deleted.Add(int64(len(in.Entries))) >= f.limit {
		f.once.Do(func() { close(f.done) })
	}
	return out, nil
}

// BenchmarkConsumerOverhead is the library's cost per message with a no-op
// handler and an SQS that costs nothing: leases, goroutines, batching,
// observers. At rtt=0 the SQS answers at once (4 pollers); at rtt=10ms
// every call takes 10 ms, as from an ECS task, and the Consumer chooses
// its pollers and read-ahead itself. ns/op is wall time per message on
// all the machine's cores; cpu-µs/msg (Unix) is the process's CPU time per
// message, the fake's small share included: at a round trip the wall time
// is the pipeline's pace, and the CPU is what the library costs.
func BenchmarkConsumerOverhead(b *testing.B) {
	for _, rtt := range []time.Duration{0, 10 * time.Millisecond} {
		for _, conc := range []int{40, 200} {
			b.Run(fmt.Sprintf("rtt=%v/c=%d", rtt, conc), func(b *testing.B) {
				f := &instantSQS{rtt: rtt, limit: int64(b.N), done: make(chan struct{})}
				f.prepare()
				opts := []Option{WithVisibilityTimeout(30 * time.Second), WithConcurrency(conc),
					WithShutdownTimeout(0)} // the last long poll, which Run waits for, lasts 1 s
				if rtt == 0 {
					opts = append(opts, WithPollers(4))
				}
				c, err := New(f, "https://sqs.example/q", HandlerFunc(func(context.Context, *Message) error { return nil }), opts...)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				go func() { errc <- c.Run(ctx) }()
				<-f.done
				cpu := processCPU() - cpu0
				b.StopTimer()
				cancel()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				if cpu > 0 {
					b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/msg")
				}
			})
		}
	}
}

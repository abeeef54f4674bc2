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
)

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

func (f *instantSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
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

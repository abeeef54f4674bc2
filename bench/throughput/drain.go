package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
)

// benchVisibility is the visibility timeout both contenders receive with.
const benchVisibility = 30 * time.Second

// finishLine records when the n-th message was deleted and then cancels
// the drain. It also counts redeliveries: messages received with an
// ApproximateReceiveCount above 1, which a clean drain never sees.
type finishLine struct {
	start       time.Time
	redelivered atomic.Int64
	firstSeen   atomic.Int64 // ms from start to the first receive of a redelivered message

	n        int64
	done     atomic.Int64
	once     sync.Once
	at       time.Time // set once, before stop is called
	stop     context.CancelFunc
	reached  chan struct{}
	halfOnce sync.Once
	halfway  func() // called once, when half the n messages are deleted (nil: nothing)
	warmOnce sync.Once
	warmAt   int64  // the deletes after which warm is called
	warm     func() // called once, when warmAt messages are deleted (nil: nothing)
}

// newFinishLine is a line for n deletes that calls stop when they are in,
// and the halfway hook of ctx (withHalfway), if any, when half are.
func newFinishLine(ctx context.Context, n int, stop context.CancelFunc) *finishLine {
	f := &finishLine{start: time.Now(), n: int64(n), stop: stop, reached: make(chan struct{})}
	f.halfway, _ = ctx.Value(halfwayKey{}).(func())
	if w, ok := ctx.Value(warmKey{}).(warmMark); ok {
		f.warmAt, f.warm = int64(w.at), w.f
	}
	return f
}

type halfwayKey struct{}

type warmKey struct{}

// warmMark is withWarm's hook.
type warmMark struct {
	at int
	f  func()
}

// withWarm gives the drain run with ctx a hook its finish line calls once
// at messages are deleted: measureDrain reads the server's counters there,
// so that the connections of the steady state, past the first at messages,
// can be told apart.
func withWarm(ctx context.Context, at int, f func()) context.Context {
	return context.WithValue(ctx, warmKey{}, warmMark{at: at, f: f})
}

// withHalfway gives the drain run with ctx a hook its finish line calls
// once half its messages are deleted: measureDrain reads the server's
// counters there, so that the second half's connections, past the cold
// start, can be told apart.
func withHalfway(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, halfwayKey{}, f)
}

// received notes a message's system attributes.
func (f *finishLine) received(attrs map[string]string) {
	if count, _ := strconv.Atoi(attrs[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); count <= 1 {
		return
	}
	if f.redelivered.Add(1) == 1 {
		ms, _ := strconv.ParseInt(attrs[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], 10, 64)
		f.firstSeen.Store(ms - f.start.UnixMilli())
	}
}

// add counts k deletes.
func (f *finishLine) add(k int) {
	done := f.done.Add(int64(k))
	if f.warm != nil && done >= f.warmAt {
		f.warmOnce.Do(f.warm)
	}
	if f.halfway != nil && 2*done >= f.n {
		f.halfOnce.Do(f.halfway)
	}
	if done >= f.n {
		f.once.Do(func() {
			f.at = time.Now()
			close(f.reached)
			f.stop()
		})
	}
}

// result reports when the line was reached, or an error if it was not.
func (f *finishLine) result() (drained, error) {
	select {
	case <-f.reached:
	default:
		return drained{}, fmt.Errorf("stopped after %d of %d messages", f.done.Load(), f.n)
	}
	d := drained{end: f.at, redelivered: int(f.redelivered.Load())}
	if d.redelivered > 0 {
		d.note = fmt.Sprintf("%d messages delivered twice; the first had first been received %v after the drain started",
			d.redelivered, time.Duration(f.firstSeen.Load())*time.Millisecond)
	}
	return d, nil
}

// drained is how one drain went.
type drained struct {
	end         time.Time // the last delete confirmed
	redelivered int
	note        string
	stats       *sqsconsumer.Stats // a Consumer's, when it ended (nil for others)
}

// contender drains a queue of n messages and reports when the last delete
// was confirmed.
type contender struct {
	name  string
	drain func(ctx context.Context, client *sqs.Client, url string, n int, cfg benchConfig) (drained, error)
}

func rawLoop() contender { return contender{name: "raw", drain: drainRaw} }

// drainRaw is the baseline: receive up to 10, delete them in one batch,
// repeat, on b's pollers, with no handler and no lease.
func drainRaw(ctx context.Context, client *sqs.Client, url string, n int, cfg benchConfig) (drained, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	line := newFinishLine(ctx, n, cancel)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Pollers)
	for range cfg.Pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl:                    aws.String(url),
					MaxNumberOfMessages:         10,
					WaitTimeSeconds:             int32(cfg.Wait / time.Second),
					VisibilityTimeout:           int32(benchVisibility / time.Second),
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
					MessageAttributeNames:       []string{"All"},
				})
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("ReceiveMessage: %w", err)
					cancel()
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					line.received(m.Attributes)
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
				}
				del, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err == nil && len(del.Failed) > 0 {
					err = fmt.Errorf("%d entries failed, e.g. %s", len(del.Failed), aws.ToString(del.Failed[0].Message))
				}
				if err != nil {
					errs <- fmt.Errorf("DeleteMessageBatch: %w", err)
					cancel()
					return
				}
				line.add(len(del.Successful))
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return drained{}, err
	}
	return line.result()
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// consumerLoop is a Consumer with the given concurrency.
func consumerLoop(concurrency int) contender {
	return contender{
		name: fmt.Sprintf("consumer c=%d", concurrency),
		drain: func(ctx context.Context, client *sqs.Client, url string, n int, cfg benchConfig) (drained, error) {
			return drainConsumer(ctx, client, url, n, cfg, concurrency)
		},
	}
}

// drainConsumer runs a Consumer with a no-op handler until n messages are
// deleted, then shuts it down.
func drainConsumer(ctx context.Context, client *sqs.Client, url string, n int, cfg benchConfig, concurrency int) (drained, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	line := newFinishLine(ctx, n, cancel)
	var failed atomic.Int64
	c, err := sqsconsumer.New(client, url,
		sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil }),
		sqsconsumer.WithVisibilityTimeout(benchVisibility),
		sqsconsumer.WithConcurrency(concurrency),
		sqsconsumer.WithPollers(cfg.Pollers),
		sqsconsumer.WithWaitTime(cfg.Wait),
		sqsconsumer.WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
			switch e.Kind {
			case sqsconsumer.EventReceived:
				line.received(e.Message.Attributes)
			case sqsconsumer.EventDeleted:
				line.add(1)
			case sqsconsumer.EventFailed, sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired:
				failed.Add(1)
			}
		})),
	)
	if err != nil {
		return drained{}, err
	}
	if err := c.Run(ctx); err != nil {
		return drained{}, err
	}
	if f := failed.Load(); f > 0 {
		return drained{}, fmt.Errorf("%d messages failed or lost their lease", f)
	}
	return line.result()
}

// sendBatches sends n messages to url, ten per SendMessageBatch call, from
// a few goroutines.
func sendBatches(ctx context.Context, c *sqs.Client, url string, n int) error {
	const senders = 8
	batches := make(chan int)
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := range batches {
				end := min(start+10, n)
				entries := make([]types.SendMessageBatchRequestEntry, 0, end-start)
				for i := start; i < end; i++ {
					entries = append(entries, types.SendMessageBatchRequestEntry{
						Id:          aws.String(strconv.Itoa(i - start)),
						MessageBody: aws.String("message " + strconv.Itoa(i)),
					})
				}
				out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("%d entries failed, e.g. %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
				}
				if err != nil {
					errs <- fmt.Errorf("SendMessageBatch: %w", err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for start := 0; start < n; start += 10 {
		select {
		case batches <- start:
		case err = <-errs:
			break feed
		}
	}
	close(batches)
	wg.Wait()
	close(errs)
	return errors.Join(append(collect(errs), err)...)
}

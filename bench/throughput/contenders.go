package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"gocloud.dev/pubsub/awssnssqs"

	"github.com/sqskit/sqsconsumer"
)

// workload is what a matrix row (or the overrun case) asks of every
// contender.
type workload struct {
	handler     time.Duration // how long each handler takes; 0 returns at once
	concurrency int           // handlers that may run at once
	visibility  time.Duration // the lease: visibility timeout of the queue and of each receive
	wait        time.Duration // long-poll wait of each ReceiveMessage
	pollers     int           // the raw loop's receiving goroutines
}

// tally counts the handler runs of each message (by body: every message of
// a queue has its own), so runs beyond the first are duplicates.
type tally struct {
	mu   sync.Mutex
	runs map[string]int
}

func newTally() *tally { return &tally{runs: map[string]int{}} }

// started notes that a handler began on the message with this body.
func (t *tally) started(body string) {
	t.mu.Lock()
	t.runs[body]++
	t.mu.Unlock()
}

// counts reports the handler runs, the distinct messages they were for,
// and the runs beyond each message's first.
func (t *tally) counts() (runs, messages, duplicates int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.runs {
		runs += n
	}
	return runs, len(t.runs), runs - len(t.runs)
}

// work is the handler of every contender: it takes d, or less if ctx ends
// first (then it fails and the message is not deleted).
func work(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	start := time.Now()
	err := pause(ctx, d)
	handlerTime.Add(int64(time.Since(start)))
	return err
}

// handlerTime is the wall time handler calls took in the measurement under
// way (measureRow resets it): over concurrency x elapsed, the share of the
// time the handler slots were busy. A client whose slots never wait for a
// receive keeps it near 1, whatever the handler's timer really takes.
var handlerTime atomic.Int64

// run is one contender working on a queue until ctx ends. It reports every
// confirmed delete to line (whose stop ends ctx once all are in) and every
// handler start to runs. It returns when everything it started has
// stopped, with the time its last delete was confirmed if line cannot know
// it (zero otherwise).
type runFunc func(ctx context.Context, client *sqs.Client, url string, w workload, line *finishLine, runs *tally) (time.Time, error)

// rowContender is a contender of the matrix and of the overrun case.
type rowContender struct {
	name string
	run  runFunc
	raw  bool // the raw loop: the reference of the ratios, not in the overrun case
}

// contenderNames maps the -contenders names to the contenders.
var contenderNames = map[string]rowContender{
	"raw":         {name: "raw", run: runRaw, raw: true},
	"sqsconsumer": {name: "sqsconsumer", run: runConsumer},
	"gocdk":       {name: "Go CDK", run: runGoCDK},
	"naive":       {name: "naive", run: runNaive},
}

// rowContenders is the matrix's contenders in report order, those of
// names only unless names is empty.
func rowContenders(names []string) []rowContender {
	var out []rowContender
	for _, n := range []string{"raw", "sqsconsumer", "gocdk", "naive"} {
		if len(names) == 0 || slices.Contains(names, n) {
			out = append(out, contenderNames[n])
		}
	}
	return out
}

// runRaw is the reference of every row: w.pollers goroutines, each
// receiving up to 10 messages, running their handlers (at most
// w.concurrency at once over all pollers, one goroutine each; inline when
// the handler does nothing), then deleting them in one DeleteMessageBatch.
// No lease, no renewal, no bookkeeping: the least a client can do per
// message with this handler.
func runRaw(ctx context.Context, client *sqs.Client, url string, w workload, line *finishLine, runs *tally) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slots := make(chan struct{}, w.concurrency)
	errs := make(chan error, w.pollers)
	var wg sync.WaitGroup
	for range w.pollers {
		wg.Go(func() {
			fail := func(err error) {
				if ctx.Err() == nil {
					errs <- err
					cancel()
				}
			}
			for ctx.Err() == nil {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl:                    aws.String(url),
					MaxNumberOfMessages:         10,
					WaitTimeSeconds:             int32(w.wait / time.Second),
					VisibilityTimeout:           int32(w.visibility / time.Second),
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
					MessageAttributeNames:       []string{"All"},
				})
				if err != nil {
					fail(fmt.Errorf("ReceiveMessage: %w", err))
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				var handlers sync.WaitGroup
				var failed atomic.Bool
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					runs.started(aws.ToString(m.Body))
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
					if w.handler <= 0 {
						continue
					}
					select {
					case slots <- struct{}{}:
					case <-ctx.Done():
						failed.Store(true)
					}
					if failed.Load() {
						break
					}
					handlers.Go(func() {
						defer func() { <-slots }()
						if work(ctx, w.handler) != nil {
							failed.Store(true) // cut short by the end of the run
						}
					})
				}
				handlers.Wait()
				if failed.Load() {
					return
				}
				del, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err == nil && len(del.Failed) > 0 {
					err = fmt.Errorf("%d entries failed, e.g. %s", len(del.Failed), aws.ToString(del.Failed[0].Message))
				}
				if err != nil {
					fail(fmt.Errorf("DeleteMessageBatch: %w", err))
					return
				}
				line.add(len(del.Successful))
			}
		})
	}
	wg.Wait()
	close(errs)
	return time.Time{}, errors.Join(collect(errs)...)
}

// runConsumer is an sqsconsumer.Consumer as a user would configure it for
// the workload: the concurrency, the lease, the long poll; the pollers are
// the default for that concurrency.
func runConsumer(ctx context.Context, client *sqs.Client, url string, w workload, line *finishLine, runs *tally) (time.Time, error) {
	var failed atomic.Int64
	c, err := sqsconsumer.New(client, url,
		sqsconsumer.HandlerFunc(func(hctx context.Context, m *sqsconsumer.Message) error {
			runs.started(m.Body)
			return work(hctx, w.handler)
		}),
		sqsconsumer.WithVisibilityTimeout(w.visibility),
		sqsconsumer.WithConcurrency(w.concurrency),
		sqsconsumer.WithWaitTime(w.wait),
		// When the run ends, handlers still running (only in the overrun
		// case, whose window may close on them) stop at once.
		sqsconsumer.WithShutdownTimeout(0),
		sqsconsumer.WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
			switch e.Kind {
			case sqsconsumer.EventDeleted:
				line.add(1)
			case sqsconsumer.EventFailed, sqsconsumer.EventLeaseLost, sqsconsumer.EventLeaseExpired:
				if ctx.Err() == nil { // not a handler stopped by the end of the run
					failed.Add(1)
				}
			}
		})),
	)
	if err != nil {
		return time.Time{}, err
	}
	if err := c.Run(ctx); err != nil {
		return time.Time{}, err
	}
	if f := failed.Load(); f > 0 {
		return time.Time{}, fmt.Errorf("%d messages failed or lost their lease", f)
	}
	return time.Time{}, nil
}

// runGoCDK is the Go CDK's SQS subscription (gocloud.dev/pubsub/awssnssqs)
// used as its documentation shows: one loop calling Receive, a handler
// goroutine per message, a semaphore of w.concurrency, Ack when the handler
// is done. The Go CDK receives and acks in batches of its own making and
// never extends a message's visibility; it asks for the queue's visibility
// timeout, which the bench sets to w.visibility. Acks are sent
// asynchronously, so the drain ends when Shutdown has flushed them.
func runGoCDK(ctx context.Context, client *sqs.Client, url string, w workload, line *finishLine, runs *tally) (time.Time, error) {
	sub := awssnssqs.OpenSubscriptionV2(context.Background(), client, url, &awssnssqs.SubscriptionOptions{
		Raw:      true, // sent straight to SQS, not through SNS
		WaitTime: w.wait,
		// The bench nacks only messages it drops when a run ends; their
		// visibility may have run out already, so nacking them must not
		// call SQS (ChangeMessageVisibility would fail on their handles).
		NackLazy: true,
	})
	sem := make(chan struct{}, w.concurrency)
	var recvErr error
receive:
	for {
		msg, err := sub.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				recvErr = fmt.Errorf("receiving with the Go CDK: %w", err)
			}
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			msg.Nack() // the run is over (the Go CDK logs a message neither acked nor nacked)
			break receive
		}
		go func() {
			defer func() { <-sem }()
			runs.started(string(msg.Body))
			if work(ctx, w.handler) != nil {
				msg.Nack() // cut short by the end of the run
				return
			}
			msg.Ack()
			line.add(1)
		}()
	}
	for range w.concurrency { // every handler has returned
		sem <- struct{}{}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := sub.Shutdown(sctx) // sends the acks still pending
	return time.Now(), errors.Join(recvErr, err)
}

// runNaive is the loop one writes first with the SDK: w.concurrency
// goroutines, each receiving up to 10 messages, handling them one after
// the other and deleting each (DeleteMessage) once handled. No lease
// renewal: a message whose turn comes after its visibility timeout is
// received again by another goroutine.
func runNaive(ctx context.Context, client *sqs.Client, url string, w workload, line *finishLine, runs *tally) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, w.concurrency)
	var wg sync.WaitGroup
	for range w.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				if ctx.Err() == nil {
					errs <- err
					cancel()
				}
			}
			for ctx.Err() == nil {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl:                    aws.String(url),
					MaxNumberOfMessages:         10,
					WaitTimeSeconds:             int32(w.wait / time.Second),
					VisibilityTimeout:           int32(w.visibility / time.Second),
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
					MessageAttributeNames:       []string{"All"},
				})
				if err != nil {
					fail(fmt.Errorf("ReceiveMessage: %w", err))
					return
				}
				for _, m := range out.Messages {
					runs.started(aws.ToString(m.Body))
					if work(ctx, w.handler) != nil {
						return
					}
					if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						fail(fmt.Errorf("DeleteMessage: %w", err))
						return
					}
					line.add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return time.Time{}, errors.Join(collect(errs)...)
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// naiveResult is what the plain receive/delete loop did with the jobs.
type naiveResult struct {
	t       *tally
	elapsed time.Duration // until every job had run once (or the run gave up)
	calls   map[string]int
	states  []sqstest.MessageState // the server's view of every message at the end
}

// runNaive consumes q the way a first SQS worker often does:
// cfg.Concurrency goroutines, each receiving one message with the same
// visibility timeout the Consumer uses, running the handler, and deleting
// the message with the receipt handle that receive returned. Nothing renews
// the visibility while the handler runs, so a handler that outlives it
// leaves the message visible, another goroutine receives it and runs the
// handler again, and the first one's delete comes with a superseded
// receipt handle.
//
// Because a message whose handler always outlives the visibility timeout
// may never be deleted this way, runNaive stops when every job has run to
// completion at least once (or ctx ends), cancelling the handlers still
// running; their time counts as wasted. t records the run; it must be
// newTally of the message IDs in q.
func runNaive(ctx context.Context, q *queue, cfg runConfig, run string, t *tally) (*naiveResult, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-t.allRan:
		case <-ctx.Done():
		}
		stop()
	}()

	h := t.handler(run)
	visibility := int32(cfg.Lease / time.Second)
	start := time.Now()
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		loopErr error
	)
	for range cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				out, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl:            aws.String(q.url),
					MaxNumberOfMessages: 1,
					WaitTimeSeconds:     20,
					VisibilityTimeout:   visibility,
				})
				if err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { loopErr = fmt.Errorf("plain loop: ReceiveMessage: %w", err) })
						stop()
					}
					return
				}
				for _, m := range out.Messages {
					msg := &sqsconsumer.Message{ID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)}
					if h(ctx, msg) != nil {
						continue // cut off by the stop, or not ours: leave it
					}
					// A plain loop deletes with the handle it received. After a
					// redelivery that handle is superseded, and SQS may not
					// delete the message (sqstest does not).
					_, _ = q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{
						QueueUrl:      aws.String(q.url),
						ReceiptHandle: m.ReceiptHandle,
					})
				}
			}
		})
	}
	wg.Wait()
	if loopErr != nil {
		return nil, loopErr
	}

	res := &naiveResult{t: t, elapsed: time.Since(start), calls: q.calls()}
	t.mu.Lock()
	if !t.lastRan.IsZero() {
		res.elapsed = t.lastRan.Sub(start)
	}
	t.mu.Unlock()
	if q.states != nil {
		res.states = q.states()
	}
	return res, nil
}

// redelivered is how many messages the server delivered more than once.
func (n *naiveResult) redelivered() int {
	c := 0
	for _, st := range n.states {
		if st.ReceiveCount > 1 {
			c++
		}
	}
	return c
}

// undeleted is how many messages were still in the queue at the end,
// although every job had run.
func (n *naiveResult) undeleted() int {
	c := 0
	for _, st := range n.states {
		if !st.Deleted {
			c++
		}
	}
	return c
}

// totalCalls is the number of API requests, all actions.
func totalCalls(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}

// compare writes the Consumer's and the plain loop's figures side by side.
// Both ran on in-memory queues, so every figure is known.
func compare(out io.Writer, r *result, n *naiveResult) {
	lease := r.cfg.Lease
	fmt.Fprintf(out, "\nthe same %d jobs through a plain receive/delete loop (%d goroutines, visibility timeout %v, no heartbeat)\n\n",
		len(r.ids), r.cfg.Concurrency, lease)
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	row := func(name string, c, p any, what string) {
		fmt.Fprintf(w, "  %s\t%v\t%v\t%s\n", name, c, p, what)
	}
	row("", "Consumer", "plain loop", "")
	row("duplicates", r.duplicates(), n.t.duplicates(), "handler calls beyond one per message")
	row("wasted handler time", r.t.wasted().Round(100*time.Millisecond), n.t.wasted().Round(100*time.Millisecond),
		"handler time beyond one complete run of each job")
	row("redelivered", r.redelivered, n.redelivered(), "messages SQS delivered more than once")
	row("left in the queue", len(r.ids)-r.processed(), n.undeleted(), "not deleted when every job had run, so they run again (superseded receipt handles)")
	row("API calls", totalCalls(r.calls), totalCalls(n.calls), "requests to SQS, all actions")
	row("elapsed", r.elapsed.Round(time.Millisecond), n.elapsed.Round(time.Millisecond), "until every job had run")
	w.Flush()
	for line := range strings.Lines(buf.String()) {
		fmt.Fprintln(out, strings.TrimRight(line, " \n"))
	}
}

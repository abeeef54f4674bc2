package sqsconsumer

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/internal/fifo"
)

// poll is one poller, a lane of the Consumer's calls: it makes the
// coalesced call the flow hands it (a job), or sends the receive the flow
// says is due and dispatches what comes back; with neither it parks until
// the flow kicks it. It returns once Run has stopped the workers (quit).
func (c *Consumer) poll() {
	defer c.pollers.Done()
	for {
		job, n, sent := c.fl.take()
		if job != nil {
			job()
			continue
		}
		if n == 0 {
			select {
			case <-c.fl.kicked():
				c.fl.unpark()
				continue
			case <-c.quit:
				c.fl.unpark()
				return
			}
		}
		err := c.receive(n, sent)
		if err == nil {
			continue
		}
		if c.pollCtx.Err() != nil {
			return
		}
		if c.shuttingDown() && errors.Is(err, context.Canceled) {
			c.fl.abandoned(n, sent) // an idle poll the shutdown cancelled
			return
		}
		same, backoff := c.fl.failed(n, sent, err, persistentClientError(err))
		c.fl.handOut()
		if classify(err) == kindPermanent {
			c.fail(err, "sqsconsumer: permanent receive error; shutting down")
			return
		}
		if same >= maxSameReceiveFailures {
			c.fail(fmt.Errorf("failed %d times in a row with the same client error: %w", same, err), "sqsconsumer: every receive fails the same way; shutting down")
			return
		}
		c.log(slog.LevelWarn, "sqsconsumer: receive failed; backing off", "error", err, "backoff", backoff.String())
	}
}

// maxSameReceiveFailures is how many receives in a row may fail with the
// same client error (a 4xx answer other than throttling, such as an answer
// the SDK cannot decode) before Run gives up and returns it: about a
// minute of backoff. Throttling, server errors and network failures are
// retried for as long as Run runs.
const maxSameReceiveFailures = 10

// fail records a permanent receive error and ends Run.
func (c *Consumer) fail(err error, msg string) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = fmt.Errorf("sqsconsumer: ReceiveMessage: %w", err)
	}
	c.mu.Unlock()
	c.log(slog.LevelError, msg, "error", err)
	c.fatalStop()
}

// receive sends one ReceiveMessage for n messages, taken from the flow at
// sent (the hand-over estimate may not count from later), and dispatches
// the answer. Its context is not Run's: a receive is never cancelled by a
// shutdown, only by the hard stop after it.
func (c *Consumer) receive(n int, sent time.Time) error {
	cfg := c.leaseFor()
	ctx, cancel := context.WithTimeoutCause(c.pollCtx, c.pollWait+receiveCallTimeout, errReceiveTimeout)
	if c.s.cancelIdlePolls {
		var done func()
		ctx, done = c.polls.watch(ctx, sent)
		defer done()
	}
	out, err := c.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.queueURL),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(c.pollWait / time.Second),
		VisibilityTimeout:           int32(cfg.lease / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}, skipChecksum)
	cancel()
	arrived := time.Now()
	if err != nil {
		msg := err.Error()
		c.progress.recvErr.Store(&msg)
		return err // the caller tells the flow
	}
	stamp(&c.progress.receive)
	c.progress.answer()
	c.progress.recvErr.Store(nil)
	msgs := out.Messages
	if len(msgs) > n {
		// SQS never does this; a misbehaving endpoint must not break
		// the accounting.
		c.log(slog.LevelError, "sqsconsumer: ReceiveMessage returned more messages than asked for; releasing the extra", "asked", n, "got", len(msgs))
		for _, m := range msgs[n:] {
			c.releaseRaw(m, 0)
		}
		msgs = msgs[:n]
	}
	msgs = c.dropCorrupt(msgs)
	c.fl.received(n, len(msgs), sent, arrived.Sub(sent))
	c.dispatch(msgs, HandoverTime(sent, arrived), arrived, cfg)
	c.fl.handOut()
	return nil
}

// leaseFor is the lease configuration for the next receive: the fixed one,
// or under WithAdaptiveVisibility twice the recent p99 with a heartbeat at
// the interval rule's (heartbeatInterval) for that lease.
func (c *Consumer) leaseFor() *leaseConfig {
	if c.s.adaptiveMax == 0 {
		return &c.cfg
	}
	cfg := c.cfg // one copy per receive, shared by its leases
	cfg.lease = c.stats.adaptiveVisibility(c.s.adaptiveMin, min(c.s.adaptiveMax, cfg.maxLease), cfg.lease)
	cfg.interval = heartbeatInterval(cfg.lease, 0)
	cfg.grace = ceilingGrace(cfg.interval, c.s.ceilingGrace, c.s.ceilingGraceSet)
	return &cfg
}

// skipChecksum turns off the SDK's own check of the receive's MD5OfBody
// digests: it rejects the whole answer for one bad digest, leaving every
// message of it invisible for a lease, unhandled. dropCorrupt checks each
// message instead.
func skipChecksum(o *sqs.Options) { o.DisableMessageChecksumValidation = true }

// dropCorrupt returns msgs without the messages whose body does not match
// their MD5OfBody (the lowercase hex MD5 of the body, as SQS computes it);
// those are handed back at once (visibility 0), for a delivery that is
// hopefully intact. A message without a digest is kept.
func (c *Consumer) dropCorrupt(msgs []types.Message) []types.Message {
	kept := msgs[:0]
	for _, m := range msgs {
		if want := aws.ToString(m.MD5OfBody); want != "" {
			sum := md5.Sum([]byte(aws.ToString(m.Body)))
			if got := hex.EncodeToString(sum[:]); got != want {
				c.log(slog.LevelError, "sqsconsumer: message body does not match its MD5 digest; handing it back", "message_id", aws.ToString(m.MessageId), "md5_of_body", want, "md5_computed", got)
				c.releaseRaw(m, 0)
				continue
			}
		}
		kept = append(kept, m)
	}
	return kept
}

// receiveCallTimeout is how long a receive may take beyond its long-poll
// wait (the SDK's own retries included) before it is abandoned.
const receiveCallTimeout = 10 * time.Second

var errReceiveTimeout = errors.New("sqsconsumer: ReceiveMessage took longer than its long-poll wait plus 10 s")

// errPollCancelled is the cause of an idle long poll cancelled at
// shutdown (WithCancelIdlePollsAtShutdown).
var errPollCancelled = errors.New("sqsconsumer: idle long poll cancelled at shutdown")

// idlePollAge is how long a long poll must have waited for the shutdown to
// take it for idle and cancel it (WithCancelIdlePollsAtShutdown): a poll
// that found messages answers within a round trip.
const idlePollAge = time.Second

// pollSet is the long polls in flight, when the shutdown may cancel the
// idle ones (WithCancelIdlePollsAtShutdown). Safe for concurrent use.
type pollSet struct {
	mu    sync.Mutex // guards polls
	polls map[*inFlightPoll]struct{}
}

type inFlightPoll struct {
	sent   time.Time
	cancel context.CancelCauseFunc
}

// watch registers a poll sent at sent under a context of its own; done
// takes it out.
func (p *pollSet) watch(ctx context.Context, sent time.Time) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	e := &inFlightPoll{sent: sent, cancel: cancel}
	p.mu.Lock()
	if p.polls == nil {
		p.polls = make(map[*inFlightPoll]struct{})
	}
	p.polls[e] = struct{}{}
	p.mu.Unlock()
	return ctx, func() {
		p.mu.Lock()
		delete(p.polls, e)
		p.mu.Unlock()
		cancel(nil)
	}
}

// cancelIdle cancels the polls that have waited idlePollAge or more by
// now, and returns how many.
func (p *pollSet) cancelIdle(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for e := range p.polls {
		if now.Sub(e.sent) >= idlePollAge {
			e.cancel(errPollCancelled)
			n++
		}
	}
	return n
}

// receiveBackoff is the pause after the n-th consecutive receive failure:
// 100 ms doubling to 10 s, jittered.
func receiveBackoff(n int) time.Duration {
	d := backoffDelay(n, 100*time.Millisecond, 10*time.Second)
	return between(d/2, d)
}

// dispatch takes the messages of one receive, counted as waiting in the
// flow, in the order SQS returned them: each gets its delivery, leased at
// once (so it is renewed while it waits), and joins its FIFO group; then
// it waits for a handler slot. What the Consumer cannot take now (it is
// pausing, stopping or its breaker is open: the receive was in flight
// when that began), and any later message of a group that is being
// handed back, is handed back at once, before the poller goes on.
func (c *Consumer) dispatch(msgs []types.Message, handedOver, arrived time.Time, cfg *leaseConfig) {
	var back []*delivery
	for _, raw := range msgs {
		d := c.deliver(raw, handedOver, arrived, cfg)
		if d == nil {
			continue
		}
		v := c.order.enter(d)
		switch {
		case v == fifo.HandBack:
			back = append(back, d)
			continue
		case v == fifo.Wait && c.batch == nil:
			// Behind an earlier message of its group, which hands it on
			// when done (finish). (A Batch handler's members take slots
			// at once: several of a group may run in one batch, in
			// order.)
			continue
		}
		if !c.taking() || !c.enqueue(d) {
			// Marked at once: the later messages of its group in this
			// answer go back with it, even if the Consumer takes work
			// again before they are dispatched.
			c.order.handBack(d)
			back = append(back, d)
		}
	}
	c.handBack(back)
}

// deliver makes the delivery of raw and starts its lease; or, when its
// message is still held here, the running lease adopts the newer receipt
// handle (or, if that lease is already gone, raw is handed back) and
// deliver returns nil. handedOver is the receive's conservative hand-over
// estimate (the lease clock), arrived when its answer came.
func (c *Consumer) deliver(raw types.Message, handedOver, arrived time.Time, cfg *leaseConfig) *delivery {
	id, handle := aws.ToString(raw.MessageId), aws.ToString(raw.ReceiptHandle)
	if id == "" || handle == "" {
		c.log(slog.LevelError, "sqsconsumer: ReceiveMessage returned a message without MessageId or ReceiptHandle; skipping it", "message_id", id)
		c.fl.drop(1)
		return nil
	}
	d := newDelivery(raw, handedOver, arrived, cfg)
	for prev := c.held.add(d); prev != nil; {
		if !(prev.lease.settled() && !prev.inHandler.Load()) {
			// Still held here. (A delivery whose handler has returned
			// and whose message SQS has confirmed released or deleted
			// is only being finished: a new receive of it is a new
			// delivery.) d was never started: it is dropped.
			c.adopt(prev, raw, handedOver, cfg)
			return nil
		}
		if c.held.replace(d, prev) {
			break
		}
		prev = c.held.add(d) // another receive of it was dispatched meanwhile: look again
	}
	// Not a child of any Run-scoped context: cancelling Run's context
	// must not interrupt handlers (shutdown cancels each one itself), and
	// a parent would take a shared lock for every message.
	d.ctx = d.lease.start(context.Background())
	c.handlers.add() // done in finish
	c.observe(EventReceived, d, nil)
	return d
}

// adopt gives a redelivery of a message still held here to its running
// lease, or hands it back when that lease is gone but its handler has not
// returned yet (the two must not run at once).
func (c *Consumer) adopt(d *delivery, raw types.Message, handedOver time.Time, cfg *leaseConfig) {
	c.fl.drop(1)
	count, _ := strconv.Atoi(raw.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if d.lease.adopt(aws.ToString(raw.ReceiptHandle), handedOver, count, cfg.lease) {
		c.log(slog.LevelInfo, "sqsconsumer: message redelivered while still being handled here; the running lease adopted the new receipt handle", "message_id", d.msg.ID, "receive_count", count)
		c.ev.emit(EventAdopted, &d.msg, count, d.lease.arrivedAt(), d.workStarted(), 0, nil)
		return
	}
	c.log(slog.LevelWarn, "sqsconsumer: message redelivered while its previous handler is still winding down; releasing the redelivery", "message_id", d.msg.ID)
	c.releaseRaw(raw, DefaultBackoff(count))
}

// enqueue hands a waiting delivery, free to start, to the flow: it starts
// at once in a free slot or waits for one. It returns false, having done
// nothing, when receiving has stopped or paused: the caller hands d back.
func (c *Consumer) enqueue(d *delivery) bool {
	switch v, s := c.fl.enqueue(d); v {
	case startNow:
		d.place, d.slot = placeSlot, s
		c.start(d)
	case notStarting:
		return false
	}
	return true
}

// granted starts the oldest waiting message in a slot of the fleet's
// budget given to this Consumer; false if none could start.
func (c *Consumer) granted() bool {
	d, s := c.fl.granted()
	if d == nil {
		return false
	}
	d.place, d.slot = placeSlot, s
	c.start(d)
	return true
}

// releaseRaw sets the visibility of a message that never got a delivery
// (and so no lease): one the receive should not have returned, a corrupt
// one, a redelivery of one still winding down.
func (c *Consumer) releaseRaw(m types.Message, after time.Duration) {
	ctx, cancel := context.WithTimeout(c.settleCtx, 10*time.Second)
	defer cancel()
	secs := int32((after + time.Second - 1) / time.Second)
	if err := c.calls.changeVisibility(ctx, aws.ToString(m.ReceiptHandle), secs); err != nil {
		c.log(slog.LevelWarn, "sqsconsumer: could not hand a message back", "message_id", aws.ToString(m.MessageId), "error", err)
	}
}

// taking reports whether the Consumer takes new messages: not shutting
// down, not paused, its breaker (if any) not open.
func (c *Consumer) taking() bool {
	return !c.stopping.Load() && !c.paused.Load() && (c.br == nil || !c.br.refusing())
}

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

	"github.com/sqskit/sqsconsumer/internal/broken"
	"github.com/sqskit/sqsconsumer/internal/fifo"
)

// poll is one poller, a lane of the Consumer's calls: it makes the
// coalesced call the flow hands it (a job), or sends the receive the flow
// says is due and dispatches what comes back; with neither it parks until
// the flow kicks it. It returns once Run has stopped the workers (quit).
func (r *run) poll() {
	defer r.pollers.Done()
	for {
		job, n, sent := r.fl.take()
		if job != nil {
			job()
			continue
		}
		if n == 0 {
			select {
			case <-r.fl.kicked():
				r.fl.unpark()
				continue
			case <-r.quit:
				if pollerQuits != nil {
					pollerQuits()
				}
				if broken.Is(broken.ShutdownStrandsReceive) {
					time.Sleep(100 * time.Millisecond) // descheduled here, still counted as parked
				}
				r.fl.unpark()
				return
			}
		}
		err := r.receive(n, sent)
		if err == nil {
			continue
		}
		if r.pollCtx.Err() != nil || r.shuttingDown() && errors.Is(err, context.Canceled) {
			// Cut by the hard stop, or an idle poll the shutdown
			// cancelled: it got nothing this process will see.
			r.fl.abandoned(n, sent)
			return
		}
		same, backoff := r.fl.failed(n, sent, err, persistentClientError(err))
		r.fl.handOut()
		if why, fatal := cannotSucceed(err); fatal && r.prog.answered.Load() == 0 {
			// SQS never answered: the endpoint or the rights are wrong
			// (firstcontact.go).
			r.fail(firstContactError(r.queueURL, why, err), "sqsconsumer: the first receive cannot succeed; shutting down")
			return
		}
		if classify(err) == kindPermanent || broken.Is(broken.TransientReceiveFatal) {
			r.fail(err, "sqsconsumer: permanent receive error; shutting down")
			return
		}
		if same >= maxSameReceiveFailures {
			r.fail(fmt.Errorf("failed %d times in a row with the same client error: %w", same, err), "sqsconsumer: every receive fails the same way; shutting down")
			return
		}
		r.log(slog.LevelWarn, "sqsconsumer: receive failed; backing off", "error", err, "backoff", backoff.String())
	}
}

// pollerQuits, when set (by a test), is called by a parked poller that
// saw Run quit, before it leaves: the moment a busy machine may
// deschedule it, still counted as parked.
var pollerQuits func()

// maxSameReceiveFailures is how many receives in a row may fail with the
// same client error (a 4xx answer other than throttling, such as an answer
// the SDK cannot decode) before Run gives up and returns it: about a
// minute of backoff. Throttling, server errors and network failures are
// retried for as long as Run runs.
const maxSameReceiveFailures = 10

// receive sends one ReceiveMessage for n messages, taken from the flow at
// sent (the hand-over estimate may not count from later), and dispatches
// the answer. Its context is not Run's: a receive is never cancelled by a
// shutdown, only by the hard stop after it.
func (r *run) receive(n int, sent time.Time) error {
	cfg := r.leaseFor()
	ctx, cancel := context.WithTimeoutCause(r.pollCtx, receiveTimeout(r.pollWait), errReceiveTimeout)
	if r.s.cancelIdlePolls {
		var done func()
		ctx, done = r.polls.watch(ctx, sent)
		defer done()
	}
	first := r.prog.answered.Load() == 0 && r.prog.firstPoll.CompareAndSwap(0, time.Now().UnixNano())
	out, err := r.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(r.queueURL),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(r.pollWait / time.Second),
		VisibilityTimeout:           int32(cfg.lease / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}, receiveOpts...) // skipChecksum, guardBodies (clienthttp.go)
	cancel()
	arrived := time.Now()
	if err != nil {
		if first {
			r.prog.firstPoll.Store(-1) // no longer progress
		}
		msg := err.Error()
		r.prog.recvErr.Store(&msg)
		return err // the caller tells the flow
	}
	stamp(&r.prog.receive)
	r.prog.answer()
	r.prog.recvErr.Store(nil)
	if r.quota.answered(len(out.Messages), time.Now()) && !r.shuttingDown() {
		// The in-flight quota's read (quota.go), off the poller's path.
		// Run waits for the pollers before aux, so this Add comes first.
		r.aux.Add(1)
		go func() {
			defer r.aux.Done()
			r.quota.read(r.probeCtx) // cancelled as the shutdown begins
		}()
	}
	msgs := out.Messages
	if len(msgs) > n {
		// SQS never does this; a misbehaving endpoint must not break
		// the accounting.
		r.log(slog.LevelError, "sqsconsumer: ReceiveMessage returned more messages than asked for; releasing the extra", "asked", n, "got", len(msgs))
		for _, m := range msgs[n:] {
			r.releaseRaw(m, 0)
		}
		msgs = msgs[:n]
	}
	msgs = r.dropCorrupt(msgs)
	var bytes, largest int64
	for _, m := range msgs {
		b := messageBytes(m)
		bytes, largest = bytes+b, max(largest, b)
	}
	r.fl.received(n, len(msgs), bytes, largest, sent, arrived.Sub(sent))
	r.dispatch(msgs, HandoverTime(sent, arrived), arrived, cfg)
	r.fl.handOut()
	return nil
}

// leaseFor is the lease configuration for the next receive: the fixed one,
// or under WithAdaptiveVisibility twice the recent p99 with a heartbeat at
// the interval rule's (heartbeatInterval) for that lease.
func (r *run) leaseFor() *leaseConfig {
	if r.s.adaptiveMax == 0 {
		return &r.cfg
	}
	cfg := r.cfg // one copy per receive, shared by its leases
	cfg.lease = r.stats.adaptiveVisibility(r.s.adaptiveMin, min(r.s.adaptiveMax, cfg.maxLease), cfg.lease)
	cfg.interval = heartbeatInterval(cfg.lease, 0)
	cfg.grace = ceilingGrace(cfg.interval, r.s.ceilingGrace, r.s.ceilingGraceSet)
	return &cfg
}

// skipChecksum turns off the SDK's own check of the receive's MD5OfBody
// digests: it rejects the whole answer for one bad digest, leaving every
// message of it invisible for a lease, unhandled. dropCorrupt checks each
// message instead.
func skipChecksum(o *sqs.Options) { o.DisableMessageChecksumValidation = true }

// receiveOpts is the receive's per-call options (skipChecksum, and
// guardBodies: clienthttp.go), as a slice made once (see guardOpts).
var receiveOpts = []func(*sqs.Options){skipChecksum, guardBodies}

// dropCorrupt returns msgs without the messages whose body does not match
// their MD5OfBody (the lowercase hex MD5 of the body, as SQS computes it);
// those are handed back at once (visibility 0), for a delivery that is
// hopefully intact. A message without a digest is kept.
func (r *run) dropCorrupt(msgs []types.Message) []types.Message {
	kept := msgs[:0]
	for _, m := range msgs {
		if want := aws.ToString(m.MD5OfBody); want != "" {
			sum := md5.Sum([]byte(aws.ToString(m.Body)))
			if got := hex.EncodeToString(sum[:]); got != want {
				r.log(slog.LevelError, "sqsconsumer: message body does not match its MD5 digest; handing it back", "message_id", aws.ToString(m.MessageId), "md5_of_body", want, "md5_computed", got)
				r.releaseRaw(m, 0)
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

// receiveTimeout is the call timeout of a receive that asks for a wait of
// pollWait: receiveCallTimeout beyond it. A receive that leaves the wait
// out (0: the queue short-polled when Run read it) waits whatever the
// queue's ReceiveMessageWaitTimeSeconds is when it arrives, which may have
// changed since: up to SQS's longest.
func receiveTimeout(pollWait time.Duration) time.Duration {
	if pollWait == 0 {
		return maxWaitTime + receiveCallTimeout
	}
	return pollWait + receiveCallTimeout
}

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

// dispatch takes the messages of one receive, counted as waiting in the
// flow, in the order SQS returned them: each gets its delivery, leased at
// once (so it is renewed while it waits), and joins its FIFO group; then
// it waits for a handler slot. What the Consumer cannot take now (it is
// pausing, stopping or its breaker is open: the receive was in flight
// when that began), and any later message of a group that is being
// handed back, is handed back at once, before the poller goes on.
func (r *run) dispatch(msgs []types.Message, handedOver, arrived time.Time, cfg *leaseConfig) {
	var back []*delivery
	for _, raw := range msgs {
		d, v := r.deliver(raw, handedOver, arrived, cfg)
		switch {
		case d == nil:
			continue
		case v == fifo.HandBack:
			back = append(back, d)
			continue
		case v == fifo.Wait && (r.batch == nil || d.parked.Load()):
			// Behind an earlier message of its group, which hands it on
			// when done (finish). (A Batch handler's members take slots
			// at once: several of a group may run in one batch, in
			// order; but not a redelivery parked behind its own
			// message's older delivery: its middleware must not run
			// beside that one.) When the Consumer takes no work it goes
			// back at once, as the shutdown's start handed back those
			// it held: the earlier one may outlive the hard stop.
			if !r.taking() {
				if ok, later := r.reg.takeBack(d); ok {
					back = append(back, d)
					r.returnLater(later)
				}
			}
			continue
		}
		if !r.taking() || !r.enqueue(d) {
			// Marked at once: the later messages of its group in this
			// answer go back with it, even if the Consumer takes work
			// again before they are dispatched.
			r.reg.handBack(d)
			back = append(back, d)
		}
	}
	r.handBack(back)
}

// deliver makes the delivery of raw, records it in the registry (v: what
// its FIFO group's order says) and starts its lease; or, when its message
// is still held here under a running lease, that lease adopts the newer
// receipt handle and deliver returns nil. When the message is held but
// its lease is gone (lost or expired, its handler not returned yet), the
// new delivery, on a FIFO queue, takes its entry and waits behind the old
// one in its group: it starts once the old one is over, before the later
// messages of its group (registry.leave), never beside it; on a standard
// queue raw is released for its backoff instead. handedOver is the
// receive's conservative hand-over estimate (the lease clock), arrived
// when its answer came.
func (r *run) deliver(raw types.Message, handedOver, arrived time.Time, cfg *leaseConfig) (d *delivery, v fifo.Verdict) {
	id, handle := aws.ToString(raw.MessageId), aws.ToString(raw.ReceiptHandle)
	if id == "" || handle == "" {
		r.log(slog.LevelError, "sqsconsumer: ReceiveMessage returned a message without MessageId or ReceiptHandle; skipping it", "message_id", id)
		r.fl.drop(1, messageBytes(raw))
		return nil, v
	}
	d = newDelivery(raw, handedOver, arrived, cfg)
	for {
		prev, pv := r.reg.add(d)
		if prev == nil {
			v = pv
			break
		}
		if !(prev.lease.settled() && !prev.inHandler.Load()) && !broken.Is(broken.AdoptionSkipped) {
			// Still held here. (A delivery whose handler has returned
			// and whose message SQS has confirmed released or deleted
			// is only being finished: a new receive of it is a new
			// delivery.) d was never started: it is dropped.
			if r.adopt(prev, raw, handedOver, cfg) {
				return nil, v
			}
			if !r.reg.ordered(d) || broken.Is(broken.WindDownReleased) {
				// Its lease is gone but its handler has not returned,
				// and no group order holds d back: it goes back for
				// a while (the two must not run at once).
				r.fl.drop(1, messageBytes(raw))
				r.log(slog.LevelWarn, "sqsconsumer: message redelivered while its previous handler is still winding down; releasing the redelivery", "message_id", d.msg.ID)
				count, _ := strconv.Atoi(raw.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
				r.releaseRaw(raw, DefaultBackoff(count))
				return nil, v
			}
			// Its lease is gone but its handler has not returned: d
			// waits behind it in its FIFO group (replace), not beside
			// it, and keeps the group's later messages behind it.
			r.log(slog.LevelInfo, "sqsconsumer: message redelivered while its previous delivery here is not over; the redelivery waits behind it", "message_id", d.msg.ID)
			d.parked.Store(true)
		}
		if ok, pv := r.reg.replace(d, prev); ok {
			v = pv
			break
		}
		// Another receive of it was dispatched meanwhile: look again.
	}
	// Not a child of any cancellable context: cancelling Run's context
	// must not interrupt handlers (shutdown cancels each one itself), and
	// a cancellable parent would take a shared lock for every message.
	// handlerBase only carries the drain signal (Draining).
	d.ctx = d.lease.start(r.handlerBase)
	r.observe(EventReceived, d, nil)
	return d, v
}

// adopt gives a redelivery of a message still held here to its running
// lease, and reports false, doing nothing, when that lease is gone (lost
// or expired) though its handler has not returned yet (the two must not
// run at once: the caller makes the redelivery wait behind it).
func (r *run) adopt(d *delivery, raw types.Message, handedOver time.Time, cfg *leaseConfig) bool {
	count, _ := strconv.Atoi(raw.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if !d.lease.adopt(aws.ToString(raw.ReceiptHandle), handedOver, count, cfg.lease) {
		return false
	}
	r.fl.drop(1, messageBytes(raw))
	r.log(slog.LevelInfo, "sqsconsumer: message redelivered while still being handled here; the running lease adopted the new receipt handle", "message_id", d.msg.ID, "receive_count", count)
	r.ev.emit(EventAdopted, &d.msg, count, d.lease.arrivedAt(), d.workStarted(), 0, nil)
	return true
}

// releaseRaw sets the visibility of a message that never got a delivery
// (and so no lease): one the receive should not have returned, a corrupt
// one, a redelivery (standard queue) of one still winding down.
func (r *run) releaseRaw(m types.Message, after time.Duration) {
	ctx, cancel := context.WithTimeout(r.settleCtx, 10*time.Second)
	defer cancel()
	secs := int32((after + time.Second - 1) / time.Second)
	if err := r.calls.changeVisibility(ctx, aws.ToString(m.ReceiptHandle), secs); err != nil {
		r.log(slog.LevelWarn, "sqsconsumer: could not hand a message back", "message_id", aws.ToString(m.MessageId), "error", err)
	}
}

package sqsconsumer

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/internal/share"
)

// Consumer receives messages from one SQS queue and hands each to a
// Handler under a Lease. Make one with New and call Run. A Consumer is safe
// for concurrent use; Run may be called once.
type Consumer struct {
	client   Client
	queueURL string
	handler  Handler // with middleware applied
	s        settings
	batch    *batcher // the handler given to New, when it came from Batch

	runOnce sync.Once

	stats *statsRecorder // always on: Stats, adaptive leases

	// Set up at Run, read-only afterwards.
	cfg      leaseConfig
	fifo     bool
	calls    *batchedCalls
	fl       *flow         // when to receive, how much; the handler slots
	pollWait time.Duration // WaitTimeSeconds of every receive
	dlq      deadLetter    // where Permanent errors' messages go

	dlqWarned atomic.Bool // the missing dead-letter queue was logged

	progress    progress           // for Health
	br          *breaker           // WithBreaker; nil when off
	aux         sync.WaitGroup     // the breaker's goroutines: releases at an opening, probes
	probeCtx    context.Context    // a probe's context; cancelled at shutdown
	cancelProbe context.CancelFunc // cancels probeCtx

	// settleCtx bounds every settling call (deletes, releases) and
	// pollCtx every receive; both are cancelled at the hard stop, one
	// call timeout after the shutdown budget, so Run returns in time
	// even when SQS does not answer.
	settleCtx   context.Context
	pollCtx     context.Context
	hardStop    context.CancelFunc
	stopPolls   chan struct{}      // closed at shutdown: parked pollers return
	fatalStop   context.CancelFunc // ends Run's wait after a permanent receive error
	settleMu    sync.Mutex         // guards settling
	settling    int                // succeeded messages whose slot was given back before the delete confirmed
	pollers     sync.WaitGroup     // poller goroutines
	afterDelete func(*Lease, error)

	mu sync.Mutex // guards the fields below
	// inflight holds every message this process holds, from receipt to
	// settlement, by ID. Its Lease is the delivery: the message (l.msg)
	// and the handler's context (l.ctx) hang off it.
	inflight map[string]*Lease
	groups   map[string][]*Lease // FIFO: messages waiting behind a running one, in order
	// stopping is set (under mu) at shutdown: no new handler may start.
	// Atomic so a worker can check it without the lock.
	stopping atomic.Bool
	fatal    error // a permanent receive error that ends Run
	runErr   error // what Run returned, for Health
	paused   bool  // between Pause and Resume
	// member is the Consumer's place in a fleet's shared slot budget
	// (package fleet), nil for a Consumer on its own. Set before Run.
	member *share.Member

	handlers sync.WaitGroup // deliveries being handled or settled
	workers  sync.WaitGroup // worker goroutines, idle or busy
	work     chan *Lease    // hands a delivery to an idle worker
	runs     chan *hbatch   // hands a due batch to an idle worker (Batch without middleware)
	quit     chan struct{}  // closed after shutdown: idle workers exit
}

// New makes a Consumer of the queue at queueURL that calls h for each
// message. It validates everything it can without calling SQS and returns
// an error wrapping ErrInvalidOption that names each problem: a nil client
// or handler, an empty URL, an option out of range, or options that
// contradict each other (a heartbeat of half the lease or more, a lease
// longer than the maximum lease duration). Options that depend on the
// queue's own VisibilityTimeout are checked again at Run.
func New(c Client, queueURL string, h Handler, opts ...Option) (*Consumer, error) {
	s, errs := settingsFor(c, queueURL, opts)
	if h == nil {
		errs = append(errs, fmt.Errorf("%w: handler is nil", ErrInvalidOption))
	} else if f, ok := h.(HandlerFunc); ok && f == nil {
		errs = append(errs, fmt.Errorf("%w: handler is a nil HandlerFunc", ErrInvalidOption))
	} else if isNil(h) {
		errs = append(errs, fmt.Errorf("%w: handler is a nil %T", ErrInvalidOption, h))
	}
	if !s.receivedAt.IsZero() {
		errs = append(errs, fmt.Errorf("%w: WithReceivedAt applies to NewLease only; a Consumer knows when it received", ErrInvalidOption))
	}
	errs = append(errs, s.errs...)
	if s.visibility != 0 {
		_, err := s.leaseConfig(s.visibility)
		errs = append(errs, err)
	}
	if s.adaptiveMax > 0 && s.heartbeat > 0 {
		errs = append(errs, fmt.Errorf("%w: WithAdaptiveVisibility and WithHeartbeatInterval cannot be combined: the interval follows the adaptive lease", ErrInvalidOption))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if s.pollers == 0 {
		// Enough receives in flight to ask for every slot and the whole
		// read-ahead in full batches.
		s.pollers = (s.concurrency+s.maxAhead+s.batchSize-1)/s.batchSize + 1
	}
	bt, _ := h.(*batcher)
	if bt != nil && bt.size > s.concurrency {
		return nil, fmt.Errorf("%w: Batch size %d exceeds WithConcurrency(%d): each message of a batch holds a handler slot, so the batch could never fill", ErrInvalidOption, bt.size, s.concurrency)
	}
	handler := h
	for i := len(s.middleware) - 1; i >= 0; i-- {
		if handler = s.middleware[i](handler); isNil(handler) {
			return nil, fmt.Errorf("%w: WithMiddleware: middleware %d returned a nil handler", ErrInvalidOption, i)
		}
	}
	stats := newStatsRecorder()
	s.stats = stats
	c2 := &Consumer{
		client:   c,
		queueURL: queueURL,
		handler:  handler,
		s:        s,
		stats:    stats,
		batch:    bt,
	}
	if bt != nil && !bt.attach(c2, len(s.middleware) == 0) {
		return nil, fmt.Errorf("%w: the Handler from Batch is already used by another Consumer; call Batch once per Consumer", ErrInvalidOption)
	}
	return c2, nil
}

// Stats returns what the Consumer has measured so far: receive-to-settle
// percentiles (in-process queueing included), the receive-count
// distribution, renewals per message, and what it holds now (running,
// waiting, asked for). Safe to call at any time, from any goroutine.
// Package doctor judges the figures against the queue's settings and
// recommends a visibility timeout, heartbeating for long tails and a safe
// time to the dead-letter queue: doctor.Advise(c.Stats(), queue, opts).
func (c *Consumer) Stats() Stats {
	st := c.stats.Stats()
	if fl := c.flowOf(); fl != nil {
		st.Running, st.Waiting, st.Asked, _ = fl.snapshot()
	}
	return st
}

// flowOf returns the flow once Run has set it up, nil before.
func (c *Consumer) flowOf() *flow {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fl
}

// QueueURL returns the URL of the queue the Consumer reads.
func (c *Consumer) QueueURL() string { return c.queueURL }

// Run receives and handles messages until ctx is cancelled or a permanent
// error occurs (the queue does not exist, access is denied, or every
// receive fails the same way, see maxSameReceiveFailures). It blocks.
//
// When ctx is cancelled Run stops receiving: it sends no new receive, and
// never cancels one in flight, which may already hold messages (they would
// stay invisible for a whole lease); such a receive returns within its
// long-poll wait, which is never longer than the shutdown timeout, and its
// messages are released at once (visibility 0; another receive still in
// flight may take such a message once more, and release it too). Messages
// whose handlers have not started are released too, and running handlers
// get the shutdown timeout to finish while their leases stay renewed; then
// their contexts are cancelled with ErrShutdown and, unless they succeed,
// their messages are released. Calls to SQS still pending one call timeout
// (shutdownCallTimeout, 5 s) after the shutdown timeout are abandoned, so
// Run returns within the shutdown timeout plus that, unless a handler
// ignores its cancelled context: Run waits for every handler it started.
//
// Run returns only after every goroutine it started has exited: nil after a
// clean shutdown, the permanent error otherwise. The handlers' contexts
// derive from context.Background, not from ctx, so cancelling ctx never
// interrupts a handler by itself.
func (c *Consumer) Run(ctx context.Context) (err error) {
	if ctx == nil {
		return errors.New("sqsconsumer: Run(nil): a context is required")
	}
	first := false
	c.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("sqsconsumer: Run may be called only once per Consumer")
	}
	c.progress.stage.Store(runStarting)
	defer func() {
		c.mu.Lock()
		c.runErr = err
		c.mu.Unlock()
		c.progress.stage.Store(runStopped)
	}()
	if err := c.setup(ctx); err != nil {
		return err
	}
	stamp(&c.progress.resumed)
	c.progress.stage.Store(runRunning)
	runCtx, fatalStop := context.WithCancel(ctx)
	defer fatalStop()
	c.fatalStop = fatalStop
	c.fl.begin()
	<-runCtx.Done()

	c.progress.stage.Store(runDraining)
	c.shutdown()
	c.pollers.Wait()
	close(c.quit)
	c.workers.Wait()
	// The breaker's goroutines: none starts after shutdown stopped it.
	c.aux.Wait()
	c.calls.close()
	c.hardStop()
	c.logStats()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// shutdownCallTimeout is how long after the shutdown timeout calls to SQS
// still pending (a delete, a release, a receive that does not return) are
// given before they are abandoned.
const shutdownCallTimeout = 5 * time.Second

// logStats logs the run's figures, when a logger is set and anything was
// processed. Judging them is package doctor's work (doctor.Advise).
func (c *Consumer) logStats() {
	if c.s.logger == nil {
		return
	}
	if st := c.Stats(); st.Processed > 0 {
		c.log(slog.LevelInfo, "sqsconsumer: stats", "stats", st)
	}
}

// setup reads what the options left to the queue, checks the lease
// options against it, and prepares the run state.
func (c *Consumer) setup(ctx context.Context) error {
	lease := c.s.visibility
	c.fifo = strings.HasSuffix(c.queueURL, ".fifo")
	// The queue's VisibilityTimeout is the lease when none was given, and
	// FifoQueue confirms the URL's suffix. Without WithVisibilityTimeout a
	// failure here ends Run; with it, the URL decides FIFO.
	out, err := c.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(c.queueURL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameFifoQueue,
			types.QueueAttributeNameRedrivePolicy, types.QueueAttributeNameQueueArn, // for the poison path
		},
	})
	if err != nil && lease == 0 {
		var missing *types.QueueDoesNotExist
		switch {
		case errors.As(err, &missing):
			return fmt.Errorf("sqsconsumer: queue %s does not exist (check the region and account in its URL): %w", c.queueURL, err)
		case isAccessDenied(err):
			return fmt.Errorf("sqsconsumer: reading the queue's VisibilityTimeout: access denied (allow sqs:GetQueueAttributes, or set WithVisibilityTimeout to skip this read): %w", err)
		}
		return fmt.Errorf("sqsconsumer: reading the queue's VisibilityTimeout: %w", err)
	}
	attrErr := err
	if err != nil {
		c.log(slog.LevelDebug, "sqsconsumer: could not read the queue's attributes; FIFO is judged from the URL", "error", err)
		out = &sqs.GetQueueAttributesOutput{}
	}
	c.fifo = c.fifo || out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"
	if c.dlq, err = deadLetterFor(c.client, c.queueURL, c.fifo, c.s.deadLetterURL, out.Attributes); err != nil {
		return err
	}
	if attrErr != nil && c.dlq.url == "" {
		c.dlq.why = fmt.Sprintf("the queue's RedrivePolicy could not be read (%v) and WithDeadLetterQueue was not given", attrErr)
	}
	if lease == 0 {
		secs, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
		if err != nil {
			return fmt.Errorf("sqsconsumer: queue VisibilityTimeout %q is not a number", out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
		}
		lease = time.Duration(secs) * time.Second
		if lease < minVisibilityTimeout {
			return fmt.Errorf("%w: the queue's VisibilityTimeout (%v) is below %v, too short to renew; set WithVisibilityTimeout", ErrInvalidOption, lease, minVisibilityTimeout)
		}
	}
	cfg, err := c.s.leaseConfig(lease)
	if err != nil {
		return err
	}
	settleCtx, cancelSettle := context.WithCancel(context.Background())
	c.calls = newBatchedCalls(c.client, c.queueURL, max(c.s.pollers, minDeleteCalls), settleCtx)
	pollCtx, cancelPolls := context.WithCancel(context.Background())
	c.settleCtx, c.pollCtx = settleCtx, pollCtx
	c.hardStop = func() { cancelPolls(); cancelSettle() }
	cfg.calls, cfg.queueURL, cfg.settleCtx = c.calls, c.queueURL, settleCtx
	c.cfg = cfg
	fl := newFlow(c.s.concurrency, c.s.batchSize, c.s.maxAhead, c.s.pollers, func() {
		c.pollers.Add(1)
		go c.poll()
	})
	if c.batch != nil {
		fl.burst = c.batch.size
	}
	c.probeCtx, c.cancelProbe = context.WithCancel(context.Background())
	if c.s.breaker != nil {
		c.br = newBreaker(*c.s.breaker)
		c.br.wake = fl.wake
		c.br.onClose = c.breakerClosed
		c.br.onOpen = func(reason string) {
			c.aux.Add(1)
			go c.breakerOpened(reason)
		}
		c.br.runProbe = func() {
			c.aux.Add(1)
			go c.probe()
		}
		fl.gate = c.br.limit
	}
	c.calls.report = c.callDone
	if c.s.rateLimit > 0 {
		fl.limiter = newTokenBucket(c.s.rateLimit, c.s.rateBurst)
	}
	c.stopPolls = make(chan struct{})
	c.inflight = make(map[string]*Lease)
	c.work = make(chan *Lease)
	c.runs = make(chan *hbatch)
	c.quit = make(chan struct{})
	c.groups = make(map[string][]*Lease)
	c.afterDelete = c.deleted
	c.mu.Lock()
	fl.paused = c.paused
	if m := c.member; m != nil {
		fl.member, fl.idlePause = m, m.IdlePause
		m.Bind(c.granted, func() {
			select {
			case fl.kick <- struct{}{}:
			default:
			}
		})
	}
	c.fl = fl // under mu for flowOf and Pause
	c.mu.Unlock()
	c.pollWait = c.s.waitTime
	if c.pollWait > 0 {
		// A receive in flight at shutdown is never cancelled, so it must
		// return within the shutdown timeout (at least a second: the SDK
		// cannot send a wait of 0).
		c.pollWait = max(min(c.pollWait, c.s.shutdownTimeout.Truncate(time.Second)), time.Second)
	}
	return nil
}

// minDeleteCalls is the least number of delete batch calls a Consumer lets
// be in flight at once (otherwise one per receive it may have in flight):
// a burst of settlements waits for a call instead of opening a connection
// of its own.
const minDeleteCalls = 4

// takeSettleSlot reserves room for one more message that has given its
// handler slot back before its delete was confirmed.
func (c *Consumer) takeSettleSlot() bool {
	c.settleMu.Lock()
	defer c.settleMu.Unlock()
	if c.settling >= c.s.concurrency+c.s.maxAhead {
		return false
	}
	c.settling++
	return true
}

func (c *Consumer) giveSettleSlot() {
	c.settleMu.Lock()
	c.settling--
	c.settleMu.Unlock()
}

// poll is one poller: it takes the receive the flow says is due, sends it,
// and dispatches what comes back; with nothing due it parks until the flow
// kicks it. It returns when receiving stops.
func (c *Consumer) poll() {
	defer c.pollers.Done()
	for {
		n := c.fl.take()
		if n == 0 {
			select {
			case <-c.fl.kick:
				c.fl.unpark()
				continue
			case <-c.stopPolls:
				c.fl.unpark()
				return
			}
		}
		err := c.receive(n)
		if err == nil {
			continue
		}
		if c.pollCtx.Err() != nil {
			return
		}
		same, backoff := c.fl.failed(n, err, persistentClientError(err))
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

// receive sends one ReceiveMessage for n messages and dispatches the
// answer. Its context is not Run's: a receive is never cancelled by a
// shutdown, only by the hard stop after it.
func (c *Consumer) receive(n int) error {
	cfg := c.leaseFor()
	ctx, cancel := context.WithTimeout(c.pollCtx, c.pollWait+receiveCallTimeout)
	sent := time.Now()
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
	c.fl.received(n, len(msgs), arrived.Sub(sent))
	handedOver := HandoverTime(sent, arrived)
	for _, m := range msgs {
		c.dispatch(m, handedOver, arrived, cfg)
	}
	c.fl.handOut()
	return nil
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

// receiveBackoff is the pause after the n-th consecutive receive failure:
// 100 ms doubling to 10 s, jittered.
func receiveBackoff(n int) time.Duration {
	d := backoffDelay(n, 100*time.Millisecond, 10*time.Second)
	return between(d/2, d)
}

// dispatch takes one received message, counted as waiting in the flow: a
// redelivery of a message already held here is adopted by its lease;
// anything else gets a lease at once (so it is renewed while it waits) and
// a handler slot when its turn comes. handedOver is the receive's
// conservative hand-over estimate (the lease clock), arrived when its
// answer came.
func (c *Consumer) dispatch(raw types.Message, handedOver, arrived time.Time, cfg *leaseConfig) {
	id, handle := aws.ToString(raw.MessageId), aws.ToString(raw.ReceiptHandle)
	if id == "" || handle == "" {
		c.log(slog.LevelError, "sqsconsumer: ReceiveMessage returned a message without MessageId or ReceiptHandle; skipping it", "message_id", id)
		c.fl.drop(1)
		return
	}
	c.mu.Lock()
	if d, ok := c.inflight[id]; ok && !(d.settled() && !d.inHandler.Load()) {
		// Still held here. (A delivery whose handler has returned and
		// whose message SQS has confirmed released or deleted is only
		// being finished: a new receive of it is a new delivery.)
		c.mu.Unlock()
		c.fl.drop(1)
		count, _ := strconv.Atoi(raw.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		if d.adopt(handle, handedOver, count, cfg.lease) {
			c.log(slog.LevelInfo, "sqsconsumer: message redelivered while still being handled here; the running lease adopted the new receipt handle", "message_id", id, "receive_count", count)
			c.observeCount(EventAdopted, d.msg, count, nil)
			return
		}
		// The old lease is gone but its handler has not returned yet:
		// keep the two from running at once by handing this delivery back.
		c.log(slog.LevelWarn, "sqsconsumer: message redelivered while its previous handler is still winding down; releasing the redelivery", "message_id", id)
		c.releaseRaw(raw, DefaultBackoff(count))
		return
	}
	if c.stopping.Load() || c.paused || (c.br != nil && c.br.refusing()) {
		// A receive that was in flight when the shutdown, a pause or an
		// opening of the breaker began: hand its messages back at once
		// rather than leave them invisible.
		c.mu.Unlock()
		c.fl.drop(1)
		c.releaseRaw(raw, 0)
		return
	}
	l := newLease(raw, handedOver, arrived, cfg)
	m := l.msg
	// Not a child of any Run-scoped context: cancelling Run's context
	// must not interrupt handlers (shutdown cancels each one itself), and
	// a parent would take a shared lock for every message.
	l.start(context.Background())
	c.inflight[id] = l
	ready := true
	if c.fifo && m.GroupID != "" && c.batch != nil {
		c.batch.enter(l) // several of a group may run in one batch: the batcher keeps the order
	} else if c.fifo && m.GroupID != "" {
		q, busy := c.groups[m.GroupID]
		c.groups[m.GroupID] = append(q, l)
		ready = !busy
	}
	c.handlers.Add(1) // done in finish or settleUnstarted
	c.mu.Unlock()
	c.observe(EventReceived, m, nil)
	if ready {
		c.enqueue(l)
	}
}

// enqueue hands a waiting message to the flow, and starts it or, when the
// shutdown has begun meanwhile, releases it.
func (c *Consumer) enqueue(l *Lease) {
	switch c.fl.enqueue(l) {
	case startNow:
		c.start(l)
	case notStarting:
		c.settleUnstarted(l)
	}
}

// workerIdle is how long a worker goroutine waits for another message
// before it exits. Reusing workers saves growing a fresh goroutine's stack
// for every message: measured against a goroutine per message
// (BenchmarkConsumerOverhead, round trip 0, quiet 2-core machine, 5
// alternating runs), it costs about 11 % less CPU per message and a third
// less wall time, so it stays.
const workerIdle = 30 * time.Second

// start hands d, which holds a handler slot, to an idle worker, or to a
// new one. There are never more workers busy than handler slots. A
// handler from Batch without middleware takes d into a batch instead,
// with no goroutine of its own (batcher.join).
func (c *Consumer) start(d *Lease) {
	if c.batch != nil && c.batch.direct {
		c.batch.join(d)
		return
	}
	select {
	case c.work <- d:
		return
	default:
	}
	c.workers.Add(1)
	go serve(c, d, c.work, c.handle)
}

// serve is a worker goroutine: it runs do(first), then what do hands it
// back (the next message, already holding the slot do freed), then
// whatever arrives on ch, until it has waited workerIdle for more or the
// Consumer quits.
func serve[T any](c *Consumer, first T, ch <-chan T, do func(T) (T, bool)) {
	defer c.workers.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for v := first; ; {
		if next, ok := do(v); ok {
			v = next
			continue
		}
		idle.Reset(workerIdle)
		select {
		case v = <-ch:
		case <-idle.C:
			return
		case <-c.quit:
			return
		}
	}
}

// startBatch hands a due batch (Batch without middleware) to an idle
// worker, or to a new one; the worker sends it and settles its members.
func (c *Consumer) startBatch(bt *hbatch) {
	select {
	case c.runs <- bt:
		return
	default:
	}
	c.workers.Add(1)
	go serve(c, bt, c.runs, c.batch.runDirect)
}

// goSettle runs settle, which may wait for SQS, on a worker goroutine of
// its own, for a delivery that holds a handler slot and whose result is
// known without a handler to run (Batch without middleware).
func (c *Consumer) goSettle(settle func()) {
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		settle()
	}()
}

// handle runs the handler for one delivery and settles it. A delivery
// whose lease ended while it waited (lost or expired: another consumer may
// hold the message by now) never reaches the handler.
//
// When settling freed the slot for a ready message at once, handle
// returns that message (it holds the slot) for the calling worker to run
// next, saving a hand-over to another goroutine for every message.
func (c *Consumer) handle(d *Lease) (next *Lease, ok bool) {
	if c.stopping.Load() || d.Err() != nil {
		c.settle(d, nil, false)
		return nil, false
	}
	d.handlerStarted(time.Now())
	c.observe(EventStarted, d.msg, nil)
	ctx := d.ctx
	if c.s.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.s.handlerTimeout)
		defer cancel()
	}
	d.inHandler.Store(true)
	err := c.call(ctx, d.msg)
	d.inHandler.Store(false)
	next = c.settleTake(d, err, true)
	return next, next != nil
}

// call runs the handler, turning a panic into a *PanicError.
func (c *Consumer) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			// One readable line at Error, naming where it panicked; the
			// whole stack at Debug.
			c.log(slog.LevelError, "sqsconsumer: handler panicked", "message_id", m.ID, "panic", fmt.Sprint(v), "at", panicSite())
			c.log(slog.LevelDebug, "sqsconsumer: handler panic stack", "message_id", m.ID, "stack", string(pe.Stack))
			err = pe
		}
	}()
	return c.handler.HandleMessage(ctx, m)
}

// backoff is WithBackoff's function for receiveCount. One that panics is
// a bug in the caller's code, not in the message: the panic is logged and
// DefaultBackoff used instead, rather than ending the process from a
// library goroutine.
func (c *Consumer) backoff(receiveCount int) (d time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			c.log(slog.LevelError, "sqsconsumer: the WithBackoff function panicked; using DefaultBackoff", "panic", fmt.Sprint(v))
			d = DefaultBackoff(receiveCount)
		}
	}()
	return c.s.backoff(receiveCount)
}

// panicSite names where a handler panicked, called from the deferred
// recover: of the frames below runtime.gopanic, the first in the user's
// code (outside the runtime and this module's non-test files), else the
// first outside the runtime. "" if none is found.
func panicSite() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	var fallback string
	panicking := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			panicking = true
		case !panicking || strings.HasPrefix(f.Function, "runtime."):
		default:
			site := fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
			if !strings.HasPrefix(f.Function, "github.com/sqskit/sqsconsumer.") || strings.HasSuffix(f.File, "_test.go") {
				return site
			}
			if fallback == "" {
				fallback = site
			}
		}
		if !more {
			return fallback
		}
	}
}

// settle deletes or releases a delivery's message after its handler
// returned (ran) or instead of running it (!ran: shutdown); finish then
// ends its lease, frees its slot and moves its FIFO group on. A successful
// handler's delete is batched without the worker waiting for it: finish
// runs when SQS has answered.
func (c *Consumer) settle(l *Lease, err error, ran bool) {
	if next := c.settleTake(l, err, ran); next != nil {
		c.start(next)
	}
}

// settleTake is settle, except that a ready message that took the slot
// freed here (before the delete was confirmed) is returned for the caller
// to run rather than handed to a worker: the caller must run it.
func (c *Consumer) settleTake(l *Lease, err error, ran bool) (next *Lease) {
	m := l.msg
	// Settling uses its own context: the handler's may be cancelled. The
	// lease's deadline bounds every call, and the hard stop bounds them
	// at shutdown.
	ctx := c.settleCtx
	failed := !ran || err != nil
	if c.br != nil && ran {
		c.br.record(outcomeOf(err, l.Err(), errors.Is(context.Cause(l.ctx), ErrShutdown)))
	}
	switch {
	case l.settled():
		// The handler deleted or released the message itself.
		if err != nil {
			c.observe(EventFailed, m, err)
		} else {
			c.observe(EventSucceeded, m, nil)
		}
	case !ran && l.Err() != nil:
		// Its lease ended before the handler could start: the handle
		// is no good, and SQS hands the message out again by itself.
		c.log(slog.LevelWarn, "sqsconsumer: a received message's lease ended before its handler could start; not starting it", "message_id", m.ID, "error", l.Err())
		c.finish(l, true, false, l.Err())
		return nil
	case !ran:
		if rerr := l.Release(ctx, 0); rerr != nil {
			c.log(slog.LevelWarn, "sqsconsumer: could not release an unstarted message at shutdown", "message_id", m.ID, "error", rerr)
		}
	case err == nil:
		c.observe(EventSucceeded, m, nil)
		return c.settleDelete(l, c.afterDelete)
	default:
		c.observe(EventFailed, m, err)
		if l.Err() != nil {
			break // lost or expired: the handle is no good, leave the message to SQS
		}
		if IsPermanent(err) && c.moveToDeadLetter(l, err) {
			// The copy is in the dead-letter queue: the source's message
			// goes as a success's would (a FIFO group moves on). A rare
			// path: the closure's allocation does not matter.
			return c.settleDelete(l, func(l *Lease, derr error) { c.movedDeleted(l, derr, err) })
		}
		after, ok := retryAfterOf(err)
		if !ok {
			after = c.backoff(m.ReceiveCount)
			after = max(after, time.Second)
		}
		if c.br != nil {
			after = max(after, c.br.holdFor()) // later probes try other messages
		}
		if errors.Is(context.Cause(l.ctx), ErrShutdown) {
			after = 0
		}
		after = min(after, MaxVisibilityTimeout)
		if after%time.Second != 0 {
			after = after.Truncate(time.Second) + time.Second
		}
		if rerr := l.Release(ctx, after); rerr != nil {
			c.log(slog.LevelWarn, "sqsconsumer: could not set the failed message's retry visibility", "message_id", m.ID, "error", rerr)
		}
		c.log(slog.LevelDebug, "sqsconsumer: handler failed; message released", "message_id", m.ID, "error", err, "retry_after", after.String())
	}
	c.finish(l, failed, ran, err)
	return nil
}

// settleDelete deletes the message of a delivery that is done with
// (handled, or moved to the dead-letter queue) and calls after (which
// finishes it) when SQS has answered. While SQS confirms the delete the
// handler slot can take the next message, which settleDelete returns for
// the caller to run: the lease keeps renewing until then. At most
// concurrency + max read-ahead such messages are held at once.
func (c *Consumer) settleDelete(l *Lease, after func(*Lease, error)) (next *Lease) {
	if l.slotEarly = c.takeSettleSlot(); l.slotEarly {
		next = c.fl.slotDone(l, true)
	}
	if !l.deleteAsync(after) {
		// A call of the lease is in flight (a renewal): this delete
		// waits for SQS, and the next message must not wait with it.
		if next != nil {
			c.start(next)
			next = nil
		}
		after(l, l.Delete(c.settleCtx))
	} // else after runs when SQS answers
	return next
}

// deleted finishes a succeeded handler's message once its delete returned
// err, logging a failure.
func (c *Consumer) deleted(l *Lease, err error) {
	if err != nil {
		c.log(slog.LevelError, "sqsconsumer: handler succeeded but the message could not be deleted; it will be delivered again", "message_id", l.msg.ID, "error", err)
	}
	c.finish(l, err != nil, true, nil)
}

// movedDeleted finishes a message moved to the dead-letter queue once its
// delete from the source returned err; handlerErr is the handler's
// Permanent error, for EventDone.
func (c *Consumer) movedDeleted(l *Lease, err, handlerErr error) {
	if err != nil {
		c.log(slog.LevelError, "sqsconsumer: message moved to the dead-letter queue but not deleted from the source; it will be delivered again", "message_id", l.msg.ID, "error", err)
	}
	c.finish(l, err != nil, true, handlerErr)
}

// finish ends a settled delivery: it stops the lease, records the figures,
// frees the slot, moves the FIFO group on (handing the rest of the group
// back when this one failed) and marks the delivery handled.
func (c *Consumer) finish(l *Lease, failed, ran bool, doneErr error) {
	defer c.handlers.Done()
	m := l.msg
	l.Stop()
	if ran {
		c.stats.settled(time.Since(l.arrived), l.renewalCount())
	} else {
		c.stats.unstarted()
	}
	c.observe(EventDone, m, doneErr)

	var next *Lease
	var drop []*Lease
	c.mu.Lock()
	if c.inflight[m.ID] == l {
		delete(c.inflight, m.ID)
	}
	if c.fifo && m.GroupID != "" && c.batch == nil { // a batcher orders its groups itself
		q := c.groups[m.GroupID][1:]
		switch {
		case failed && len(q) > 0:
			drop = q // keep the group's order: hand the rest back
			delete(c.groups, m.GroupID)
		case len(q) > 0:
			c.groups[m.GroupID] = q
			next = q[0]
		default:
			delete(c.groups, m.GroupID)
		}
	}
	c.mu.Unlock()
	if l.slotEarly {
		c.giveSettleSlot()
	} else {
		c.freeSlot(l, ran)
	}
	for _, n := range drop {
		c.settleUnstarted(n)
	}
	c.fl.drop(len(drop))
	if next != nil {
		c.enqueue(next)
	}
}

// freeSlot gives l's handler slot back (done: its handler returned) and
// starts the next ready message in it.
func (c *Consumer) freeSlot(l *Lease, done bool) {
	if next := c.fl.slotDone(l, done); next != nil {
		c.start(next)
	}
}

// settleUnstarted hands a message that never reached its handler back to
// SQS (visibility 0) and ends its delivery. The caller takes it out of the
// flow's waiting count. A FIFO message at the head of its group takes the
// messages behind it along (released too), so the group's order holds and
// a later delivery of the group is not left behind a message gone.
func (c *Consumer) settleUnstarted(d *Lease) {
	defer c.handlers.Done()
	if err := d.Release(c.settleCtx, 0); err != nil {
		c.log(slog.LevelWarn, "sqsconsumer: could not release a message", "message_id", d.msg.ID, "error", err)
	}
	d.Stop()
	c.stats.unstarted()
	c.observe(EventDone, d.msg, nil)
	var behind []*Lease
	c.mu.Lock()
	if c.inflight[d.msg.ID] == d {
		delete(c.inflight, d.msg.ID)
	}
	if g := d.msg.GroupID; c.fifo && g != "" {
		switch q := c.groups[g]; {
		case len(q) > 0 && q[0] == d:
			behind = q[1:]
			delete(c.groups, g)
		default:
			for i, o := range q {
				if o == d {
					c.groups[g] = append(q[:i:i], q[i+1:]...)
					break
				}
			}
		}
	}
	c.mu.Unlock()
	for _, n := range behind {
		c.settleUnstarted(n)
	}
	c.fl.drop(len(behind))
}

// granted starts the oldest waiting message in a slot of the fleet's
// budget given to this Consumer; false if none could start.
func (c *Consumer) granted() bool {
	next := c.fl.granted()
	if next == nil {
		return false
	}
	c.start(next)
	return true
}

// init connects package fleet to Consumers through internal/share, so
// that the root package exports nothing for the shared budget: fleet.Add
// calls share.Attach, which sets the Consumer's member before Run.
func init() {
	share.Attach = func(v any, m *share.Member) error {
		c, ok := v.(*Consumer)
		if !ok || c == nil {
			return fmt.Errorf("%w: not a *sqsconsumer.Consumer: %T", ErrInvalidOption, v)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case c.fl != nil:
			return fmt.Errorf("%w: the Consumer of %s has already started", ErrInvalidOption, c.queueURL)
		case c.member != nil:
			return fmt.Errorf("%w: the Consumer of %s already belongs to a fleet", ErrInvalidOption, c.queueURL)
		}
		c.member = m
		return nil
	}
}

// Pause stops the Consumer taking messages until Resume, without
// stopping Run: no receive is sent, messages received but not started are
// released at once (visibility 0; their handlers never run), and so are
// the messages of a receive in flight when it returns (a long poll is
// never cancelled, which would leave its messages invisible for a whole
// lease). Running handlers go on under their renewed leases and settle as
// usual. Pause before Run makes Run start paused; Run's shutdown works as
// usual while paused. A paused Consumer in a fleet gives its share of the
// budget to the others.
//
// A release does not add to a message's receive count, but the next
// receive of it will, as any receive does: pausing and resuming often
// while messages are held costs receives.
//
// Pause returns once those releases are answered (or failed, which is
// logged). Safe for concurrent use; pausing a paused Consumer does
// nothing.
func (c *Consumer) Pause() {
	c.mu.Lock()
	if c.paused {
		c.mu.Unlock()
		return
	}
	c.paused = true
	fl := c.fl
	var blocked []*Lease
	if fl != nil {
		blocked = c.groupTailsLocked()
	}
	c.mu.Unlock()
	if fl == nil {
		return
	}
	unstarted := append(blocked, fl.pause(len(blocked))...)
	c.log(slog.LevelInfo, "sqsconsumer: paused: receiving stopped, unstarted messages released", "released_unstarted", len(unstarted))
	c.settleAllUnstarted(unstarted)
}

// groupTailsLocked takes out of every FIFO group the messages waiting
// behind its first one (which runs, or waits to) and returns them; the
// caller holds c.mu.
func (c *Consumer) groupTailsLocked() []*Lease {
	var tails []*Lease
	for g, q := range c.groups {
		if len(q) > 1 {
			tails = append(tails, q[1:]...)
			c.groups[g] = q[:1]
		}
	}
	return tails
}

// settleAllUnstarted hands every message of ls back (settleUnstarted),
// each release on a goroutine of its own, and waits for them all.
func (c *Consumer) settleAllUnstarted(ls []*Lease) {
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() { c.settleUnstarted(l) })
	}
	wg.Wait()
}

// Resume ends a Pause: receiving starts again at once. Safe for
// concurrent use; resuming a Consumer that is not paused does nothing.
func (c *Consumer) Resume() {
	c.mu.Lock()
	if !c.paused {
		c.mu.Unlock()
		return
	}
	c.paused = false
	fl := c.fl
	c.mu.Unlock()
	if fl != nil {
		fl.resume()
	}
	c.log(slog.LevelInfo, "sqsconsumer: resumed")
}

// Paused reports whether the Consumer is paused (see Pause).
func (c *Consumer) Paused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
}

// releaseRaw sets the visibility of a message that never got a lease.
func (c *Consumer) releaseRaw(m types.Message, after time.Duration) {
	ctx, cancel := context.WithTimeout(c.settleCtx, 10*time.Second)
	defer cancel()
	secs := int32((after + time.Second - 1) / time.Second)
	if err := c.calls.changeVisibility(ctx, aws.ToString(m.ReceiptHandle), secs); err != nil {
		c.log(slog.LevelWarn, "sqsconsumer: could not hand a message back", "message_id", aws.ToString(m.MessageId), "error", err)
	}
}

// shutdown stops receiving, releases what has not started, waits for
// running handlers within the shutdown timeout, then cancels them with
// ErrShutdown and waits for them to return. One call timeout after the
// shutdown timeout it abandons calls to SQS still pending (hardStop).
func (c *Consumer) shutdown() {
	begun := time.Now()
	hard := time.AfterFunc(c.s.shutdownTimeout+shutdownCallTimeout, c.hardStop)
	defer hard.Stop()
	if c.br != nil {
		c.br.stop() // no more releases, probes or wakes of its own
	}
	c.cancelProbe()
	c.mu.Lock()
	c.stopping.Store(true)
	if c.batch != nil {
		c.batch.shutdown() // messages gathering for a batch are handed back at once
	}
	unstarted := c.groupTailsLocked()
	c.mu.Unlock()
	unstarted = append(unstarted, c.fl.stop(len(unstarted))...)
	close(c.stopPolls)
	running, _, asked, _ := c.fl.snapshot()
	c.log(slog.LevelInfo, "sqsconsumer: shutting down: receiving stopped, unstarted messages released, running handlers have the shutdown timeout to finish",
		"running", running, "released_unstarted", len(unstarted), "receives_in_flight_messages", asked, "shutdown_timeout", c.s.shutdownTimeout.String())
	c.settleAllUnstarted(unstarted)

	done := make(chan struct{})
	go func() {
		c.handlers.Wait()
		close(done)
	}()
	timer := time.NewTimer(time.Until(begun.Add(c.s.shutdownTimeout)))
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	c.mu.Lock()
	held := make([]*Lease, 0, len(c.inflight))
	for _, d := range c.inflight {
		held = append(held, d)
	}
	c.mu.Unlock()
	c.log(slog.LevelWarn, "sqsconsumer: shutdown timeout reached; cancelling running handlers", "running", len(c.inHandler()))
	for _, d := range held {
		d.abort(ErrShutdown)
	}
	warn := time.NewTicker(max(c.cfg.interval, time.Second))
	defer warn.Stop()
	for {
		select {
		case <-done:
			return
		case <-warn.C:
			// Only handlers still inside their function hold Run up for
			// good; settling calls end at the hard stop.
			if ids := c.inHandler(); len(ids) > 0 {
				c.log(slog.LevelWarn, "sqsconsumer: still waiting for handlers that ignore their cancelled context", "message_ids", ids)
			}
		}
	}
}

// inHandler returns the IDs of the messages whose handler is running.
func (c *Consumer) inHandler() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, d := range c.inflight {
		if d.inHandler.Load() {
			ids = append(ids, id)
		}
	}
	return ids
}

// leaseFor is the lease configuration for the next receive: the fixed one,
// or under WithAdaptiveVisibility twice the recent p99 with a heartbeat at
// a third of it.
func (c *Consumer) leaseFor() *leaseConfig {
	if c.s.adaptiveMax == 0 {
		return &c.cfg
	}
	cfg := c.cfg // one copy per receive, shared by its leases
	cfg.lease = c.stats.adaptiveVisibility(c.s.adaptiveMin, min(c.s.adaptiveMax, cfg.maxLease), cfg.lease)
	cfg.interval = cfg.lease / 3
	if !c.s.ceilingGraceSet {
		cfg.grace = cfg.interval
	}
	return &cfg
}

func (c *Consumer) observe(kind EventKind, m *Message, err error) {
	c.observeCount(kind, m, m.ReceiveCount, err)
}

func (c *Consumer) observeCount(kind EventKind, m *Message, count int, err error) {
	c.stats.countKind(kind, count)
	if c.s.observer == nil {
		return
	}
	now := time.Now()
	observe(c.s.observer, c.s.logger, Event{
		Kind:         kind,
		QueueURL:     c.queueURL,
		MessageID:    m.ID,
		ReceiveCount: count,
		GroupID:      m.GroupID,
		Time:         now,
		SinceReceive: now.Sub(m.Lease.arrived),
		SinceStart:   m.Lease.sinceHandlerStart(now),
		Err:          err,
		Message:      m,
	})
}

func (c *Consumer) log(level slog.Level, msg string, args ...any) {
	if c.s.logger == nil {
		return
	}
	logSafely(c.s.logger, level, msg, append([]any{"queue_url", c.queueURL}, args...)...)
}

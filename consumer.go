package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
)

// Consumer receives messages from one SQS queue and hands each to a
// Handler under a Lease. Make one with New and call Run. A Consumer is safe
// for concurrent use; Run may be called once.
type Consumer struct {
	client   Client
	queueURL string
	handler  Handler // with middleware applied
	s        settings

	runOnce sync.Once

	stats *StatsRecorder // always on: Stats, Advice, adaptive leases

	// Set up at Run, read-only afterwards.
	cfg   leaseConfig
	qs    QueueSettings
	fifo  bool
	calls *batchedCalls

	slotMu    sync.Mutex // guards freeSlots, slotFreed and settling
	freeSlots int        // handler slots not holding a message
	// settling counts messages whose handler succeeded and gave its slot
	// back before SQS confirmed the delete; at most the concurrency.
	settling int
	// starting counts messages handed to a worker whose handler has not
	// begun. While startingLimit are starting, the process is not
	// keeping up (CPU-bound), and pollers wait rather than receive
	// messages that would only queue here, leased, unavailable to other
	// consumers.
	starting      int
	startingLimit int // set at Run: startingBatches batches
	// slotFreed wakes the waiting pollers when slotWant slots are free:
	// the fewest a waiting poller will take (a full batch while it
	// gathers, 1 after). Waking pollers for fewer would only send them
	// back to sleep.
	slotFreed wakeup
	slotWant  int

	// afterDelete is c.deleted as a func value made once: a lease's
	// asynchronous delete reports to it without allocating.
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

	handlers   sync.WaitGroup // deliveries being handled or settled
	hbStarters sync.WaitGroup // heartbeat group timers armed or firing
	workers    sync.WaitGroup // worker goroutines, idle or busy
	work       chan *Lease    // hands a delivery to an idle worker
	quit       chan struct{}  // closed after shutdown: idle workers exit
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
		s.pollers = min((s.concurrency+MaxBatchSize-1)/MaxBatchSize, 16)
	}
	stats := NewStatsRecorder()
	stats.direct = true
	s.stats = stats
	return &Consumer{
		client:   c,
		queueURL: queueURL,
		handler:  Chain(h, s.middleware...),
		s:        s,
		stats:    stats,
	}, nil
}

// Stats returns what the Consumer has measured so far: receive-to-settle
// percentiles (in-process queueing included), the receive-count
// distribution, renewals per message. Safe to call at any time, from any
// goroutine.
func (c *Consumer) Stats() Stats { return c.stats.Stats() }

// Advice checks Stats against the queue's settings (read at Run: visibility
// timeout, retention, redrive policy) and the shutdown timeout, and
// recommends a visibility timeout (p99 x 2), heartbeating for long tails,
// and a safe time to the dead-letter queue, each with its reason. Safe for
// concurrent use; before Run it knows only the figures.
func (c *Consumer) Advice() Advice {
	c.mu.Lock()
	qs := c.qs
	c.mu.Unlock()
	return c.stats.Stats().Advise(qs)
}

// QueueURL returns the URL of the queue the Consumer reads.
func (c *Consumer) QueueURL() string { return c.queueURL }

// Run receives and handles messages until ctx is cancelled or a permanent
// error occurs (the queue does not exist, access is denied). It blocks.
//
// When ctx is cancelled Run stops receiving at once (an in-flight long poll
// is abandoned), releases messages whose handlers have not started
// (visibility 0), and gives running handlers the shutdown timeout to finish
// while their leases stay renewed; then their contexts are cancelled with
// ErrShutdown and, unless they succeed, their messages are released. Run
// returns only after every goroutine it started has exited: nil after a
// clean shutdown, the permanent error otherwise. The handlers' contexts
// derive from context.Background, not from ctx, so cancelling ctx never
// interrupts a handler by itself.
func (c *Consumer) Run(ctx context.Context) error {
	first := false
	c.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("sqsconsumer: Run may be called only once per Consumer")
	}
	if err := c.setup(ctx); err != nil {
		return err
	}
	pollCtx, stopPolling := context.WithCancelCause(ctx)
	defer stopPolling(nil)
	var pollers sync.WaitGroup
	for range c.s.pollers {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			c.poll(pollCtx, stopPolling)
		}()
	}
	pollers.Wait()

	c.shutdown()
	close(c.quit)
	c.workers.Wait()
	c.hbStarters.Wait() // every lease is stopped: their groups' timers are stopped or done
	c.calls.close()
	c.logAdvice()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// logAdvice logs the run's figures and the advice drawn from them, when a
// logger is set and anything was processed.
func (c *Consumer) logAdvice() {
	if c.s.logger == nil {
		return
	}
	st := c.Stats()
	if st.Processed == 0 {
		return
	}
	c.log(slog.LevelInfo, "sqsconsumer: stats", "stats", st)
	for _, r := range c.Advice().Recommendations {
		c.log(r.Severity.Level(), "sqsconsumer: advice", "topic", string(r.Topic), "value", r.Value, "advice", r.Message)
	}
}

// setup reads what the options left to the queue, checks the lease
// options against it, and prepares the run state.
func (c *Consumer) setup(ctx context.Context) error {
	lease := c.s.visibility
	c.fifo = strings.HasSuffix(c.queueURL, ".fifo")
	// The queue's settings feed Advice; its VisibilityTimeout is the lease
	// when none was given. Without WithVisibilityTimeout a failure here
	// ends Run; with it, Advice just knows less.
	out, err := c.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(c.queueURL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameFifoQueue,
			types.QueueAttributeNameMessageRetentionPeriod, types.QueueAttributeNameRedrivePolicy,
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
	if err != nil {
		c.log(slog.LevelDebug, "sqsconsumer: could not read the queue's attributes; advice will know less", "error", err)
		out = &sqs.GetQueueAttributesOutput{}
	}
	c.fifo = c.fifo || out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"
	qs := QueueSettingsFromAttributes(out.Attributes)
	if lease == 0 {
		secs, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
		if err != nil {
			return fmt.Errorf("sqsconsumer: queue VisibilityTimeout %q is not a number", out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
		}
		lease = time.Duration(secs) * time.Second
		if lease < MinVisibilityTimeout {
			return fmt.Errorf("%w: the queue's VisibilityTimeout (%v) is below %v, too short to renew; set WithVisibilityTimeout", ErrInvalidOption, lease, MinVisibilityTimeout)
		}
	}
	cfg, err := c.s.leaseConfig(lease)
	if err != nil {
		return err
	}
	c.calls = newBatchedCalls(c.client, c.queueURL, max(deleteCallsPerPoller*c.s.pollers, minDeleteCalls))
	cfg.calls, cfg.queueURL = c.calls, c.queueURL
	c.cfg = cfg
	qs.VisibilityTimeout, qs.ShutdownTimeout = cfg.lease, c.s.shutdownTimeout
	c.mu.Lock()
	c.qs = qs
	c.mu.Unlock()
	c.freeSlots = c.s.concurrency
	c.startingLimit = startingBatches * c.s.batchSize
	c.inflight = make(map[string]*Lease)
	c.work = make(chan *Lease)
	c.quit = make(chan struct{})
	c.groups = make(map[string][]*Lease)
	c.afterDelete = c.deleted
	return nil
}

// A Consumer's delete batch calls in flight are limited to
// deleteCallsPerPoller per poller (at least minDeleteCalls): a poller
// receives at most one batch per round trip, so this leaves the deletes
// twice the receives' pace, and a burst of settlements waits for a call
// instead of opening a connection of its own.
const (
	deleteCallsPerPoller = 2
	minDeleteCalls       = 4
)

// startingBatches is how many receives' worth of messages may wait for
// their worker to begin before the pollers hold off (see starting). One
// made pollers stall behind each other's fresh batch when the receive
// answered at once (BenchmarkConsumerOverhead c=200: 1.8 -> 3.5 us); two
// keeps that and still curbs the queueing.
const startingBatches = 2

// receiveGather is how long a poller of a busy queue waits for more handler
// slots to free up before it receives fewer than a full batch. Slots come
// back one by one as handlers finish; receiving each as it frees would
// double the calls per message for no gain in latency that matters. The
// wait ends as soon as a full batch (or the concurrency) is free, so only
// slowly freeing slots ever wait it out. 100 ms keeps the quickstart at
// 1.11 calls per message (20 ms: 1.45, 50 ms: 1.28), its elapsed time
// unchanged.
const receiveGather = 100 * time.Millisecond

// acquire takes between 1 and n free handler slots, waiting for the first.
// When gather is set (the last receive came back full: the queue has a
// backlog) it waits up to receiveGather for n to be free. Slots are taken
// all at once, so pollers do not split a batch's worth between them. It
// returns 0 when ctx ends first.
func (c *Consumer) acquire(ctx context.Context, n int, gather bool, timer *time.Timer) int {
	timedOut, armed := !gather, false
	defer func() {
		if armed {
			timer.Stop()
		}
	}()
	var timeout <-chan time.Time
	for {
		c.slotMu.Lock()
		free := c.freeSlots
		if c.starting >= c.startingLimit {
			free = 0
		}
		if free >= n || (free >= 1 && timedOut) {
			take := min(free, n)
			c.freeSlots -= take
			c.slotMu.Unlock()
			return take
		}
		if !c.slotFreed.waiting() {
			c.slotWant = n
		}
		// Wake for the first free slot (to start gathering, or to take
		// it once the gather is over), else for a full batch.
		want := min(n, c.s.concurrency)
		if timedOut || free == 0 {
			want = 1
		}
		c.slotWant = min(c.slotWant, want)
		freed := c.slotFreed.wait()
		c.slotMu.Unlock()
		if free >= 1 && !armed {
			timer.Reset(receiveGather)
			armed, timeout = true, timer.C
		}
		select {
		case <-freed:
		case <-timeout:
			timedOut, armed, timeout = true, false, nil
		case <-ctx.Done():
			return 0
		}
	}
}

func (c *Consumer) free(n int) {
	if n <= 0 {
		return
	}
	c.slotMu.Lock()
	c.freeSlots += n
	c.wakePollersLocked()
	c.slotMu.Unlock()
}

// begun counts a delivery out of starting: its worker picked it up.
func (c *Consumer) begun() {
	c.slotMu.Lock()
	c.starting--
	if c.starting == c.startingLimit-1 {
		c.wakePollersLocked()
	}
	c.slotMu.Unlock()
}

// wakePollersLocked wakes the waiting pollers if what they wait for is
// there: slotWant free slots, and fewer than startingLimit messages
// still starting. The caller holds slotMu.
func (c *Consumer) wakePollersLocked() {
	if c.freeSlots >= c.slotWant && c.starting < c.startingLimit {
		c.slotFreed.fire()
	}
}

// takeSettleSlot reserves room for one more message that has given its
// handler slot back before its delete was confirmed.
func (c *Consumer) takeSettleSlot() bool {
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	if c.settling >= c.s.concurrency {
		return false
	}
	c.settling++
	return true
}

func (c *Consumer) giveSettleSlot() {
	c.slotMu.Lock()
	c.settling--
	c.slotMu.Unlock()
}

// poll is one poller: it reserves free handler slots, long-polls for at
// most that many messages, and dispatches them.
func (c *Consumer) poll(ctx context.Context, stop context.CancelCauseFunc) {
	failures := 0
	full := false // the last receive returned all it asked for
	gather := time.NewTimer(receiveGather)
	gather.Stop()
	for {
		n := c.acquire(ctx, c.s.batchSize, full, gather)
		if n == 0 {
			return
		}
		cfg := c.leaseFor()
		sent := time.Now()
		out, err := c.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.queueURL),
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             int32(c.s.waitTime / time.Second),
			VisibilityTimeout:           int32(cfg.lease / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			c.free(n)
			if ctx.Err() != nil {
				return
			}
			if classify(err) == kindPermanent {
				c.mu.Lock()
				if c.fatal == nil {
					c.fatal = fmt.Errorf("sqsconsumer: ReceiveMessage: %w", err)
				}
				c.mu.Unlock()
				c.log(slog.LevelError, "sqsconsumer: permanent receive error; shutting down", "error", err)
				stop(err)
				return
			}
			c.log(slog.LevelWarn, "sqsconsumer: receive failed; backing off", "error", err, "attempt", failures+1)
			if !sleepCtx(ctx, receiveBackoff(failures)) {
				return
			}
			failures++
			continue
		}
		arrived := time.Now()
		handedOver := HandoverTime(sent, arrived)
		failures = 0
		full = len(out.Messages) >= n
		if len(out.Messages) > n {
			// SQS never does this; a misbehaving endpoint must not
			// break the slot accounting.
			c.log(slog.LevelError, "sqsconsumer: ReceiveMessage returned more messages than asked for; releasing the extra", "asked", n, "got", len(out.Messages))
			for _, m := range out.Messages[n:] {
				c.releaseRaw(m, 0)
			}
			out.Messages = out.Messages[:n]
		}
		c.free(n - len(out.Messages))
		g := newHBGroup(&c.hbStarters)
		for _, m := range out.Messages {
			c.dispatch(m, handedOver, arrived, cfg, g)
		}
	}
}

// receiveBackoff is the pause after the n-th consecutive receive failure:
// 100 ms doubling to 10 s, jittered.
func receiveBackoff(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 0; i < n && d < 10*time.Second; i++ {
		d *= 2
	}
	d = min(d, 10*time.Second)
	return d/2 + rand.N(d/2+1)
}

// dispatch takes one received message: a redelivery of a message already
// held here is adopted by its lease; anything else gets a lease at once
// (so it is renewed while it waits) and a handler when its turn comes.
// It owns one slot for the message. handedOver is the receive's
// conservative hand-over estimate (the lease clock), arrived when its
// answer came.
func (c *Consumer) dispatch(raw types.Message, handedOver, arrived time.Time, cfg *leaseConfig, g *hbGroup) {
	id, handle := aws.ToString(raw.MessageId), aws.ToString(raw.ReceiptHandle)
	if id == "" || handle == "" {
		c.log(slog.LevelError, "sqsconsumer: ReceiveMessage returned a message without MessageId or ReceiptHandle; skipping it", "message_id", id)
		c.free(1)
		return
	}
	c.mu.Lock()
	if d, ok := c.inflight[id]; ok {
		c.mu.Unlock()
		c.free(1)
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
	if c.stopping.Load() {
		c.mu.Unlock()
		c.free(1)
		c.releaseRaw(raw, 0)
		return
	}
	l := newLease(raw, handedOver, arrived, cfg)
	m := l.msg
	// Not a child of any Run-scoped context: cancelling Run's context
	// must not interrupt handlers (shutdown cancels each one itself), and
	// a parent would take a shared lock for every message.
	l.start(context.Background(), g)
	c.inflight[id] = l
	startNow := true
	if c.fifo && m.GroupID != "" {
		q, busy := c.groups[m.GroupID]
		c.groups[m.GroupID] = append(q, l)
		startNow = !busy
	}
	c.mu.Unlock()
	c.observe(EventReceived, m, nil)
	if startNow {
		c.start(l)
	}
}

// workerIdle is how long a worker goroutine waits for another message
// before it exits. Reusing workers saves growing a fresh goroutine's stack
// for every message.
const workerIdle = 30 * time.Second

// start hands d to an idle worker, or to a new one. There are never more
// workers busy than handler slots.
func (c *Consumer) start(d *Lease) {
	c.handlers.Add(1)
	c.slotMu.Lock()
	c.starting++
	c.slotMu.Unlock()
	select {
	case c.work <- d:
		return
	default:
	}
	c.workers.Add(1)
	go c.worker(d)
}

func (c *Consumer) worker(d *Lease) {
	defer c.workers.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		c.handle(d)
		idle.Reset(workerIdle)
		select {
		case d = <-c.work:
		case <-idle.C:
			return
		case <-c.quit:
			return
		}
	}
}

// handle runs the handler for one delivery and settles it, then starts the
// next message of its FIFO group, if any.
func (c *Consumer) handle(d *Lease) {
	c.begun()
	if c.stopping.Load() {
		c.settle(d, nil, false)
		return
	}
	c.observe(EventStarted, d.msg, nil)
	ctx := d.ctx
	if c.s.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.s.handlerTimeout)
		defer cancel()
	}
	err := c.call(ctx, d.msg)
	c.settle(d, err, true)
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
	m := l.msg
	// Settling uses its own context: the handler's may be cancelled, and
	// the lease's deadline bounds every call anyway.
	ctx := context.Background()
	failed := !ran || err != nil
	switch {
	case l.settled():
		// The handler deleted or released the message itself.
		if err != nil {
			c.observe(EventFailed, m, err)
		} else {
			c.observe(EventSucceeded, m, nil)
		}
	case !ran:
		if rerr := l.Release(ctx, 0); rerr != nil {
			c.log(slog.LevelWarn, "sqsconsumer: could not release an unstarted message at shutdown", "message_id", m.ID, "error", rerr)
		}
	case err == nil:
		c.observe(EventSucceeded, m, nil)
		// While SQS confirms the delete the handler slot can take the
		// next message: the lease keeps renewing until then. At most
		// the concurrency of such messages are held at once.
		if l.slotEarly = c.takeSettleSlot(); l.slotEarly {
			c.free(1)
		}
		if !l.deleteAsync(c.afterDelete) {
			c.deleted(l, l.Delete(ctx))
		} // else c.deleted finishes when SQS answers
		return
	default:
		c.observe(EventFailed, m, err)
		if l.Err() != nil {
			break // lost or expired: the handle is no good, leave the message to SQS
		}
		after, ok := retryAfterOf(err)
		if !ok {
			after = c.s.backoff(m.ReceiveCount)
			after = max(after, time.Second)
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
	c.finish(l, failed, ran)
}

// deleted finishes a succeeded handler's message once its delete returned
// err, logging a failure.
func (c *Consumer) deleted(l *Lease, err error) {
	if err != nil {
		c.log(slog.LevelError, "sqsconsumer: handler succeeded but the message could not be deleted; it will be delivered again", "message_id", l.msg.ID, "error", err)
	}
	c.finish(l, err != nil, true)
}

// finish ends a settled delivery: it stops the lease, records the figures,
// frees the slot, moves the FIFO group on (handing the rest of the group
// back when this one failed) and marks the delivery handled.
func (c *Consumer) finish(l *Lease, failed, ran bool) {
	defer c.handlers.Done()
	m := l.msg
	l.Stop()
	if ran {
		c.stats.settled(time.Since(l.arrived), l.renewalCount())
	} else {
		c.stats.unstarted()
	}

	var next *Lease
	var drop []*Lease
	c.mu.Lock()
	delete(c.inflight, m.ID)
	if c.fifo && m.GroupID != "" {
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
		c.free(1)
	}
	for _, n := range drop {
		c.settleUnstarted(n)
	}
	if next != nil {
		c.start(next)
	}
}

// settleUnstarted hands a message that never reached its handler back to
// SQS (visibility 0) and frees its slot.
func (c *Consumer) settleUnstarted(d *Lease) {
	if err := d.Release(context.Background(), 0); err != nil {
		c.log(slog.LevelWarn, "sqsconsumer: could not release a message", "message_id", d.msg.ID, "error", err)
	}
	d.Stop()
	c.stats.unstarted()
	c.mu.Lock()
	delete(c.inflight, d.msg.ID)
	c.mu.Unlock()
	c.free(1)
}

// releaseRaw sets the visibility of a message that never got a lease.
func (c *Consumer) releaseRaw(m types.Message, after time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	secs := int32((after + time.Second - 1) / time.Second)
	if err := c.calls.changeVisibility(ctx, aws.ToString(m.ReceiptHandle), secs); err != nil {
		c.log(slog.LevelWarn, "sqsconsumer: could not hand a message back", "message_id", aws.ToString(m.MessageId), "error", err)
	}
}

// shutdown runs after the pollers stopped: it releases what has not
// started, waits for running handlers within the shutdown timeout, then
// cancels them with ErrShutdown and waits for them to return.
func (c *Consumer) shutdown() {
	c.mu.Lock()
	c.stopping.Store(true)
	var waiting []*Lease
	for g, q := range c.groups {
		if len(q) > 1 {
			waiting = append(waiting, q[1:]...)
			c.groups[g] = q[:1]
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.settleUnstarted(d)
		}()
	}
	wg.Wait()

	done := make(chan struct{})
	go func() {
		c.handlers.Wait()
		close(done)
	}()
	timer := time.NewTimer(c.s.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	c.mu.Lock()
	running := make([]*Lease, 0, len(c.inflight))
	for _, d := range c.inflight {
		running = append(running, d)
	}
	c.mu.Unlock()
	c.log(slog.LevelWarn, "sqsconsumer: shutdown timeout reached; cancelling running handlers", "running", len(running))
	for _, d := range running {
		d.abort(ErrShutdown)
	}
	for {
		select {
		case <-done:
			return
		case <-time.After(c.cfg.interval):
			c.mu.Lock()
			ids := make([]string, 0, len(c.inflight))
			for id := range c.inflight {
				ids = append(ids, id)
			}
			c.mu.Unlock()
			c.log(slog.LevelWarn, "sqsconsumer: still waiting for handlers that ignore their cancelled context", "message_ids", ids)
		}
	}
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

// arrivedAt is when the answer that first delivered m reached this
// process: events count from it.
func arrivedAt(m *Message) time.Time {
	if m.Lease != nil && !m.Lease.arrived.IsZero() {
		return m.Lease.arrived
	}
	return m.ReceivedAt
}

func (c *Consumer) observeCount(kind EventKind, m *Message, count int, err error) {
	c.stats.countKind(kind, count)
	if c.s.observer == nil {
		return
	}
	now := time.Now()
	c.s.observer.Observe(Event{
		Kind:         kind,
		QueueURL:     c.queueURL,
		MessageID:    m.ID,
		ReceiveCount: count,
		GroupID:      m.GroupID,
		Time:         now,
		SinceReceive: now.Sub(arrivedAt(m)),
		Err:          err,
		Message:      m,
	})
}

func (c *Consumer) log(level slog.Level, msg string, args ...any) {
	if c.s.logger == nil {
		return
	}
	c.s.logger.Log(context.Background(), level, msg, append([]any{"queue_url", c.queueURL}, args...)...)
}

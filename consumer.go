package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/internal/scaling"
	"github.com/sqskit/sqsconsumer/internal/share"
)

// Consumer receives messages from one SQS queue and hands each to a
// Handler under a Lease. Make one with New and call Run. A Consumer is safe
// for concurrent use; Run may be called once.
//
// A message moves forward through the files of this package: receive.go
// receives it and makes its delivery (one allocation with its Lease),
// fifo.go keeps its FIFO group's order, flow.go gives it a handler slot,
// worker.go runs its handler (batch.go gathers it into a batch for a Batch
// handler), settle.go is the one door after the handler (delete, retry,
// dead-letter, hand back), and calls.go coalesces the SQS calls of many
// leases, which the pollers make between receives (lanes.go). shutdown.go
// winds it all down.
//
// Lock order: a Consumer's locks are leaves, each taken alone, except
// that the flow's mu is held while it asks the breaker's mu (its gate) and
// the fleet member's (its share), and the batcher's mu while it asks the
// groupOrder's mu and a Lease's mu. Consumer.mu, held.mu, groupOrder.mu,
// Lease.mu and the coalescers' locks take no other lock.
type Consumer struct {
	client   Client
	queueURL string
	handler  Handler // with middleware applied
	s        settings
	batch    *batcher       // the handler given to New, when it came from Batch
	stats    *statsRecorder // always on: Stats, adaptive leases
	ev       eventSink      // the Consumer's events: statistics and the Observer

	runOnce sync.Once

	// Set up at Run, read-only afterwards.
	cfg      leaseConfig
	calls    *coalescedCalls
	fl       *flow         // when to receive, how much; the handler slots (also under mu for flowOf)
	held     *held         // the deliveries held, by message ID
	order    groupOrder    // FIFO group order
	pollWait time.Duration // WaitTimeSeconds of every receive
	dlq      deadLetter    // where Permanent errors' messages go
	br       *breaker      // WithBreaker; nil when off
	scaler   *scaler       // WithScaling; nil when off (set by New)

	pool      poolInfo    // the HTTP client's idle pool, as New saw it
	dlqWarned atomic.Bool // the missing dead-letter queue was logged
	failLog   failureLog  // the rate of failure lines
	progress  progress    // for Health
	polls     pollSet     // long polls in flight (WithCancelIdlePollsAtShutdown)

	// stopping is set at shutdown: no handler starts any more. paused is
	// set between Pause and Resume.
	stopping atomic.Bool
	paused   atomic.Bool

	// settleCtx bounds every settling call (deletes, releases) and
	// pollCtx every receive; both are cancelled at the hard stop, one
	// call timeout after the shutdown budget, so Run returns in time
	// even when SQS does not answer.
	settleCtx   context.Context
	pollCtx     context.Context
	hardStop    context.CancelFunc
	fatalStop   context.CancelFunc // ends Run's wait after a permanent receive error
	probeCtx    context.Context    // a probe's context; cancelled at shutdown
	cancelProbe context.CancelFunc // cancels probeCtx
	afterDelete func(*Lease, error)

	// The goroutines Run owns and joins: pollers, workers (idle or busy),
	// the breaker's (releases at an opening, probes), and the deliveries
	// held, from dispatch to the end of their settlement.
	pollers  sync.WaitGroup
	workers  sync.WaitGroup
	aux      sync.WaitGroup
	handlers deliveryCount
	work     chan *delivery // hands a delivery to an idle worker
	runs     chan *hbatch   // hands a due batch to an idle worker (Batch without middleware)
	quit     chan struct{}  // closed after shutdown: idle workers exit

	mu     sync.Mutex // guards the fields below, and the setting of fl
	fatal  error      // a permanent receive error that ends Run
	runErr error      // what Run returned, for Health
	// member is the Consumer's place in a fleet's shared slot budget
	// (package fleet), nil for a Consumer on its own. Set before Run.
	member *share.Member
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
	pool, poolKnown := idleConnsPerHost(c)
	poolCapped := false
	if s.pollers == 0 {
		// Enough receives in flight to ask for every slot and the whole
		// read-ahead in full receives, unless the HTTP client's pool
		// keeps fewer connections (see lanesPerIdleConn).
		s.pollers = (s.concurrency+s.maxAhead+s.receiveSize-1)/s.receiveSize + 1
		if bound := max(lanesPerIdleConn*pool, 2); poolKnown && bound < s.pollers {
			s.pollers, poolCapped = bound, true
		}
	}
	bt, _ := h.(*batcher)
	if bt != nil && bt.maxSize() > s.concurrency {
		return nil, fmt.Errorf("%w: Batch size %d exceeds WithConcurrency(%d): each message of a batch holds a handler slot, so the batch could never fill", ErrInvalidOption, bt.maxSize(), s.concurrency)
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
		client:   countCalls(c, &stats.calls),
		queueURL: queueURL,
		handler:  handler,
		s:        s,
		stats:    stats,
		ev:       eventSink{observer: s.observer, logger: s.logger, stats: stats, queueURL: queueURL},
		batch:    bt,
		pool:     poolInfo{idle: pool, known: poolKnown, capped: poolCapped},
	}
	if s.scaling != nil {
		c2.scaler = &scaler{p: *s.scaling, sig: scaling.NewSignal(s.scaling.internal()), fig: s.scaling.figure()}
		c2.scaler.fig.Reason = "Run has not read the queue's counts yet"
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
	st.MaxCallsInFlight, st.IdleConnsPerHost, st.LimitedByPool = c.s.pollers, c.pool.idle, c.pool.limited.Load()
	st.Concurrency = c.s.concurrency
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
// error occurs (the queue or its dead-letter queue does not exist, access
// is denied, or 10 receives in a row fail with the same client error,
// about a minute of backoff). It blocks. Run on a context already
// cancelled, or cancelled while Run reads the queue's attributes at its
// start, returns nil having received nothing.
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
	defer func() {
		c.mu.Lock()
		c.runErr = err
		c.mu.Unlock()
		c.progress.stage.Store(runStopped)
	}()
	if ctx.Err() != nil {
		return nil // cancelled before it began: nothing to do, nothing went wrong
	}
	stamp(&c.progress.begun)
	c.progress.stage.Store(runStarting)
	if err := c.setup(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Cancelled while it read the queue (a SIGTERM during
			// startup): nothing was received, so nothing to settle.
			return nil
		}
		return err
	}
	stamp(&c.progress.resumed)
	c.progress.stage.Store(runRunning)
	runCtx, fatalStop := context.WithCancel(ctx)
	defer fatalStop()
	c.fatalStop = fatalStop
	c.fl.begin()
	if c.scaler != nil {
		c.aux.Add(1)
		go func() {
			defer c.aux.Done()
			c.runScaler(runCtx)
		}()
	}
	<-runCtx.Done()

	c.progress.stage.Store(runDraining)
	c.shutdown()
	close(c.quit)
	c.pollers.Wait()
	c.fl.closeLanes() // calls made from now on run on goroutines of their own
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

// setup reads what the options left to the queue, checks the lease
// options against it, and prepares the run state.
func (c *Consumer) setup(ctx context.Context) error {
	lease := c.s.visibility
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
		msg := err.Error()
		c.progress.recvErr.Store(&msg)
		c.log(slog.LevelDebug, "sqsconsumer: could not read the queue's attributes; FIFO is judged from the URL", "error", err)
		out = &sqs.GetQueueAttributesOutput{}
	} else {
		c.progress.answer()
	}
	fifo := strings.HasSuffix(c.queueURL, ".fifo") || out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"
	if c.dlq, err = deadLetterFor(c.client, c.queueURL, fifo, c.s.deadLetterURL, out.Attributes, attrErr); err != nil {
		return err
	}
	if err := c.checkDeadLetter(ctx); err != nil {
		return err
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
	c.calls = newCoalescedCalls(c.client, c.queueURL, max(c.s.pollers, minDeleteCalls), settleCtx)
	c.calls.report = c.callDone
	pollCtx, cancelPolls := context.WithCancel(context.Background())
	c.settleCtx, c.pollCtx = settleCtx, pollCtx
	c.hardStop = func() { cancelPolls(); cancelSettle() }
	cfg.calls, cfg.events.queueURL, cfg.settleCtx = c.calls, c.queueURL, settleCtx
	c.cfg = cfg
	c.order.on = fifo
	c.held = newHeld()
	c.probeCtx, c.cancelProbe = context.WithCancel(context.Background())
	fc := flowConfig{conc: c.s.concurrency, size: c.s.receiveSize, maxAhead: c.s.maxAhead, maxPollers: c.s.pollers,
		spawn: func() {
			c.pollers.Add(1)
			go c.poll()
		},
		// A coalesced call no poller took in time; the coalescer counts it
		// until it returns, and Run waits for that (calls.close).
		overflow: func(job func()) { go job() },
		atLimit:  c.atCallLimit}
	if c.batch != nil {
		fc.burst = c.batch.maxSize()
	}
	if c.s.breaker != nil {
		c.br = c.newBreaker(*c.s.breaker)
		fc.gate = c.br.limit
	}
	if c.s.rateLimit > 0 {
		fc.limiter = newTokenBucket(c.s.rateLimit, c.s.rateBurst)
	}
	c.work = make(chan *delivery)
	c.runs = make(chan *hbatch)
	c.quit = make(chan struct{})
	c.afterDelete = c.deleted
	c.mu.Lock()
	fc.paused, fc.member = c.paused.Load(), c.member
	fl := newFlow(fc)
	if m := c.member; m != nil {
		m.Bind(c.granted, fl.nudge)
	}
	c.fl = fl // under mu for flowOf and Pause
	c.mu.Unlock()
	c.calls.runOn(fl.submit)
	c.pollWait = c.s.waitTime
	if c.pollWait > 0 {
		// A receive in flight at shutdown is never cancelled, so it must
		// return within the shutdown timeout (at least a second: the SDK
		// cannot send a wait of 0).
		c.pollWait = max(min(c.pollWait, c.s.shutdownTimeout.Truncate(time.Second)), time.Second)
	}
	return nil
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
// usual. On a FIFO queue a group's messages stay in order: those behind
// a running one are released too, and none of a group runs while an
// earlier one of it is being released. Pause before Run makes Run start
// paused; Run's shutdown works as usual while paused. A paused Consumer in
// a fleet gives its share of the budget to the others.
//
// A release does not add to a message's receive count, but the next
// receive of it will, as any receive does: pausing and resuming often
// while messages are held costs receives.
//
// Pause returns once those releases are answered (or failed, which is
// logged). Safe for concurrent use; pausing a paused Consumer does
// nothing.
func (c *Consumer) Pause() {
	if !c.paused.CompareAndSwap(false, true) {
		return
	}
	fl := c.flowOf()
	if fl == nil {
		return // setup reads paused
	}
	unstarted := c.unstarted(fl.pause())
	c.log(slog.LevelInfo, "sqsconsumer: paused: receiving stopped, unstarted messages released", "released_unstarted", len(unstarted))
	c.handBack(unstarted)
}

// Resume ends a Pause: receiving starts again at once. Safe for
// concurrent use; resuming a Consumer that is not paused does nothing.
func (c *Consumer) Resume() {
	if !c.paused.CompareAndSwap(true, false) {
		return
	}
	if fl := c.flowOf(); fl != nil {
		fl.resume()
	}
	c.log(slog.LevelInfo, "sqsconsumer: resumed")
}

// Paused reports whether the Consumer is paused (see Pause).
func (c *Consumer) Paused() bool { return c.paused.Load() }

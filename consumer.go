package sqsconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/sqskit/sqsconsumer/ecsprotect"

	"github.com/sqskit/sqsconsumer/internal/broken"
	healthprobe "github.com/sqskit/sqsconsumer/internal/probe"
	"github.com/sqskit/sqsconsumer/internal/scaling"
	"github.com/sqskit/sqsconsumer/internal/share"
)

// Consumer receives messages from one SQS queue and hands each to a
// Handler under a Lease. Make one with New and call Run. A Consumer is safe
// for concurrent use; Run may be called once.
//
// The Consumer is the configuration and the lifecycle: the client, the
// settings, the handler, the statistics, the scaling signal and the
// fleet membership. Run builds a run (run.go), which owns the message
// path while Run lasts; Pause, Stats and Health reach it through
// Consumer.run.
type Consumer struct {
	client   Client
	queueURL string
	handler  Handler // with middleware applied
	s        settings
	batch    *batcher       // the handler given to New, when it came from Batch
	stats    *statsRecorder // always on: Stats, adaptive leases
	ev       eventSink      // the Consumer's events: statistics and the Observer
	scaler   *scaler        // WithScaling; nil when off (set by New)
	pool     poolInfo       // the HTTP client's idle pool, as New saw it
	progress progress       // for Health

	runOnce sync.Once
	pause   pauseState // the paused state's one copy (pause.go)

	mu     sync.Mutex // guards the fields below
	run    *run       // set when Run has set it up; nil before
	runErr error      // what Run returned, for Health
	// member is the Consumer's place in a fleet's shared slot budget
	// (package fleet), nil for a Consumer on its own. Set before Run.
	member *share.Member
}

// New makes a Consumer of the queue at queueURL that calls h for each
// message. It validates everything it can without calling SQS and returns
// an error wrapping ErrInvalidOption that names each problem: a nil client
// or handler, an empty URL, an option out of range, or options that
// contradict each other or make one another do nothing, the error naming
// both (a heartbeat of half the lease or more, a lease longer than the
// maximum lease duration, a dead-letter queue that is the queue itself, a
// health stall limit an idle Consumer cannot keep, WithGroupLimit or
// WithFairDispatch on a FIFO queue, WithScaling with WithScalingTarget,
// and the others README's options table lists). Options that depend on
// the queue's own attributes (its VisibilityTimeout, its type when the
// URL does not end in ".fifo", its dead-letter queue's ARN) are checked
// again at Run.
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
	errs = append(errs, s.adaptiveConflicts()...)
	errs = append(errs, s.conflicts(queueURL)...) // conflicts.go
	bt, _ := h.(*batcher)
	if bt != nil && bt.maxSize() > s.concurrency {
		errs = append(errs, fmt.Errorf("%w: Batch size %d exceeds WithConcurrency(%d): each message of a batch holds a handler slot, so the batch could never fill", ErrInvalidOption, bt.maxSize(), s.concurrency))
	}
	if bt != nil && s.batchWindowKnown() { // else Run tells (queueConflicts)
		grace := ceilingGrace(heartbeatInterval(s.visibility, s.heartbeat), s.ceilingGrace, s.ceilingGraceSet)
		if err := s.batchWindowConflict(bt.window, grace, s.graceFrom(grace)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	pool, poolKnown := idleConnsPerHost(c)
	if s.pollers == 0 {
		// At most enough receives in flight to ask for every slot and
		// the whole read-ahead in full receives; within that, what the
		// HTTP client sustains (see inflight.go).
		s.pollers, s.adaptPollers = (s.concurrency+s.maxAhead+s.receiveSize-1)/s.receiveSize+1, true
	}
	handler := h
	if s.panicPolicy != nil && bt == nil {
		// Inside every middleware, so that middleware sees the policy's
		// error (a batch's panic is policed by the batcher).
		handler = &panicGuard{h: h, f: s.panicPolicy, ev: eventSink{logger: s.logger, queueURL: queueURL}}
	}
	for i := len(s.middleware) - 1; i >= 0; i-- {
		if handler = s.middleware[i](handler); isNil(handler) {
			return nil, fmt.Errorf("%w: WithMiddleware: middleware %d returned a nil handler", ErrInvalidOption, i)
		}
	}
	if s.protect && s.protector == nil {
		p, err := ecsprotect.New(ecsprotect.WithLogger(s.logger))
		if err != nil {
			return nil, fmt.Errorf("%w: WithScaleInProtection: %w", ErrInvalidOption, err)
		}
		s.protector = p
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
		pool:     poolInfo{idle: pool, known: poolKnown},
		pause:    pauseState{turn: make(chan struct{}, 1)},
	}
	if s.scaling != nil {
		c2.scaler = &scaler{p: *s.scaling, sig: scaling.NewSignal(s.scaling.internal()), fig: s.scaling.figure(),
			client: c2.client, queueURL: queueURL, conc: s.concurrency, stats: stats, ev: &c2.ev, kick: make(chan struct{}, 1)}
		c2.scaler.fig.Reason = "Run has not read the queue's counts yet"
	}
	if bt != nil && !bt.attach(len(s.middleware) == 0, s.panicPolicy) {
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
	if r := c.runOf(); r != nil {
		st.Running, st.Waiting, st.Asked, _ = r.fl.snapshot()
		g := r.fl.groups()
		st.TopGroups, st.NoisyGroups, st.OtherGroups, st.OtherGroupsSlotTime = g.top, g.noisy, g.others, g.otherSlots
	}
	st.MaxCallsInFlight, st.IdleConnsPerHost, st.LimitedByPool = c.s.pollers, c.pool.idle, c.pool.limited.Load()
	if c.s.adaptPollers {
		st.MaxCallsInFlight = startCallLimit(c.s.pollers, c.pool.idle, c.pool.known)
	}
	st.Bytes.Max = c.s.maxBytes
	st.Concurrency, st.ConcurrencyLimit = c.s.concurrency, c.s.concurrency
	if c.s.adaptive {
		st.ConcurrencyLimit = c.s.adaptiveInitial
	}
	if r := c.runOf(); r != nil {
		st.MaxCallsInFlight, st.Conns, st.Bytes = r.fl.callLimitNow(), r.conns.counts(), r.fl.bytesNow()
		r.bp.stats(&st)
	}
	if p := c.s.protector; p != nil {
		st.ScaleInProtection = p.Stats()
	}
	return st
}

// Settings returns the settings the Consumer ended up with (see
// Settings). Until Run has read the queue's attributes and accepted the
// queue the values that depend on the queue are listed in
// Settings.Pending (they stay so when Run refused the queue); after, every
// value is final. Run logs them once at Info as it starts receiving
// (WithLogger), under "settings". Safe to call at any time, from any
// goroutine; it takes no lock a message takes.
func (c *Consumer) Settings() Settings {
	c.mu.Lock()
	r, member := c.run, c.member
	c.mu.Unlock()
	return settingsView(&c.s, c.queueURL, member, r)
}

// runOf returns the run once Run has set it up, nil before.
func (c *Consumer) runOf() *run {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run
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
// Run's first contact with SQS (the read of the queue's attributes, then,
// if that read was refused and WithVisibilityTimeout makes it optional,
// the first receive) decides, with or without WithVisibilityTimeout: an
// error no retry can cure (a host name that does not resolve, a
// certificate that cannot be verified, access denied, a queue that does
// not exist, a signature refused for the wrong region, an endpoint that
// does not answer as SQS) makes Run return at once an error naming the
// queue and the cause; an error that can heal (a refused connection, a
// timeout, a 5xx, throttling) is retried with backoff, logged, and named
// in Health's Retrying until SQS answers.
//
// When ctx is cancelled Run stops receiving: it sends no new receive, and
// never cancels one in flight, which may already hold messages (they would
// stay invisible for a whole lease); such a receive returns within its
// long-poll wait, which is never longer than the shutdown timeout, and its
// messages are released (visibility 0). Messages whose handlers have not
// started are released too, and so is every message a handler hands back
// during the shutdown, but only once the last receive in flight has
// returned (their leases renewed until then; at the latest when the
// shutdown timeout ends, should a receive hang), unless they are to stay
// invisible for longer than the long-poll wait: released earlier, a
// message would be taken again by a receive still in flight and handed
// back, once per poll, each receive counted towards the queue's
// maxReceiveCount. Running handlers
// get the shutdown timeout to finish while their leases stay renewed; then
// their contexts are cancelled with ErrShutdown and, unless they succeed,
// their messages are released. A move to the dead-letter queue still
// pending when the shutdown timeout runs out is given up, and its message
// released for its backoff instead. Calls to SQS still pending one call
// timeout (shutdownCallTimeout, 5 s) after the shutdown timeout are
// abandoned (the hard stop: receives in flight too), so Run returns within the shutdown
// timeout plus that, unless a handler ignores its cancelled context: Run
// waits for every handler it started. A handler that returns after the
// shutdown timeout has its message settled (released at once, or deleted
// after a success) within one call timeout of its own from its return,
// which the hard stop does not cut, and its lease stays renewed until
// then: Run returns within the shutdown timeout plus one call timeout, or
// one call timeout after the last handler returns, whichever is later.
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
	if p := c.s.protector; p != nil {
		if err := p.Start(); err != nil {
			return fmt.Errorf("sqsconsumer: WithScaleInProtection: %w", err)
		}
		if c.s.ownProtect {
			// Cleared after the drain: nothing is held once Run's run has
			// returned. A failed clear is logged and counted by the
			// Protector.
			defer func() { _ = p.Close() }()
		}
	}
	c.mu.Lock()
	member := c.member // set before Run, if ever
	c.mu.Unlock()
	r := &run{client: c.client, queueURL: c.queueURL, handler: c.handler, s: &c.s, stats: c.stats, ev: &c.ev,
		batch: c.batch, scaler: c.scaler, prog: &c.progress, pool: &c.pool, member: member}
	if err := r.setup(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Cancelled while it read the queue (a SIGTERM during
			// startup): nothing was received, so nothing to settle.
			return nil
		}
		return err
	}
	// Under mu, so that a Pause either came before (the flow reads the
	// paused state from the start: nothing is held yet to release) or
	// finds the run. Binding the fleet member takes the fleet pool's lock
	// under it.
	c.mu.Lock()
	r.makeFlow(&c.pause.on)
	c.run = r
	c.mu.Unlock()
	c.progress.resume()
	c.progress.stage.Store(runRunning)
	if c.s.logger != nil {
		c.ev.log(slog.LevelInfo, "sqsconsumer: running", "settings", c.Settings())
	}
	err = r.run(ctx)
	c.logStats()
	return err
}

// logStats logs the Consumer's figures at the end of Run, if it handled
// anything.
func (c *Consumer) logStats() {
	if c.s.logger == nil {
		return
	}
	if st := c.Stats(); st.Processed > 0 {
		c.ev.log(slog.LevelInfo, "sqsconsumer: stats", "stats", st)
	}
}

// init connects package fleet to Consumers through internal/share, so
// that the root package exports nothing for the shared budget: fleet.Add
// and fleet.Serve call share.Attach, which sets the Consumer's member
// before Run, and refuse a Consumer whose Run has been called.
func init() {
	share.Attach = func(v any, m *share.Member) error {
		c, ok := v.(*Consumer)
		if !ok || c == nil {
			return fmt.Errorf("%w: not a *sqsconsumer.Consumer: %T", ErrInvalidOption, v)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case c.run != nil || c.progress.stage.Load() != runNotStarted:
			// Run was called: it may have read member already (it does
			// before setting up), and would run outside the budget.
			return fmt.Errorf("%w: the Consumer of %s has already started", ErrInvalidOption, c.queueURL)
		case c.member != nil:
			return fmt.Errorf("%w: the Consumer of %s already belongs to a fleet", ErrInvalidOption, c.queueURL)
		}
		if err := c.s.fleetConflicts(c.queueURL, m.IdlePause); err != nil { // conflicts.go
			return err
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
// A paused Consumer is healthy (Health's Status is "paused", HealthHandler
// answers 200) however long the pause lasts, and not ready (ReadyHandler
// answers 503: it takes no messages); see Health.
//
// Pause returns once those releases are answered (or failed, which is
// logged). Safe for concurrent use, before, during and after Run: Pause
// and Resume take effect one at a time, each whole, so a Resume called
// while a Pause is releasing waits for it, and the later of the two
// decides both Paused and whether the Consumer receives. Pausing a paused
// Consumer does nothing.
func (c *Consumer) Pause() {
	defer c.pause.take()()
	if c.pause.on.Load() {
		return
	}
	c.pause.on.Store(true)
	c.progress.resume() // Health's stall clock starts again (or at a Throttled's pause's end)
	if c.pause.delay != nil {
		c.pause.delay()
	}
	if r := c.runOf(); r != nil { // else Run starts paused
		r.pause()
	}
}

// Resume ends a Pause: receiving starts again at once. Safe for
// concurrent use (see Pause); resuming a Consumer that is not paused does
// nothing.
func (c *Consumer) Resume() {
	defer c.pause.take()()
	if !c.pause.on.Load() {
		return
	}
	c.pause.on.Store(false)
	c.progress.resume()
	if r := c.runOf(); r != nil && !broken.Is(broken.ResumeKeepsFlowPaused) {
		r.resume()
	}
	c.ev.log(slog.LevelInfo, "sqsconsumer: resumed")
}

// Paused reports whether the Consumer is paused (see Pause). Safe for
// concurrent use; it takes no lock.
func (c *Consumer) Paused() bool { return c.pause.on.Load() }

// Scaling returns the scaling signal's latest figure. Without WithScaling
// (or WithScalingTarget) it is never Known. Safe for concurrent use, at any
// time.
func (c *Consumer) Scaling() Scaling { return c.scaler.figure() }

// Health reports the Consumer's health now (see Health). Safe to call at
// any time, from any goroutine; it takes a lock the Consumer takes for
// every message, and walks the messages held, so call it every few
// seconds, not in a loop.
func (c *Consumer) Health() Health {
	c.mu.Lock()
	r, member := c.run, c.member
	c.mu.Unlock()
	return health(&c.s, &c.progress, member, r, c.pause.on.Load(), func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.runErr
	})
}

// HealthHandler returns an http.Handler for liveness checks (Kubernetes
// liveness probes, ECS container health checks through curl, load
// balancer target groups): it answers GET and HEAD with Health's
// HTTPStatus (200 when healthy, 503 when not; see Health for each state),
// with Health as a JSON body (for GET), and 405 to other methods. Mount it
// where the orchestrator looks, e.g. mux.Handle("/healthz",
// c.HealthHandler()).
func (c *Consumer) HealthHandler() http.Handler {
	return healthprobe.Handler(func() (any, int) { h := c.Health(); return h, h.HTTPStatus() })
}

// ReadyHandler returns an http.Handler for readiness and startup checks:
// as HealthHandler, with Health's ReadyHTTPStatus (200 only while the
// Consumer takes messages; see Health for each state). Mount it, e.g.,
// at mux.Handle("/readyz", c.ReadyHandler()).
func (c *Consumer) ReadyHandler() http.Handler {
	return healthprobe.Handler(func() (any, int) { h := c.Health(); return h, h.ReadyHTTPStatus() })
}

// ScalingHandler returns an http.Handler that serves the scaling signal
// as JSON, in the shape KEDA's metrics-api scaler reads: the figure is at
// valueLocation "replicas". It answers GET and HEAD, 200 when the figure
// is known and 503 (with the reason in "reason") when it is not, so that
// KEDA counts a failure and applies its fallback rather than act on a
// guess. A replica that has just started answers 200 within one handler's
// time (its first completion figures Run's first reading), so polls that
// land on it do not add up to a fallback; use fallback.behavior
// currentReplicasIfHigher so that a fallback never shrinks the service.
// The body is Scaling's JSON: known, reason, replicas, raw,
// visible, in_flight, delayed, arrival_rate, demand,
// capacity_per_replica, target_seconds, at, error. With KEDA, use
// metricType AverageValue and targetValue "1": the HPA then sets replicas
// = ceil(replicas / 1). docs/scaling.md in the module's repository has a
// complete ScaledObject. Safe for
// concurrent use.
func (c *Consumer) ScalingHandler() http.Handler {
	return healthprobe.Handler(func() (any, int) {
		s := c.Scaling()
		return scalingJSON{s, s.Target.Seconds()}, healthprobe.Status(s.Known)
	})
}

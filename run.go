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

	"github.com/sqskit/sqsconsumer/internal/broken"
	"github.com/sqskit/sqsconsumer/internal/share"
)

// run is one Run of a Consumer: it owns the message path, from the
// receive that brings a message to the call that settles it, and every
// piece of state that lives only while Run does. The Consumer keeps the
// configuration and the lifecycle (consumer.go) and reaches the run
// through one pointer (Consumer.run) for Pause, Stats and Health.
//
// A message moves forward through the run's files: receive.go receives
// it and makes its delivery (one allocation with its Lease), registry.go
// records it (by message ID, in the shutdown's count, in its FIFO group's
// order), flow.go gives it a handler slot (fair.go, which the flow holds
// and only its methods use, chooses which ready message a free slot goes
// to: on a standard queue, the group running fewest), worker.go runs its
// handler (batch.go gathers it into a batch for a Batch handler), settle.go is
// the one door after the handler (delete, retry, dead-letter, hand back),
// and calls.go coalesces the SQS calls of many leases, which the pollers
// make between receives (lanes.go). This file starts and winds it all
// down.
//
// Lock order. Every lock of the run is a leaf, taken alone, except:
//   - flow.mu is held while the flow asks the breaker's mu (its gate) and
//     the fleet member's (its share); the back pressure's limit and pause
//     it reads without a lock;
//   - batcher.mu is held while the batcher asks registry.mu and a
//     Lease's mu;
//   - registry.mu is held while it tells the scale-in Protector
//     (WithScaleInProtection) that it starts or stops holding anything;
//     the Protector's lock is a leaf.
//
// Lease.mu, failureLog.mu, pollSet.mu, run.mu, backPressure.mu and the
// coalescers' locks take no other lock. (Consumer.mu is held while Run
// publishes the run, which binds the fleet member under the fleet pool's
// lock: see Consumer.Run. The pause's turn, pauseState.turn, a channel
// only Pause and Resume take, is held for their whole call: it comes
// before Consumer.mu and every lock of the run.)
//
// Who runs each step of a message's life:
//
//	step                                     goroutine (joined by)
//	receive, dispatch, hand back unstarted   a poller (pollers)
//	a coalesced renewal or delete call       a poller between receives; one of
//	                                         its own when every poller waits in a
//	                                         long poll or once the shutdown has
//	                                         ended (the coalescer: calls.close)
//	heartbeat of a lease                     the lease's own (Lease.Stop, in finish)
//	handler, its settle, the next message    a worker (workers)
//	a Batch handler without middleware       a worker sends the batch and settles
//	                                         its successes; each failure (and each
//	                                         success whose lease has a call in
//	                                         flight) settles on a goroutine of its
//	                                         own (workers)
//	finish after a delete's answer           the goroutine that took the answer:
//	                                         a poller or the coalescer's; a
//	                                         delete's retries on a goroutine of
//	                                         their own (calls.close)
//	later FIFO messages handed back          a goroutine each (workers)
//	breaker's releases and probes, scaler,   aux
//	the in-flight quota's reads
//	shutdown                                 Run's own goroutine
type run struct {
	// The Consumer's, given at Run and read-only.
	client   Client
	queueURL string
	handler  Handler // with middleware applied
	s        *settings
	stats    *statsRecorder
	ev       *eventSink
	batch    *batcher      // the handler given to New, when it came from Batch
	scaler   *scaler       // WithScaling; nil when off
	prog     *progress     // for Health
	pool     *poolInfo     // the HTTP client's idle pool, as New saw it
	member   *share.Member // the fleet's budget; nil for a Consumer on its own

	// Set up by setup and makeFlow, read-only afterwards.
	cfg      leaseConfig
	conns    *connWatch // what the HTTP client's pool does for the calls
	calls    *coalescedCalls
	fl       *flow[*delivery] // when to receive, how much; the handler slots
	reg      *registry        // what the run holds
	pollWait time.Duration    // WaitTimeSeconds of every receive (settings.pollWait; 0: left out)
	// messageSize is the queue's MaximumMessageSize (maxMessageBytes
	// when unknown): the byte bound's first estimate of a message.
	messageSize int64
	dlq         deadLetter    // where Permanent errors' messages go
	br          *breaker      // WithBreaker; nil when off
	bp          *backPressure // Throttled's pause, WithAdaptiveConcurrency's limit

	dlqWarned atomic.Bool // the missing dead-letter queue was logged
	failLog   failureLog  // the rate of failure lines
	polls     pollSet     // long polls in flight (WithCancelIdlePollsAtShutdown)
	quota     quotaWatch  // the in-flight quota's signs, for Health (quota.go)

	// stopping is set at shutdown: no handler starts any more. paused is
	// the Consumer's paused state (pauseState.on), which only Pause and
	// Resume write; set by makeFlow. budgetEnd is when the shutdown
	// budget ends: written once before stopping is set, read only after
	// stopping is seen set.
	stopping  atomic.Bool
	paused    *atomic.Bool
	budgetEnd time.Time

	// drain is closed when the shutdown begins (Draining); handlerBase,
	// which carries it, is the parent of every handler's context. Set by
	// setup, closed by shutdown.
	drain       chan struct{}
	handlerBase context.Context

	// settleCtx bounds the settling calls (deletes, releases) and is the
	// coalesced calls' base, pollCtx bounds every receive; both are
	// cancelled at the hard stop (hardStop), one call timeout after the
	// shutdown timeout, which stays armed from the shutdown's start until
	// Run returns, so Run returns in time even when SQS does not answer.
	// A handler that returns once the shutdown timeout has run out (it
	// was cancelled, and may ignore that past the hard stop) has its
	// message settled under a call timeout of its own instead, from its
	// return (settle): under lateCtx, which the hard stop leaves alone.
	// From the shutdown timeout's end (late) what is added to the
	// coalesced calls (those settlements, the renewals of leases whose
	// handlers run on) goes under lateCtx (calls.rebase; what was added
	// before stays under the hard stop), and Run cancels it (endLate) once
	// every handler has returned and settled. A call whose callers all
	// waited (coalesce.Do) ends once they all stopped waiting: a
	// settlement under settleCtx that reaches the calls after late (a
	// release held for the receives in flight until the budget's end)
	// is still cut at the hard stop, and Run, which joins the pollers
	// that run the calls before it cancels lateCtx, does not wait for it.
	settleCtx   context.Context
	pollCtx     context.Context
	hardStop    context.CancelFunc
	lateCtx     context.Context
	endLate     context.CancelFunc
	late        atomic.Bool        // the shutdown timeout ran out: settle under lateCtx
	fatalStop   context.CancelFunc // ends Run's wait after a permanent receive error
	probeCtx    context.Context    // a probe's (and the quota's read's) context; cancelled at shutdown
	cancelProbe context.CancelFunc // cancels probeCtx
	// budgetCtx bounds a move to the dead-letter queue made under
	// settleCtx: it ends with the shutdown timeout (endBudget, when late
	// is set) or at the hard stop, so that a move that hangs still leaves
	// its fallback release a call timeout before the hard stop.
	budgetCtx   context.Context
	endBudget   context.CancelFunc
	afterDelete func(*Lease, error)

	// The goroutines the run owns and joins before Run returns: pollers;
	// workers (handlers, idle or busy, and the goroutines that settle on
	// their own: goSettle); aux (the breaker's releases and probes, the
	// scaler, the in-flight quota's reads). A delete's retries are counted
	// by the calls (calls.close).
	pollers sync.WaitGroup
	workers sync.WaitGroup
	aux     sync.WaitGroup
	work    chan *delivery // hands a delivery to an idle worker
	runs    chan *hbatch   // hands a due batch to an idle worker (Batch without middleware)
	quit    chan struct{}  // closed after shutdown: idle workers exit

	mu    sync.Mutex // guards fatal
	fatal error      // a permanent receive error that ends Run
}

// setup reads what the options left to the queue, checks the lease
// options against it, and prepares the run's state; makeFlow then makes the
// flow.
func (r *run) setup(ctx context.Context) error {
	lease := r.s.visibility
	// The queue's VisibilityTimeout is the lease when none was given, and
	// FifoQueue confirms the URL's suffix. A first contact that cannot
	// succeed ends Run; without WithVisibilityTimeout, or with
	// WithRequireDeadLetterQueue (which must see the RedrivePolicy), an
	// error that can heal is retried; otherwise the URL decides FIFO
	// (firstcontact.go).
	need := attrsRequired
	switch {
	case r.s.visibility == 0:
	case r.s.requireDLQ:
		need = attrsAwaited
	default:
		need = attrsOptional
	}
	out, attrErr, err := readQueue(ctx, r.client, r.queueURL, need, r.prog, r.ev)
	if err != nil {
		return err
	}
	fifo := strings.HasSuffix(r.queueURL, ".fifo") || out.Attributes[string(types.QueueAttributeNameFifoQueue)] == "true"
	r.messageSize = maxMessageBytes
	if n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)]); err == nil && n > 0 {
		r.messageSize = int64(n)
	}
	if r.dlq, err = deadLetterFor(r.client, r.queueURL, fifo, r.s.deadLetterURL, out.Attributes, attrErr); err != nil {
		return err
	}
	if err := requireDeadLetter(r.s, r.queueURL, r.dlq, out.Attributes, attrErr); err != nil {
		return err
	}
	if err := r.checkDeadLetter(ctx); err != nil {
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
	cfg, err := r.s.leaseConfig(lease)
	if err != nil {
		return err
	}
	if err := r.s.queueConflicts(r.queueURL, fifo, lease, cfg.interval, r.batch); err != nil { // conflicts.go
		return err
	}
	// Every receive and coalesced call carries the trace that tells the
	// calls in flight what the HTTP client's pool does (inflight.go).
	r.conns = newConnWatch()
	settleCtx, cancelSettle := context.WithCancel(r.conns.attach(context.Background()))
	r.calls = newCoalescedCalls(r.client, r.queueURL, max(r.s.pollers, minDeleteCalls), settleCtx)
	r.calls.report = r.callDone
	pollCtx, cancelPolls := context.WithCancel(r.conns.attach(context.Background()))
	r.settleCtx, r.pollCtx = settleCtx, pollCtx
	r.hardStop = func() { cancelPolls(); cancelSettle() }
	r.lateCtx, r.endLate = context.WithCancel(r.conns.attach(context.Background()))
	r.budgetCtx, r.endBudget = context.WithCancel(settleCtx) // ends at the hard stop at the latest
	cfg.calls, cfg.events.queueURL, cfg.settleCtx = r.calls, r.queueURL, settleCtx
	r.cfg = cfg
	r.reg = newRegistry(fifo, r.s.protector)
	r.probeCtx, r.cancelProbe = context.WithCancel(context.Background())
	r.quota.init(r.client, r.queueURL, r.scaler, r.ev)
	r.drainBase()
	if r.s.breaker != nil {
		r.br = r.newBreaker(*r.s.breaker)
	}
	r.bp = r.newBackPressure()
	r.work = make(chan *delivery)
	r.runs = make(chan *hbatch)
	r.quit = make(chan struct{})
	r.afterDelete = r.deleted
	if r.batch != nil {
		r.batch.bind(r, r.reg, r.ev, r.handlerBase)
	}
	secs, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds)])
	r.pollWait = r.s.pollWait(time.Duration(secs)*time.Second, err == nil && secs >= 0)
	return nil
}

// makeFlow makes the flow, which reads the Consumer's paused state
// (paused, written only by Pause and Resume) from the start, and binds the
// fleet member to it. The Consumer calls it under its mu, so that a Pause
// either came before (the flow starts paused) or finds the run.
func (r *run) makeFlow(paused *atomic.Bool) {
	fc := flowConfig{conc: r.s.concurrency, size: r.s.receiveSize, maxAhead: r.s.maxAhead, maxPollers: r.s.pollers,
		calls: r.callLimit(), maxBytes: r.s.maxBytes, messageSize: r.messageSize,
		spawn: func() {
			r.pollers.Add(1)
			go r.poll()
		},
		// A coalesced call no poller took in time; the coalescer counts it
		// until it returns, and Run waits for that (calls.close).
		overflow: func(job func()) { go job() },
		atLimit:  r.atCallLimit,
		paused:   paused, member: r.member, maxJobWait: r.shortestJobWait(),
		// A FIFO queue's registry orders each group already.
		fair: !r.reg.fifo && !r.s.fifoDispatch, groupLimit: r.s.groupLimit}
	if broken.Is(broken.GroupLimitIgnored) {
		fc.groupLimit = 0
	}
	if r.batch != nil {
		fc.burst = r.batch.maxSize()
	}
	if r.br != nil {
		fc.gate = r.br.limit
	}
	fc.limit = r.bp
	if r.s.rateLimit > 0 {
		fc.limiter = newTokenBucket(r.s.rateLimit, r.s.rateBurst)
	}
	r.paused = paused
	r.fl = newFlow[*delivery](fc)
	if m := r.member; m != nil {
		m.Bind(r.granted, r.fl.nudge)
	}
	r.calls.runOn(r.fl.submit)
}

// shortestJobWait is the bound on how long a coalesced call waits for a
// poller (flowConfig.maxJobWait), from the shortest lease the Consumer
// gives: the fixed one, or under WithAdaptiveVisibility its floor (renewed
// every third, as leaseFor does).
func (r *run) shortestJobWait() time.Duration {
	w := jobWaitBound(r.cfg.lease, r.cfg.interval)
	if r.s.adaptiveMax > 0 {
		w = min(w, jobWaitBound(r.s.adaptiveMin, heartbeatInterval(r.s.adaptiveMin, 0)))
	}
	return w
}

// run receives and handles messages until ctx is cancelled or a
// permanent receive error ends it, then shuts down and joins every
// goroutine the run started. It returns the permanent error, nil after a
// clean shutdown.
func (r *run) run(ctx context.Context) error {
	runCtx, fatalStop := context.WithCancel(ctx)
	defer fatalStop()
	r.fatalStop = fatalStop
	r.fl.begin()
	if r.scaler != nil {
		r.aux.Add(1)
		go func() {
			defer r.aux.Done()
			r.scaler.run(runCtx, r.fl)
		}()
	}
	<-runCtx.Done()

	r.prog.stage.Store(runDraining)
	// The hard stop bounds the whole wind-down, not only the shutdown's
	// wait for what the run holds: the pollers' receives in flight and
	// their hand-backs, the workers, the calls. It stays armed until Run
	// returns.
	begun := time.Now()
	hard := time.AfterFunc(r.s.shutdownTimeout+shutdownCallTimeout, r.hardStop)
	defer hard.Stop()
	r.shutdown(begun)
	// The lanes close before the pollers are told to quit: a poller still
	// in a receive hands its messages back after the quit, and their
	// calls must not wait for a poller that is leaving (a parked one may
	// take a call's kick and quit without running it), nor start one that
	// nobody joins. From now on calls run on goroutines of their own,
	// which calls.close waits for.
	if !broken.Is(broken.ShutdownStrandsReceive) {
		r.fl.closeLanes()
	}
	close(r.quit)
	r.pollers.Wait()
	if broken.Is(broken.ShutdownStrandsReceive) {
		r.fl.closeLanes()
	}
	if !broken.Is(broken.RunSkipsHandlers) {
		r.workers.Wait()
	}
	// The breaker's goroutines, the scaler and the quota's reads: none
	// starts after shutdown stopped the breaker and runCtx ended, or after
	// the pollers returned.
	r.aux.Wait()
	// Every handler has returned and settled: a call still under lateCtx
	// (a renewal of a lease since stopped, a hand-back whose wait the hard
	// stop ended) concerns nobody.
	r.endLate()
	r.calls.close()
	r.hardStop()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// shutdownCallTimeout is how long after the shutdown timeout calls to SQS
// still pending (a delete, a release, a receive that does not return) are
// given before they are abandoned (the hard stop), and how long a handler
// that returns after the shutdown timeout has to settle its message.
const shutdownCallTimeout = 5 * time.Second

// shutdown, begun at begun, stops receiving, hands back what has not
// started, waits for running handlers within the shutdown timeout, then
// cancels them with ErrShutdown and waits for them to return; each that
// returns from then on settles its message with a call timeout of its own
// (late). Run's hard stop, one call timeout after the shutdown timeout,
// abandons the other calls to SQS still pending.
func (r *run) shutdown(begun time.Time) {
	if r.br != nil {
		r.br.stop() // no more releases, probes or wakes of its own
	}
	r.bp.stop() // no more wakes at a pause's end
	r.cancelProbe()
	r.budgetEnd = begun.Add(r.s.shutdownTimeout)
	r.stopping.Store(true)
	r.beginDrain() // Draining: running handlers may hand their messages back early
	if r.batch != nil {
		r.batch.shutdown() // messages gathering for a batch are handed back at once
	}
	unstarted := r.unstarted(r.fl.stop())
	if r.s.cancelIdlePolls {
		if n := r.polls.cancelIdle(time.Now()); n > 0 {
			r.log(slog.LevelDebug, "sqsconsumer: idle long polls cancelled", "polls", n)
		}
	}
	running, _, _, _ := r.fl.snapshot()
	r.log(slog.LevelInfo, "sqsconsumer: shutting down: receiving stopped, unstarted messages released, running handlers have the shutdown timeout to finish",
		"running", running, "released_unstarted", len(unstarted), "receives_in_flight", r.fl.receivesInFlight(), "shutdown_timeout", r.s.shutdownTimeout.String())
	if broken.Is(broken.ShutdownKeepsUnstarted) {
		for _, d := range unstarted {
			r.finish(d, false, false, nil) // left to SQS, hidden for the rest of its lease
		}
		unstarted = nil
	}
	r.handBack(unstarted)

	done := r.reg.idle()
	timer := time.NewTimer(time.Until(begun.Add(r.s.shutdownTimeout)))
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	// From now on a handler that returns settles under lateCtx, which the
	// hard stop does not cut, and what is added to the coalesced calls goes
	// under it (the leases of handlers that run on stay renewed); what was
	// added before (in flight, pending, queued) stays under the hard stop.
	r.late.Store(true)
	r.endBudget()
	r.calls.rebase(r.lateCtx)
	r.log(slog.LevelWarn, "sqsconsumer: shutdown timeout reached; cancelling running handlers", "running", len(r.inHandler()))
	for _, d := range r.reg.all() {
		d.lease.abort(ErrShutdown)
	}
	if broken.Is(broken.RunSkipsHandlers) {
		return
	}
	warn := time.NewTicker(max(r.cfg.interval, time.Second))
	defer warn.Stop()
	for {
		select {
		case <-done:
			return
		case <-warn.C:
			// Only handlers still inside their function hold Run up for
			// good; settling calls end at the hard stop, or one call
			// timeout after their handler returned.
			if ids := r.inHandler(); len(ids) > 0 {
				r.log(slog.LevelWarn, "sqsconsumer: still waiting for handlers that ignore their cancelled context", "message_ids", ids)
			}
		}
	}
}

// drainBase makes the run's drain channel and the context every handler's
// context derives from: it carries the channel (Draining) and is never
// cancelled, so that a lease's context, made under it for each message,
// costs no more than under context.Background (a value context has no
// children to register).
func (r *run) drainBase() {
	r.drain = make(chan struct{})
	r.handlerBase = WithDrainSignal(context.Background(), r.drain)
}

// beginDrain closes the drain channel, once: the shutdown began.
func (r *run) beginDrain() {
	if r.drain != nil {
		close(r.drain)
	}
}

// shuttingDown reports whether the shutdown has begun: no handler starts
// any more.
func (r *run) shuttingDown() bool { return r.stopping.Load() }

// inHandler returns the IDs of the messages whose handler is running.
func (r *run) inHandler() []string {
	var ids []string
	for _, d := range r.reg.all() {
		if d.inHandler.Load() {
			ids = append(ids, d.msg.ID)
		}
	}
	return ids
}

// pause hands back what has not started, once Pause has set the paused
// state (which stops receiving and starting messages); it returns once
// those releases are answered. Only Pause calls it, in its turn.
func (r *run) pause() {
	unstarted := r.unstarted(r.fl.takeReady())
	r.log(slog.LevelInfo, "sqsconsumer: paused: receiving stopped, unstarted messages released", "released_unstarted", len(unstarted))
	r.handBack(unstarted)
}

// resume wakes the pollers once Resume has cleared the paused state. Only
// Resume calls it, in its turn.
func (r *run) resume() {
	r.fl.wake()
}

// fail records a permanent receive error and ends Run.
func (r *run) fail(err error, msg string) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = fmt.Errorf("sqsconsumer: ReceiveMessage: %w", err)
	}
	r.mu.Unlock()
	r.log(slog.LevelError, msg, "error", err)
	r.fatalStop()
}

// log logs through the Consumer's logger, if any.
func (r *run) log(level slog.Level, msg string, args ...any) { r.ev.log(level, msg, args...) }

// observe tells the Observer and the statistics of one event of d.
func (r *run) observe(kind EventKind, d *delivery, err error) {
	r.ev.emit(kind, &d.msg, d.msg.ReceiveCount, d.lease.arrivedAt(), d.workStarted(), 0, err)
}

// newBreaker makes the breaker of cfg wired to the Consumer (and, through
// it, to the flow, which is made after it).
func (r *run) newBreaker(cfg Breaker) *breaker {
	b := newBreaker(cfg)
	b.wake = func() { r.fl.wake() }
	b.onClose = r.breakerClosed
	b.onOpen = func(reason string) {
		r.aux.Add(1)
		go r.breakerOpened(reason)
	}
	b.runProbe = func() {
		r.aux.Add(1)
		go r.probe()
	}
	return b
}

// newBackPressure makes the run's back pressure, wired to the flow (made
// after it) and to Health's progress.
func (r *run) newBackPressure() *backPressure {
	b := newBackPressure(r.s)
	b.wake = r.unthrottled
	b.paused = r.throttlePaused
	return b
}

// unthrottled starts the ready messages the back pressure lets start now.
func (r *run) unthrottled() {
	for _, d := range r.fl.fill() {
		r.start(d)
	}
}

// throttlePaused records a pause for Throttled until until: Health does
// not count it as a stall (it is on purpose), and the log says so when it
// begins.
func (r *run) throttlePaused(until time.Time, extended bool, d time.Duration) {
	r.prog.resumeAt(until) // receiving resumes then
	if !extended {
		r.log(slog.LevelInfo, "sqsconsumer: a handler returned Throttled: receiving and starting paused", "for", d.String(), "until", until)
	}
}

// breakerOpened hands back what the Consumer holds but has not started
// when the breaker opens (unstarted): the ready messages and the FIFO
// messages waiting behind their group's running one. It runs on its own
// goroutine (aux).
func (r *run) breakerOpened(reason string) {
	defer r.aux.Done()
	if r.stopping.Load() {
		return // the shutdown hands everything back itself
	}
	unstarted := r.unstarted(r.fl.takeReady())
	state, _, _ := r.br.status()
	r.log(slog.LevelWarn, "sqsconsumer: circuit breaker open: receiving paused, unstarted messages handed back, running handlers go on",
		"reason", reason, "state", state.String(), "released_unstarted", len(unstarted))
	r.handBack(unstarted)
}

// breakerClosed resumes receiving after the breaker closed.
func (r *run) breakerClosed() {
	r.log(slog.LevelInfo, "sqsconsumer: circuit breaker closed: receiving resumes")
	r.prog.resume()
	r.fl.wake()
}

// probe runs Breaker.Probe once, on its own goroutine (aux), and tells
// the breaker how it went. A panic in it is a failed probe.
func (r *run) probe() {
	defer r.aux.Done()
	ctx, cancel := context.WithTimeout(r.probeCtx, r.br.cfg.Pause)
	defer cancel()
	err := protect(func() error { return r.br.cfg.Probe(ctx) })
	if pe, ok := err.(*PanicError); ok && pe.recovered {
		err = fmt.Errorf("sqsconsumer: Breaker.Probe panicked: %v", pe.Value)
	}
	if r.probeCtx.Err() != nil {
		return // shutting down: the result says nothing
	}
	if err != nil {
		r.log(slog.LevelInfo, "sqsconsumer: circuit breaker probe failed; staying open", "error", err)
	}
	r.br.probed(err)
}

// callDone takes the result of a renewal or delete batch call, and its
// round trip when it was one (see coalescedCalls.report) into the flow's
// estimate.
func (r *run) callDone(deleting bool, err error, took time.Duration, rtt bool) {
	if rtt && r.fl != nil {
		r.fl.roundTrip(took)
	}
	switch {
	case err != nil:
	case deleting:
		stamp(&r.prog.delete)
		r.prog.answer()
	default:
		stamp(&r.prog.renewal)
		r.prog.answer()
	}
	if r.br != nil {
		r.br.recordCall(err)
	}
}

// callLimit is the limit on calls in flight that follows what the HTTP
// client sustains, nil when WithPollers fixes it.
func (r *run) callLimit() *callLimit {
	if !r.s.adaptPollers {
		return nil
	}
	return newCallLimit(r.conns, r.s.pollers, r.pool.idle, r.pool.known)
}

// atCallLimit is called (under the flow's lock, each time) when the
// Consumer wanted one more call in flight than its limit allows while the
// HTTP client's pool holds that limit below what the read-ahead needs. It
// says so, once, and Stats shows it: a larger pool would let the Consumer
// go faster.
func (r *run) atCallLimit(limit int) {
	if r.pool.limited.Load() || r.pool.limited.Swap(true) {
		return
	}
	r.log(slog.LevelWarn, "sqsconsumer: the HTTP client's connection pool bounds this Consumer: it wanted more calls in flight than the client sustains without closing connections and dialling new ones (a TLS handshake each); a larger pool lets it go faster (sqsclient.HTTPOptions{MaxIdleConnsPerHost: n})",
		"max_idle_conns_per_host", r.pool.idle, "max_calls_in_flight", limit, "calls_the_work_wants_at_most", r.s.pollers)
}

// checkDeadLetter makes sure, at Run's start, that the dead-letter queue
// the Consumer will move messages to exists, is of the source's type and
// is not the source itself (by ARN: two URLs may name one queue), so that
// a wrong name fails Run at once rather than the first poison message
// hours later. A queue SQS says does not exist, whose FifoQueue attribute
// contradicts the source's type, or whose QueueArn is the source's, fails
// Run; any other error
// reading its attributes (access to the queue's attributes denied, say:
// the move needs only sqs:SendMessage), or no answer within a receive's
// call timeout, is logged, and Run goes on.
func (r *run) checkDeadLetter(ctx context.Context) error {
	if r.dlq.url == "" {
		return nil
	}
	source := "WithDeadLetterQueue"
	if r.s.deadLetterURL == "" {
		source = "the queue's RedrivePolicy"
	}
	// Bounded: a check that hangs is given up like one that fails, rather
	// than holding Run's start for good.
	cctx, cancel := context.WithTimeout(ctx, receiveCallTimeout)
	defer cancel()
	out, err := r.client.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(r.dlq.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameQueueArn},
	})
	var missing *types.QueueDoesNotExist
	switch {
	case errors.As(err, &missing) || err != nil && classify(err) == kindPermanent && !isAccessDenied(err):
		return fmt.Errorf("%w: dead-letter queue %s (from %s) does not exist or cannot be used: %w", ErrInvalidOption, r.dlq.url, source, err)
	case err != nil:
		r.log(slog.LevelWarn, "sqsconsumer: could not check the dead-letter queue; moving messages to it may fail", "dead_letter_queue", r.dlq.url, "error", err)
		return nil
	}
	if arn := out.Attributes[string(types.QueueAttributeNameQueueArn)]; arn != "" && arn == r.dlq.sourceARN {
		return fmt.Errorf("%w: %s names dead-letter queue %s, which is the queue the Consumer reads (%s, ARN %s): a message moved there comes straight back and fails again, forever; name a separate dead-letter queue",
			ErrInvalidOption, source, r.dlq.url, r.queueURL, arn)
	}
	if v, ok := out.Attributes[string(types.QueueAttributeNameFifoQueue)]; ok && strings.EqualFold(v, "true") != r.dlq.fifo {
		return typeMismatch(r.dlq.url, source, !r.dlq.fifo)
	}
	return nil
}

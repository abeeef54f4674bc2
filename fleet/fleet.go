// Package fleet runs several Consumers, one per queue, in one process
// under one concurrency budget.
//
// Each queue keeps its own Consumer, made with sqsconsumer.New with its
// own handler and options; its WithConcurrency becomes its limit within
// the fleet. The fleet's budget bounds how many handlers run at once
// across all of them, and a slot that frees goes to the queue that
// deserves it most: of the highest priority (WithPriority) among the
// queues with messages waiting, the one that has used the least slot time
// for its weight (WithWeight). Under saturation the queues' shares of slot
// time follow their weights; a queue without work leaves its share to the
// others, and gets it back as soon as it has messages (it earns no credit
// while idle). Each queue also receives only for the slots it is entitled
// to, so a queue with a small share does not read ahead messages that
// would wait for slots.
//
// An idle queue costs what it costs a Consumer alone: one long poll after
// another, 3 receives a minute with 20 s long polls, and a message sent to
// it is received at once. WithIdlePause makes a queue's Consumer wait,
// after a receive that got nothing, before its next long poll: fewer
// receives for idle queues, at the price of their first message's latency
// (the figures are in WithIdlePause's documentation).
//
// Pause and Resume each Consumer on its own (sqsconsumer.Consumer.Pause);
// a paused queue gives its share to the others. Run runs them all and
// shuts them down together, each as gracefully as on its own. Health and
// HealthHandler report on them together, in the JSON shape of a
// Consumer's health, naming the unhealthy queues; Scaling and
// ScalingHandler add up their scaling signals.
//
// Queues may come and go while the process runs (a platform's SDK whose
// Consume is called once per queue, at different times): Add puts a
// Consumer in the budget before or while Run runs (Run starts it at once);
// Serve runs one in the budget in the caller's goroutine, with or without
// Run, and takes it out when its Run returns; Watch lists a Consumer that
// runs on its own in the health and scaling view only; Remove takes one
// out of the view. Only a Consumer whose Run has not been called joins the
// budget (its flow binds to the budget when its Run starts); one already
// running can only be watched.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/internal/share"
)

// Defaults and limits.
const (
	// DefaultIdlePause is the default WithIdlePause: none (see
	// WithIdlePause for why).
	DefaultIdlePause time.Duration = 0
	// MaxIdlePause is the longest WithIdlePause.
	MaxIdlePause = 15 * time.Minute
	// MaxWeight is the largest WithWeight.
	MaxWeight = 1000
	// MaxConcurrency is the largest budget New accepts.
	MaxConcurrency = 100_000
)

// Fleet runs Consumers under one concurrency budget, and reports their
// health and scaling signal together. Make one with New, then Add the
// Consumers and call Run, or Serve each one, or both; Watch the Consumers
// that run on their own. Its methods are safe for concurrent use; Run may
// be called once.
type Fleet struct {
	pool      *share.Pool
	budget    int // the concurrency New was given
	idlePause time.Duration
	scale     processScale // the process's scaling figure

	mu      sync.Mutex // guards the fields below and each queue's
	queues  []*queue   // the view: every queue listed, in the order they joined
	added   []*queue   // the queues Add gave Run, in order (listed or not)
	started bool       // Run was called
	// stopping is set once Run's context is done: Add starts no more
	// Consumers, and Run waits for those it started (runs).
	stopping bool
	runCtx   context.Context         // Run's context, while it runs
	cancel   context.CancelCauseFunc // cancels runCtx
	runs     sync.WaitGroup          // the Consumers Run started; Add adds to it only before stopping
	runErr   error                   // what Run returned
}

// queue is one Consumer in a fleet.
type queue struct {
	c      *sqsconsumer.Consumer
	member *share.Member // its place in the budget; nil when watched
	how    joined
	// Guarded by Fleet.mu. stoppedByFleet: its Run ended with the
	// cancellation of a fleet Run stopped because another queue failed;
	// err: its Run's error, for Run's.
	stoppedByFleet bool
	err            error
}

// joined is how a queue joined its fleet.
type joined uint8

const (
	byAdd   joined = iota // Add: Run runs it in the budget
	byServe               // Serve: the caller runs it in the budget
	byWatch               // Watch: the caller runs it, outside the budget
)

// Option configures a Fleet.
type Option func(*Fleet) error

// WithIdlePause sets how long a queue's Consumer waits, after a receive
// that got nothing, before its next long poll; the first receive that gets
// messages ends the pauses. Range 0 to MaxIdlePause; default
// DefaultIdlePause, 0 (no pause).
//
// A pause of p saves an idle queue's receives only in the proportion
// p / (wait time + p), and a message sent to an idle queue can wait the
// whole pause (plus a round trip) before it is received: at once if a long
// poll is waiting, else at the next one. Measured in virtual time
// (TestIdlePauseFigures: 20 s long polls, 10 ms round trip; the same per
// queue in fleets of 2 and of 10 idle queues), receives a minute per idle
// queue, then the first message's latency when sent just after an empty
// receive (worst) and averaged over the idle cycle:
//
//	pause 0      3.0/min   worst 15 ms   mean 5.5 ms
//	pause 1 s    2.9/min   worst 1.0 s   mean 56 ms
//	pause 2 s    2.7/min   worst 2.0 s   mean 151 ms
//	pause 5 s    2.4/min   worst 5.0 s   mean 632 ms
//	pause 10 s   2.0/min   worst 10.0 s  mean 1.9 s
//	pause 20 s   1.5/min   worst 20.0 s  mean 5.5 s
//
// A short pause saves almost nothing, and halving the receives costs up to
// 20 s of latency on a queue's first message, which surprises in a jobs
// platform; while at 3 receives a minute an idle queue costs about 130,000
// requests a month, 5 cents at SQS's $0.40 per million standard requests
// (https://aws.amazon.com/sqs/pricing/, beyond the free tier). So the
// default is no pause, as for a Consumer alone. Set one of 10 to 20 s where
// many queues sit idle and their first message may wait.
//
// An idle queue's Consumer hears from SQS only once per long poll and
// pause, so with a pause longer than its Health's stall limit less the
// wait time (2 min - 20 s by default) its Health reports a stall while the
// queue is idle: raise the stall limit above the pause plus the wait time
// with sqsconsumer.WithHealthLimits.
func WithIdlePause(d time.Duration) Option {
	return func(f *Fleet) error {
		if d < 0 || d > MaxIdlePause {
			return fmt.Errorf("%w: fleet.WithIdlePause(%v): must be from 0 to %v", sqsconsumer.ErrInvalidOption, d, MaxIdlePause)
		}
		f.idlePause = d
		return nil
	}
}

// New returns a Fleet whose Consumers run at most concurrency handlers at
// once between them (1 to MaxConcurrency). It returns an error wrapping
// sqsconsumer.ErrInvalidOption that names each bad argument.
func New(concurrency int, opts ...Option) (*Fleet, error) {
	var errs []error
	if concurrency < 1 || concurrency > MaxConcurrency {
		errs = append(errs, fmt.Errorf("%w: fleet.New(%d): concurrency must be from 1 to %d", sqsconsumer.ErrInvalidOption, concurrency, MaxConcurrency))
	}
	f := &Fleet{idlePause: DefaultIdlePause}
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("%w: fleet.New: option %d is nil", sqsconsumer.ErrInvalidOption, i))
			continue
		}
		errs = append(errs, o(f))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	f.pool = share.NewPool(concurrency)
	f.budget = concurrency
	return f, nil
}

// QueueOption configures one queue of a Fleet.
type QueueOption func(*queueConfig) error

type queueConfig struct {
	weight, priority int
}

// WithWeight sets the queue's share of the budget relative to the other
// queues of its priority: under saturation, queues of weights 3 and 1
// hold slots for 3/4 and 1/4 of the time. Range 1 to MaxWeight; default 1.
func WithWeight(w int) QueueOption {
	return func(q *queueConfig) error {
		if w < 1 || w > MaxWeight {
			return fmt.Errorf("%w: fleet.WithWeight(%d): must be from 1 to %d", sqsconsumer.ErrInvalidOption, w, MaxWeight)
		}
		q.weight = w
		return nil
	}
}

// WithPriority sets the queue's priority: a slot that frees goes to a
// queue of a lower priority only when no queue of a higher one has a
// message waiting, and a queue receives for the slots the queues of higher
// priorities leave it. Strict priority can starve the lower queues for as
// long as the higher ones have work. Any int; default 0.
func WithPriority(p int) QueueOption {
	return func(q *queueConfig) error {
		q.priority = p
		return nil
	}
}

// Add puts c in the fleet: in its budget and its health and scaling view.
// c's WithConcurrency is its limit within the budget. Added before Run, c
// starts with the others when Run is called; added while Run runs, Run
// starts it at once, under the same context and the same rules (if its Run
// fails, the fleet stops every queue it runs). It fails if Run has
// returned or is stopping, if c's Run has been called (see Watch for a
// Consumer already running) or c belongs to a fleet already, or if an
// option is bad (the error wraps sqsconsumer.ErrInvalidOption).
func (f *Fleet) Add(c *sqsconsumer.Consumer, opts ...QueueOption) error {
	q, err := queueOptions("fleet.Add", c, opts)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping {
		return fmt.Errorf("%w: fleet.Add(%s): the fleet has stopped", sqsconsumer.ErrInvalidOption, c.QueueURL())
	}
	e, err := f.joinLocked("fleet.Add", c, q, byAdd)
	if err != nil {
		return err
	}
	f.added = append(f.added, e)
	if f.started {
		f.startLocked(e)
	}
	return nil
}

// queueOptions checks c and applies opts.
func queueOptions(caller string, c *sqsconsumer.Consumer, opts []QueueOption) (queueConfig, error) {
	q := queueConfig{weight: 1}
	if c == nil {
		return q, fmt.Errorf("%w: %s: Consumer is nil", sqsconsumer.ErrInvalidOption, caller)
	}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("%w: %s: option %d is nil", sqsconsumer.ErrInvalidOption, caller, i))
			continue
		}
		errs = append(errs, o(&q))
	}
	return q, errors.Join(errs...)
}

// joinLocked puts c in the budget (unless watched) and the view.
func (f *Fleet) joinLocked(caller string, c *sqsconsumer.Consumer, q queueConfig, how joined) (*queue, error) {
	e := &queue{c: c, how: how}
	if how == byWatch {
		if f.indexLocked(c) >= 0 {
			return nil, fmt.Errorf("%w: %s(%s): the Consumer is in the fleet already", sqsconsumer.ErrInvalidOption, caller, c.QueueURL())
		}
	} else {
		m := f.pool.Join(q.weight, q.priority, f.idlePause)
		if err := share.Attach(c, m); err != nil {
			f.pool.Leave(m)
			return nil, fmt.Errorf("%s: %w", caller, err)
		}
		e.member = m
		if i := f.indexLocked(c); i >= 0 {
			// Watched before: in the budget now, listed once.
			f.queues = slices.Delete(f.queues, i, i+1)
		}
	}
	f.queues = append(f.queues, e)
	return e, nil
}

// indexLocked is c's place in the view, -1 if it is not listed.
func (f *Fleet) indexLocked(c *sqsconsumer.Consumer) int {
	return slices.IndexFunc(f.queues, func(q *queue) bool { return q.c == c })
}

// startLocked starts e's Consumer under Run's context; Run waits for it.
func (f *Fleet) startLocked(e *queue) {
	ctx, cancel := f.runCtx, f.cancel
	f.runs.Go(func() {
		err := e.c.Run(ctx)
		if err == nil {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		// If the fleet stopped the queues (before ctx was cancelled), a
		// queue whose Run ended with the cancellation was stopped, not
		// failed.
		if context.Cause(ctx) == errQueueFailed && errors.Is(err, context.Canceled) {
			e.stoppedByFleet = true
			return
		}
		e.err = fmt.Errorf("fleet: queue %s: %w", e.c.QueueURL(), err)
		cancel(errQueueFailed)
	})
}

// Serve runs c in the fleet until ctx is cancelled or c's Run fails, in the
// caller's goroutine, and returns what c's Run returned: c joins the
// budget and the health and scaling view as it starts, and leaves the
// budget when its Run returns (its slots, all given back by then, go to
// the other queues), and the view too if its Run returned nil. A queue
// whose Run failed stays in the view, reported failed (the fleet
// unhealthy), until Remove: a process that silently stopped serving a
// queue is worse than one a liveness probe restarts. Serve works with or
// without Run, at any time, for as many Consumers as the process makes;
// a Serve'd queue's failure stops no other queue (its caller decides). It
// fails at once, as Add does, if c's Run has been called or c belongs to
// a fleet already, or if an option is bad.
func (f *Fleet) Serve(ctx context.Context, c *sqsconsumer.Consumer, opts ...QueueOption) error {
	if ctx == nil {
		return errors.New("fleet: Serve(nil, ...): a context is required")
	}
	q, err := queueOptions("fleet.Serve", c, opts)
	if err != nil {
		return err
	}
	f.mu.Lock()
	e, err := f.joinLocked("fleet.Serve", c, q, byServe)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	err = c.Run(ctx)
	f.pool.Leave(e.member)
	if err == nil {
		f.removeQueue(e)
	}
	return err
}

// Watch lists c in the fleet's health and scaling view, not in its budget:
// for a Consumer whose Run the caller calls (before or after Watch), with
// its own WithConcurrency slots. Its Health joins the fleet's Health and
// its figure the fleet's Scaling (as a queue outside the budget: its own
// figure, not its slots). It leaves the view when its Run has returned nil
// (the next Health or Scaling no longer lists it) or by Remove; one whose
// Run failed stays, reported failed, until Remove. It fails if c is nil
// or listed already.
func (f *Fleet) Watch(c *sqsconsumer.Consumer) error {
	if c == nil {
		return fmt.Errorf("%w: fleet.Watch: Consumer is nil", sqsconsumer.ErrInvalidOption)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.joinLocked("fleet.Watch", c, queueConfig{}, byWatch)
	return err
}

// Remove takes c out of the fleet's health and scaling view, however it
// joined, and reports whether it was listed. It stops nothing and leaves
// the budget as it is: a Consumer Run runs goes on until Run returns, one
// in Serve until its Run returns. Use it for a queue whose Run failed
// (Serve, Watch) once the process has dealt with it, or to stop watching
// a Consumer.
func (f *Fleet) Remove(c *sqsconsumer.Consumer) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.indexLocked(c)
	if i < 0 {
		return false
	}
	f.queues = slices.Delete(f.queues, i, i+1)
	return true
}

// removeQueue takes e out of the view, if it is still listed.
func (f *Fleet) removeQueue(e *queue) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := slices.Index(f.queues, e); i >= 0 {
		f.queues = slices.Delete(f.queues, i, i+1)
	}
}

// Run runs every Consumer added (before Run, and while it runs) until ctx
// is cancelled, then shuts them all down at once, each as
// sqsconsumer.Consumer.Run does (receiving stops, unstarted messages are
// released, running handlers get their Consumer's shutdown timeout), so
// the fleet stops within the longest of their shutdown budgets. If a
// Consumer's Run fails (the queue does not exist, access is denied), the
// fleet shuts the others down the same way: a process that silently
// stopped serving one of its queues is worse than one that stops. Run
// returns after every Consumer it started has returned: nil after a clean
// shutdown, else the failed queues' errors joined, each naming its queue.
// A queue the fleet stopped because another failed is not listed, even if
// it was still starting and its call to SQS ended with "context
// canceled". At least one Consumer must have been added before Run. The
// Consumers in Serve are not Run's: it neither starts nor stops them.
func (f *Fleet) Run(ctx context.Context) error {
	if ctx == nil {
		return errors.New("fleet: Run(nil): a context is required")
	}
	f.mu.Lock()
	if f.started {
		f.mu.Unlock()
		return errors.New("fleet: Run may be called only once per Fleet")
	}
	f.started = true
	if len(f.added) == 0 {
		f.stopping = true
		f.mu.Unlock()
		return errors.New("fleet: Run: no Consumer was added")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f.runCtx, f.cancel = ctx, cancel
	for _, e := range f.added {
		f.startLocked(e)
	}
	f.mu.Unlock()

	<-ctx.Done() // cancelled, or a queue failed
	f.mu.Lock()
	f.stopping = true
	f.mu.Unlock()
	f.runs.Wait()

	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, e := range f.added {
		errs = append(errs, e.err)
	}
	f.runErr = errors.Join(errs...)
	return f.runErr
}

// errQueueFailed is the cause with which Run stops the queues when one
// failed.
var errQueueFailed = errors.New("fleet: another queue's Consumer failed")

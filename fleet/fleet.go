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
// Consumer's health, naming the unhealthy queues.
package fleet

import (
	"context"
	"errors"
	"fmt"
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

// Fleet runs Consumers under one concurrency budget. Make one with New,
// Add the Consumers, then call Run. Its methods are safe for concurrent
// use; Run may be called once.
type Fleet struct {
	pool      *share.Pool
	budget    int // the concurrency New was given
	idlePause time.Duration
	scale     processScale // the process's scaling figure

	mu      sync.Mutex // guards the fields below
	queues  []*sqsconsumer.Consumer
	started bool
	// stoppedByFleet[i] is set when queues[i]'s Run ended with the
	// cancellation of a fleet stopped because another queue failed.
	stoppedByFleet []bool
	runErr         error // what Run returned
}

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
// pause. Its Health's default stall limit grows to cover that (twice the
// pause plus the wait time, when more than 2 minutes); an explicit stall
// limit (sqsconsumer.WithHealthLimits) below the pause plus the wait time
// plus a receive's call timeout (10 s) would report every idle queue
// stalled, and Add refuses it, naming both options.
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

// Add puts c in the fleet, before Run. c's WithConcurrency is its limit
// within the fleet's budget. It fails if the fleet has started, if c has
// started or belongs to a fleet already, or if an option is bad (the
// error wraps sqsconsumer.ErrInvalidOption).
func (f *Fleet) Add(c *sqsconsumer.Consumer, opts ...QueueOption) error {
	if c == nil {
		return fmt.Errorf("%w: fleet.Add: Consumer is nil", sqsconsumer.ErrInvalidOption)
	}
	q := queueConfig{weight: 1}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("%w: fleet.Add: option %d is nil", sqsconsumer.ErrInvalidOption, i))
			continue
		}
		errs = append(errs, o(&q))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		return fmt.Errorf("%w: fleet.Add(%s): the fleet is running", sqsconsumer.ErrInvalidOption, c.QueueURL())
	}
	m := f.pool.Join(q.weight, q.priority, f.idlePause)
	if err := share.Attach(c, m); err != nil {
		f.pool.Leave(m)
		return fmt.Errorf("fleet.Add: %w", err)
	}
	f.queues = append(f.queues, c)
	return nil
}

// Run runs every Consumer added until ctx is cancelled, then shuts them
// all down at once, each as sqsconsumer.Consumer.Run does (receiving
// stops, unstarted messages are released, running handlers get their
// Consumer's shutdown timeout), so the fleet stops within the longest of
// their shutdown budgets. If a Consumer's Run fails (the queue does not
// exist, access is denied), the fleet shuts the others down the same way:
// a process that silently stopped serving one of its queues is worse than
// one that stops. Run returns after every Consumer's Run has returned: nil
// after a clean shutdown, else the failed queues' errors joined, each
// naming its queue. A queue the fleet stopped because another failed is not
// listed, even if it was still starting and its call to SQS ended with
// "context canceled".
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
	queues := f.queues
	f.mu.Unlock()
	if len(queues) == 0 {
		return errors.New("fleet: Run: no Consumer was added")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f.mu.Lock()
	f.stoppedByFleet = make([]bool, len(queues))
	f.mu.Unlock()
	errs := make([]error, len(queues))
	var wg sync.WaitGroup
	for i, c := range queues {
		wg.Go(func() {
			err := c.Run(ctx)
			if err == nil {
				return
			}
			// If the fleet stopped the queues (before ctx was cancelled), a
			// queue whose Run ended with the cancellation was stopped, not
			// failed.
			if context.Cause(ctx) == errQueueFailed && errors.Is(err, context.Canceled) {
				f.mu.Lock()
				f.stoppedByFleet[i] = true
				f.mu.Unlock()
				return
			}
			errs[i] = fmt.Errorf("fleet: queue %s: %w", c.QueueURL(), err)
			cancel(errQueueFailed)
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	f.mu.Lock()
	f.runErr = err
	f.mu.Unlock()
	return err
}

// errQueueFailed is the cause with which Run stops the queues when one
// failed.
var errQueueFailed = errors.New("fleet: another queue's Consumer failed")

// Package coalesce coalesces single requests into batch calls of at most a
// fixed number of entries, each entry's result routed back to its caller.
//
// SQS charges and throttles per call, and its batch calls take ten entries.
// A Coalescer collects entries for a short window (or until a batch is full),
// makes one call, and answers every caller with its own entry's error.
//
// Adding an entry takes a mutex, never a goroutine hand-off; each batch
// call runs on a goroutine of its own, or on whatever RunOn hands it to.
// Submit does not wait at all: its callback runs where the call ran, when
// it returns.
package coalesce

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Do and Submit after Close.
var ErrClosed = errors.New("coalesce: coalescer closed")

// Flush makes one batch call for entries and returns one error per entry,
// in order (nil for an entry that succeeded). It must return a slice of the
// same length as entries.
type Flush[E any] func(ctx context.Context, entries []E) []error

type request[E any] struct {
	entry    E
	ctx      context.Context // nil: never cancelled
	deadline time.Time       // zero: none
	done     func(e E, err error)
	base     context.Context // the base when it was added (SetBase); nil: context.Background
}

// Coalescer coalesces entries into calls of at most max entries. The zero
// value is not usable; make one with New. Do, Submit and Close are safe for
// concurrent use.
type Coalescer[E any] struct {
	max      int
	window   time.Duration
	maxCalls int // batch calls in flight at once; 0: no limit
	flush    Flush[E]

	mu      sync.Mutex // guards the fields below
	pending []request[E]
	gen     uint64      // counts cut batches: a window timer only flushes its own
	timer   *time.Timer // the window of the pending batch, while armed
	closed  bool
	busy    int                    // flushers running
	queued  [][]request[E]         // cut batches waiting for a flusher (maxCalls reached)
	runOn   func(call func()) bool // RunOn's; nil: a goroutine per flusher

	base context.Context // the parent of the calls of entries added from now on (SetBase); nil: context.Background

	work     sync.WaitGroup // batches cut and not yet answered, and armed window timers
	flushers sync.WaitGroup // flusher goroutines
}

// New makes a Coalescer. A batch is sent when it holds size entries, or window
// after its first entry arrived; at most maxCalls batch calls are in flight
// at once (0: no limit), later batches wait their turn in order. Its
// goroutines run only while batch calls do; Close waits for them.
func New[E any](size int, window time.Duration, maxCalls int, flush Flush[E]) *Coalescer[E] {
	return &Coalescer[E]{
		max:      max(size, 1),
		window:   window,
		maxCalls: max(maxCalls, 0),
		flush:    flush,
	}
}

// Do adds e to the next batch and waits for its result. If ctx ends first,
// Do returns ctx's error; the entry may still have been sent. The batch
// call's deadline is the earliest deadline of its entries' contexts, an
// entry whose context has ended by the time its batch is sent is left out,
// and a call whose entries all came from Do is abandoned once every one of
// their contexts has ended (nobody waits for its answer any more), whatever
// its base (SetBase).
func (b *Coalescer[E]) Do(ctx context.Context, e E) error {
	res := make(chan error, 1)
	deadline, _ := ctx.Deadline()
	if err := b.submit(request[E]{entry: e, ctx: ctx, deadline: deadline, done: func(_ E, err error) { res <- err }}); err != nil {
		return err
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Submit adds e to the next batch without waiting. done(e, err) is called
// exactly once with the entry and its result, on a flusher goroutine,
// unless Submit returns an error (ErrClosed), in which case it is never
// called. done must not block for long: it delays the other entries'
// callbacks. Since done gets the entry back, one func value (made once)
// can serve every entry, with what it needs carried in the entry, and
// Submit costs no allocation of its own. deadline (zero for none) bounds
// the batch call like a Do context's deadline.
func (b *Coalescer[E]) Submit(e E, deadline time.Time, done func(e E, err error)) error {
	return b.submit(request[E]{entry: e, deadline: deadline, done: done})
}

func (b *Coalescer[E]) submit(r request[E]) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	if b.pending == nil {
		b.pending = make([]request[E], 0, b.max)
	}
	r.base = b.base
	b.pending = append(b.pending, r)
	var full []request[E]
	switch {
	case len(b.pending) >= b.max:
		full = b.cutLocked()
	case len(b.pending) == 1:
		gen := b.gen
		b.work.Add(1)
		b.timer = time.AfterFunc(b.window, func() {
			defer b.work.Done()
			b.fire(gen)
		})
	}
	b.mu.Unlock()
	if full != nil {
		b.dispatch(full)
	}
	return nil
}

// cutLocked takes the pending batch, counts it as work and disarms its
// window timer.
func (b *Coalescer[E]) cutLocked() []request[E] {
	batch := b.pending
	b.pending = nil
	b.gen++
	if b.timer != nil {
		if b.timer.Stop() {
			b.work.Done() // the timer's function will not run
		}
		b.timer = nil
	}
	b.work.Add(1)
	return batch
}

// fire sends the partial batch of generation gen when its window ends.
func (b *Coalescer[E]) fire(gen uint64) {
	b.mu.Lock()
	if b.gen != gen || len(b.pending) == 0 {
		b.mu.Unlock()
		return // that batch was sent full, or by Close
	}
	b.timer = nil // fired: nothing to stop
	batch := b.cutLocked()
	b.mu.Unlock()
	b.dispatch(batch)
}

// dispatch starts a flusher for a cut batch, or queues the batch when
// maxCalls are in flight.
func (b *Coalescer[E]) dispatch(batch []request[E]) {
	b.mu.Lock()
	if b.maxCalls > 0 && b.busy >= b.maxCalls {
		b.queued = append(b.queued, batch)
		b.mu.Unlock()
		return
	}
	b.busy++
	b.flushers.Add(1)
	run := b.runOn
	b.mu.Unlock()
	if run == nil || !run(func() { b.flusher(batch) }) {
		go b.flusher(batch)
	}
}

// SetBase makes ctx the parent of the batch calls of the entries added
// from now on: cancelling it abandons those calls, in flight or sent
// later. The entries added before keep the base they were added under,
// whenever their call is sent: SetBase cuts the batch pending, so that
// no call mixes two bases. Safe to call at any time.
func (b *Coalescer[E]) SetBase(ctx context.Context) {
	b.mu.Lock()
	var cut []request[E]
	if len(b.pending) > 0 {
		cut = b.cutLocked()
	}
	b.base = ctx
	b.mu.Unlock()
	if cut != nil {
		b.dispatch(cut)
	}
}

// RunOn makes the Coalescer hand each batch call to run instead of a
// goroutine of its own: run takes the call (a function that sends the
// batch, and any batches queued behind it, and returns) and reports true,
// or false to leave it to a goroutine after all (run is called without
// the Coalescer's lock). The calls stay counted until they return, so
// Close waits for them wherever they run. Set it before the first entry.
func (b *Coalescer[E]) RunOn(run func(call func()) bool) {
	b.mu.Lock()
	b.runOn = run
	b.mu.Unlock()
}

// flusher sends batch, then any batches queued meanwhile, and exits.
func (b *Coalescer[E]) flusher(batch []request[E]) {
	defer b.flushers.Done()
	for {
		b.run(batch)
		b.work.Done()
		b.mu.Lock()
		if len(b.queued) == 0 {
			b.busy--
			b.mu.Unlock()
			return
		}
		batch = b.queued[0]
		b.queued[0] = nil
		b.queued = b.queued[1:]
		b.mu.Unlock()
	}
}

// Close sends what is pending and waits for every batch call and callback
// to return and their goroutines to end. Later calls to Do and Submit
// return ErrClosed.
func (b *Coalescer[E]) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.work.Wait()
		b.flushers.Wait()
		return
	}
	b.closed = true
	var last []request[E]
	if len(b.pending) > 0 {
		last = b.cutLocked()
	}
	b.mu.Unlock()
	if last != nil {
		b.dispatch(last)
	}
	// Every batch was cut (and every flusher started) before closed was
	// set or just above, so these Waits see all of them.
	b.work.Wait()
	b.flushers.Wait()
}

func (b *Coalescer[E]) run(batch []request[E]) {
	live := batch[:0]
	var deadline time.Time
	for _, r := range batch {
		if r.ctx != nil && r.ctx.Err() != nil {
			r.done(r.entry, r.ctx.Err())
			continue
		}
		if !r.deadline.IsZero() && (deadline.IsZero() || r.deadline.Before(deadline)) {
			deadline = r.deadline
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ctx := live[0].base // every entry of a batch was added under one base (SetBase)
	if ctx == nil {
		ctx = context.Background()
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if waited(live) {
		var stop func()
		ctx, stop = whileWaited(ctx, live)
		defer stop()
	}
	entries := make([]E, len(live))
	for i, r := range live {
		entries[i] = r.entry
	}
	errs := b.flush(ctx, entries)
	for i, r := range live {
		var err error
		if i < len(errs) {
			err = errs[i]
		} else {
			err = errors.New("coalesce: flush returned no result for this entry")
		}
		r.done(r.entry, err)
	}
}

// waited reports whether every entry of live came from Do with a context
// that can end: only then can its call be left without anyone waiting.
func waited[E any](live []request[E]) bool {
	for _, r := range live {
		if r.ctx == nil || r.ctx.Done() == nil {
			return false
		}
	}
	return true
}

// whileWaited derives from ctx the context of a call whose entries all came
// from Do (waited): it is cancelled once every entry's context has ended.
// A caller whose context ended has been answered with its error, and a
// base that outlives it (SetBase) must not keep the call going for nobody.
// stop releases what it holds.
func whileWaited[E any](ctx context.Context, live []request[E]) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	var left atomic.Int32
	left.Store(int32(len(live)))
	stops := make([]func() bool, len(live))
	for i, r := range live {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

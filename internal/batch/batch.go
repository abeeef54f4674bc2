// Package batch coalesces single requests into batch calls of at most a
// fixed number of entries, each entry's result routed back to its caller.
//
// SQS charges and throttles per call, and its batch calls take ten entries.
// A Batcher collects entries for a short window (or until a batch is full),
// makes one call, and answers every caller with its own entry's error.
package batch

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("batch: batcher closed")

// Flush makes one batch call for entries and returns one error per entry,
// in order (nil for an entry that succeeded). It must return a slice of the
// same length as entries.
type Flush[E any] func(ctx context.Context, entries []E) []error

type request[E any] struct {
	entry E
	ctx   context.Context
	done  chan error // buffered: the flusher never blocks on a caller that left
}

// Batcher coalesces entries into calls of at most max entries. The zero
// value is not usable; make one with New. Do is safe for concurrent use.
type Batcher[E any] struct {
	max    int
	window time.Duration
	flush  Flush[E]

	in      chan *request[E]
	closing chan struct{}
	loopEnd chan struct{}
	once    sync.Once
	calls   sync.WaitGroup // in-flight flushes
}

// New starts a Batcher whose goroutine runs until Close. A batch is sent
// when it holds max entries or window after its first entry arrived.
func New[E any](max int, window time.Duration, flush Flush[E]) *Batcher[E] {
	if max < 1 {
		max = 1
	}
	b := &Batcher[E]{
		max:     max,
		window:  window,
		flush:   flush,
		in:      make(chan *request[E]),
		closing: make(chan struct{}),
		loopEnd: make(chan struct{}),
	}
	go b.loop()
	return b
}

// Do adds e to the next batch and waits for its result. If ctx ends first,
// Do returns ctx's error; the entry may still have been sent. The batch
// call's own deadline is the earliest deadline of its entries' contexts.
func (b *Batcher[E]) Do(ctx context.Context, e E) error {
	r := &request[E]{entry: e, ctx: ctx, done: make(chan error, 1)}
	select {
	case b.in <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.closing:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close sends what is pending, waits for every in-flight call to return,
// and stops the goroutine. Later calls to Do return ErrClosed.
func (b *Batcher[E]) Close() {
	b.once.Do(func() { close(b.closing) })
	<-b.loopEnd
	b.calls.Wait()
}

func (b *Batcher[E]) loop() {
	defer close(b.loopEnd)
	var (
		pending []*request[E]
		timer   *time.Timer
		fire    <-chan time.Time
	)
	send := func() {
		if timer != nil {
			timer.Stop()
			timer, fire = nil, nil
		}
		if len(pending) == 0 {
			return
		}
		batch := pending
		pending = nil
		b.calls.Add(1)
		go func() {
			defer b.calls.Done()
			b.run(batch)
		}()
	}
	for {
		select {
		case r := <-b.in:
			pending = append(pending, r)
			if len(pending) >= b.max {
				send()
			} else if timer == nil {
				timer = time.NewTimer(b.window)
				fire = timer.C
			}
		case <-fire:
			timer, fire = nil, nil
			send()
		case <-b.closing:
			send()
			return
		}
	}
}

func (b *Batcher[E]) run(batch []*request[E]) {
	live := batch[:0:0]
	var deadline time.Time
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.done <- r.ctx.Err()
			continue
		}
		if d, ok := r.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
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
			err = errors.New("batch: flush returned no result for this entry")
		}
		r.done <- err
	}
}

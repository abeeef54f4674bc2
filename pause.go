package sqsconsumer

import "sync/atomic"

// pauseState is whether a Consumer is paused (Pause, Resume): its one
// copy. Only Pause and Resume write it, one at a time and each whole
// (the change and what it does to the run: the releases Pause waits for,
// the wake Resume sends), so that in any interleaving of them, before,
// during or after Run and its shutdown, the last to take its turn decides both
// what Paused reports and whether the run receives. Everything else reads
// on without a lock: Paused, Health, and the run, whose flow (no receive
// due, no message started) and dispatch (a receive's messages handed back)
// read it through the pointer makeFlow gives them.
type pauseState struct {
	// turn (capacity 1, made by New) is held, a value in it, by Pause
	// and Resume for their whole call; it guards writes of on. A channel
	// rather than a sync.Mutex: Pause holds it while it waits for SQS to
	// answer its releases, and a goroutine waiting on a channel is
	// durably blocked in a testing/synctest bubble, where one waiting on a
	// mutex would keep the virtual clock from advancing.
	turn chan struct{}
	on   atomic.Bool // set between Pause and Resume
	// delay, when set (tests only, before any Pause), runs inside Pause
	// between the change and the run being told of it: it widens the
	// window in which a concurrent Resume would interleave.
	delay func()
}

// take waits for the turn to change the paused state; the returned
// function gives it back.
func (p *pauseState) take() (done func()) {
	p.turn <- struct{}{}
	return func() { <-p.turn }
}

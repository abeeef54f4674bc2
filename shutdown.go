package sqsconsumer

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// shutdownCallTimeout is how long after the shutdown timeout calls to SQS
// still pending (a delete, a release, a receive that does not return) are
// given before they are abandoned.
const shutdownCallTimeout = 5 * time.Second

// shutdown stops receiving, hands back what has not started, waits for
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
	c.stopping.Store(true)
	if c.batch != nil {
		c.batch.shutdown() // messages gathering for a batch are handed back at once
	}
	unstarted := c.unstarted(c.fl.stop())
	if c.s.cancelIdlePolls {
		if n := c.polls.cancelIdle(time.Now()); n > 0 {
			c.log(slog.LevelDebug, "sqsconsumer: idle long polls cancelled", "polls", n)
		}
	}
	running, _, _, _ := c.fl.snapshot()
	c.log(slog.LevelInfo, "sqsconsumer: shutting down: receiving stopped, unstarted messages released, running handlers have the shutdown timeout to finish",
		"running", running, "released_unstarted", len(unstarted), "receives_in_flight", c.fl.receivesInFlight(), "shutdown_timeout", c.s.shutdownTimeout.String())
	c.handBack(unstarted)

	done := c.handlers.idle()
	timer := time.NewTimer(time.Until(begun.Add(c.s.shutdownTimeout)))
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	c.log(slog.LevelWarn, "sqsconsumer: shutdown timeout reached; cancelling running handlers", "running", len(c.inHandler()))
	for _, d := range c.held.all() {
		d.lease.abort(ErrShutdown)
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

// shuttingDown reports whether the shutdown has begun: no handler starts
// any more.
func (c *Consumer) shuttingDown() bool { return c.stopping.Load() }

// inHandler returns the IDs of the messages whose handler is running.
func (c *Consumer) inHandler() []string {
	var ids []string
	for _, d := range c.held.all() {
		if d.inHandler.Load() {
			ids = append(ids, d.msg.ID)
		}
	}
	return ids
}

// deliveryCount counts the deliveries held, from their dispatch to the end
// of their settlement (finish), so that the shutdown can wait for them. A
// sync.WaitGroup cannot do it: a receive in flight at shutdown dispatches
// its messages (to hand them back) while the shutdown waits, and a
// WaitGroup's Add from zero must not race its Wait (it panics: "WaitGroup
// is reused before previous Wait has returned"). Safe for concurrent use.
type deliveryCount struct {
	n      atomic.Int64
	mu     sync.Mutex    // guards idleCh
	idleCh chan struct{} // closed when n comes down to 0; nil while nobody waits
}

func (d *deliveryCount) add() { d.n.Add(1) }

func (d *deliveryCount) done() {
	if d.n.Add(-1) == 0 {
		d.mu.Lock()
		if d.idleCh != nil {
			close(d.idleCh)
			d.idleCh = nil
		}
		d.mu.Unlock()
	}
}

// idle returns a channel closed once no delivery is held: at once if none
// is now. A delivery dispatched after that does not reopen it.
func (d *deliveryCount) idle() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.idleCh == nil {
		d.idleCh = make(chan struct{})
	}
	ch := d.idleCh
	if d.n.Load() == 0 {
		// Checked under mu: a done that brought n to 0 before this
		// found no channel to close.
		close(ch)
		d.idleCh = nil
	}
	return ch
}

package sqsconsumer

import (
	"log/slog"
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

	done := make(chan struct{})
	go func() {
		c.handlers.Wait()
		close(done)
	}()
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

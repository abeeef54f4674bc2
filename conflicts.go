package sqsconsumer

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Options that contradict each other, or that one another makes do
// nothing, are refused here, each error wrapping ErrInvalidOption and
// naming both options. New checks what the options alone tell
// (conflicts), Run what only the queue can tell: its type
// (fifoConflicts), its VisibilityTimeout (stallConflict,
// batchWindowConflict), the dead-letter
// queue's ARN (run.checkDeadLetter). Options given twice are not a
// conflict: the later value wins (see Option), except where noted.

// conflicts reports the options New can tell contradict each other or
// defeat themselves.
func (s *settings) conflicts(queueURL string) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
	}
	if s.deadLetterURL != "" && sameQueueURL(s.deadLetterURL, queueURL) {
		add("WithDeadLetterQueue(%s) is the queue the Consumer reads (%s): a message moved there comes straight back and fails again, forever; name a separate dead-letter queue",
			s.deadLetterURL, queueURL)
	}
	if s.adaptiveMax > 0 {
		if s.heartbeat > 0 {
			add("WithAdaptiveVisibility and WithHeartbeatInterval cannot be combined: the interval follows the adaptive lease")
		}
		if s.adaptiveMax > s.maxLease {
			add("WithAdaptiveVisibility(%v, %v): hi exceeds WithMaxLeaseDuration(%v), which no lease may pass", s.adaptiveMin, s.adaptiveMax, s.maxLease)
		}
		if v := s.visibility; v != 0 && (v < s.adaptiveMin || v > s.adaptiveMax) {
			add("WithVisibilityTimeout(%v) is outside WithAdaptiveVisibility(%v, %v): it is the lease until enough messages settled, and would be clamped into that range",
				v, s.adaptiveMin, s.adaptiveMax)
		}
	}
	if s.ceilingGraceSet && s.visibility == 0 && s.ceilingGrace >= s.maxLease {
		// With WithVisibilityTimeout, New's leaseConfig says the same.
		add("WithCeilingGrace(%v) must be less than WithMaxLeaseDuration(%v): the handler would be told to stop before it started", s.ceilingGrace, s.maxLease)
	}
	if s.handlerTimeout > 0 && s.handlerTimeout >= s.maxLease {
		add("WithHandlerTimeout(%v) is not below WithMaxLeaseDuration(%v): the lease ceiling cancels the handler first (ErrLeaseCeiling), so the timeout could never fire",
			s.handlerTimeout, s.maxLease)
	}
	if s.handlerLimit > 0 && s.handlerTimeout > 0 && s.handlerLimit <= s.handlerTimeout {
		add("WithHealthLimits' handler limit (%v) is not above WithHandlerTimeout(%v): Health would call a handler stuck while it is still within its own time",
			s.handlerLimit, s.handlerTimeout)
	}
	if s.groupLimit > 0 {
		if s.fifoDispatch {
			add("WithGroupLimit(%d) needs fair dispatch, which WithFairDispatch(false) turns off: the cap would do nothing", s.groupLimit)
		}
		if s.groupLimit >= s.concurrency {
			add("WithGroupLimit(%d) is not below WithConcurrency(%d): no group could run more handlers than that anyway, so the cap would do nothing",
				s.groupLimit, s.concurrency)
		}
	}
	if s.stallLimit > 0 {
		interval, from := time.Duration(0), ""
		switch {
		case s.heartbeat > 0:
			interval, from = s.heartbeat, fmt.Sprintf("WithHeartbeatInterval(%v)", s.heartbeat)
		case s.visibility > 0 && s.adaptiveMax == 0:
			interval, from = heartbeatInterval(s.visibility, 0), fmt.Sprintf("WithVisibilityTimeout(%v), a third of it", s.visibility)
		}
		if err := s.stallConflict(s.newPollWait(), interval, from); err != nil {
			errs = append(errs, err)
		}
	}
	if fifoURL(queueURL) {
		errs = append(errs, s.fifoConflicts(queueURL)...)
	}
	return errs
}

// batchWindowConflict reports a Batch handler's window (a batch gathers
// for it when it does not fill) that the lease ceiling leaves no room
// for: a message is told to stop (ErrLeaseCeiling) its ceiling grace
// before WithMaxLeaseDuration runs out, counted from its hand-over, which
// may lie up to handoverSlack before its receive's answer; a member told
// to stop while it gathers leaves its batch unhandled. With a window that
// reaches that point a message alone in its batch would never run, at any
// delivery. grace is the lease's (cfg.grace); graceFrom says where it
// comes from. New calls it when it can tell the grace, Run always.
func (s *settings) batchWindowConflict(window, grace time.Duration, graceFrom string) error {
	room := s.maxLease - grace - handoverSlack
	if window <= 0 || window < room {
		return nil
	}
	return fmt.Errorf("%w: Batch window (%v) leaves no room under WithMaxLeaseDuration(%v) less %s and the receive's hand-over slack (%v): a message gathering for a batch would reach its lease ceiling before the window ended and leave unhandled, at every delivery; use a window below %v",
		ErrInvalidOption, window, s.maxLease, graceFrom, handoverSlack, max(room, 0))
}

// batchWindowKnown reports whether New can tell the ceiling grace: it was
// given, or the heartbeat interval it defaults to is (WithHeartbeatInterval,
// or WithVisibilityTimeout's third). Otherwise only Run can, from the
// queue's VisibilityTimeout.
func (s *settings) batchWindowKnown() bool {
	return s.ceilingGraceSet || s.heartbeat > 0 || s.visibility > 0
}

// graceFrom names where the ceiling grace comes from, for
// batchWindowConflict: WithCeilingGrace, or one heartbeat interval.
func (s *settings) graceFrom(grace time.Duration) string {
	if s.ceilingGraceSet {
		return fmt.Sprintf("WithCeilingGrace(%v)", s.ceilingGrace)
	}
	return fmt.Sprintf("the ceiling grace (%v, one heartbeat interval)", grace)
}

// fifoConflicts reports the options that do nothing on a FIFO queue: New
// calls it when the URL ends in ".fifo", Run when only the queue's
// FifoQueue attribute says so.
func (s *settings) fifoConflicts(queueURL string) []error {
	var errs []error
	if s.groupLimit > 0 {
		errs = append(errs, fmt.Errorf("%w: WithGroupLimit(%d) does nothing on a FIFO queue (%s): each group runs one message at a time in order there; drop the option for this queue",
			ErrInvalidOption, s.groupLimit, queueURL))
	}
	if s.fairSet {
		errs = append(errs, fmt.Errorf("%w: WithFairDispatch(%t) does nothing on a FIFO queue (%s): each group's order decides which message starts there; drop the option for this queue",
			ErrInvalidOption, !s.fifoDispatch, queueURL))
	}
	return errs
}

// newPollWait is the long-poll wait as New can tell it: WithWaitTime's,
// or SQS's longest when 0 leaves it to the queue's
// ReceiveMessageWaitTimeSeconds, at most the shutdown timeout (at least a
// second), as Run makes it (pollWait).
func (s *settings) newPollWait() time.Duration { return s.pollWait(0, false) }

// minStallLimit is the shortest stall limit (WithHealthLimits) a Consumer
// can keep while healthy: an idle one hears from SQS once per long-poll
// wait, and one whose slots are all busy with long handlers only once per
// heartbeat interval; either answer may take up to a receive's call
// timeout (receiveCallTimeout) more.
func minStallLimit(pollWait, interval time.Duration) time.Duration {
	return max(pollWait, interval) + receiveCallTimeout
}

// stallConflict refuses a stall limit (WithHealthLimits) under
// minStallLimit: every idle Consumer (or every busy one, when the
// heartbeat interval is the longer) would be reported stalled. from names
// what sets interval (unused when interval is 0: not known yet).
func (s *settings) stallConflict(pollWait, interval time.Duration, from string) error {
	least := minStallLimit(pollWait, interval)
	if s.stallLimit == 0 || s.stallLimit >= least {
		return nil
	}
	if interval > pollWait {
		return fmt.Errorf("%w: WithHealthLimits' stall limit %v is below the heartbeat interval (%v, set by %s) plus a call's timeout (%v): a Consumer whose handler slots are all busy with long handlers hears from SQS only once per renewal, and would be reported stalled; make the stall limit at least %v",
			ErrInvalidOption, s.stallLimit, interval, from, receiveCallTimeout, least)
	}
	wait := fmt.Sprintf("WithWaitTime(%v)", s.waitTime)
	switch {
	case s.waitTime == 0:
		wait = "WithWaitTime(0) (the queue's own wait, up to 20s)"
	case pollWait < s.waitTime:
		wait = fmt.Sprintf("the long-poll wait (%v, WithWaitTime cut to WithShutdownTimeout(%v))", pollWait, s.shutdownTimeout)
	case s.waitTime == defaultWaitTime:
		wait = fmt.Sprintf("WithWaitTime's default long-poll wait (%v)", s.waitTime)
	}
	return fmt.Errorf("%w: WithHealthLimits' stall limit %v is below %s plus a receive's call timeout (%v): an idle Consumer hears from SQS only once per long poll, and would be reported stalled; make the stall limit at least %v",
		ErrInvalidOption, s.stallLimit, wait, receiveCallTimeout, least)
}

// fifoURL reports whether a queue URL names a FIFO queue (SQS requires
// the ".fifo" suffix of their names).
func fifoURL(queueURL string) bool {
	return strings.HasSuffix(strings.TrimRight(queueURL, "/"), ".fifo")
}

// sameQueueURL reports whether two queue URLs name the same queue as far
// as the URLs tell: the scheme and host compared without case, a port
// that is the scheme's default dropped, and a trailing slash ignored (the
// path, where the account and name are, keeps its case: queue names are
// case-sensitive). Two different URLs of one queue (an old-style
// queue.amazonaws.com host, a VPC endpoint) are told apart only by the
// queues' ARNs, which Run compares.
func sameQueueURL(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return a == b
	}
	norm := func(u *url.URL) string {
		scheme := strings.ToLower(u.Scheme)
		host, port := strings.ToLower(u.Hostname()), u.Port()
		if port == "443" && scheme == "https" || port == "80" && scheme == "http" {
			port = ""
		}
		if port != "" {
			host += ":" + port
		}
		return scheme + "://" + host + strings.TrimRight(u.Path, "/")
	}
	return norm(ua) == norm(ub)
}

// queueConflicts reports, at Run, the conflicts only the queue at
// queueURL can tell: options that do nothing on a FIFO queue whose URL
// did not say so, a stall limit below the heartbeat interval of the
// queue's own VisibilityTimeout (lease), when no option set the interval,
// and a Batch handler's (bt, nil for none) window that the lease ceiling
// leaves no room for, when the interval sets the ceiling grace.
func (s *settings) queueConflicts(queueURL string, fifo bool, lease, interval time.Duration, bt *batcher) error {
	var errs []error
	if bt != nil && !s.batchWindowKnown() {
		grace := ceilingGrace(interval, s.ceilingGrace, s.ceilingGraceSet)
		if err := s.batchWindowConflict(bt.window, grace, s.graceFrom(grace)); err != nil {
			errs = append(errs, err) // else New did
		}
	}
	if fifo && !fifoURL(queueURL) {
		errs = append(errs, s.fifoConflicts(queueURL)...) // else New did
	}
	if s.visibility == 0 && s.heartbeat == 0 && s.adaptiveMax == 0 {
		from := fmt.Sprintf("the queue's VisibilityTimeout (%v), a third of it", lease)
		if err := s.stallConflict(s.newPollWait(), interval, from); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// fleetConflicts reports, when a Consumer joins a fleet whose idle pause
// (fleet.WithIdlePause) is idlePause, a stall limit (WithHealthLimits)
// the idle Consumer cannot keep: it waits idlePause after a receive that
// got nothing before its next long poll.
func (s *settings) fleetConflicts(queueURL string, idlePause time.Duration) error {
	if s.stallLimit == 0 || idlePause == 0 {
		return nil
	}
	least := minStallLimit(idlePause+s.newPollWait(), 0)
	if s.stallLimit >= least {
		return nil
	}
	return fmt.Errorf("%w: the Consumer of %s: WithHealthLimits' stall limit %v is below the fleet's WithIdlePause(%v) plus the long-poll wait (%v) and a receive's call timeout (%v): an idle Consumer in this fleet hears from SQS only that often, and would be reported stalled; make the stall limit at least %v",
		ErrInvalidOption, queueURL, s.stallLimit, idlePause, s.newPollWait(), receiveCallTimeout, least)
}

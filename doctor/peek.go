package doctor

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// This file holds the check InspectDLQ and Replay make before their first
// receive. SQS has no way to read a message without receiving it, and a receive
// is never free: it raises the message's ApproximateReceiveCount and hides it.
// On a dead-letter queue that nothing else consumes that costs nothing lasting.
// On any other queue it takes work from its consumers and counts toward its
// RedrivePolicy: the receives of a "dry run" could move messages on to the next
// queue. So both refuse such a queue unless told otherwise (Force).

// ErrUnsafePeek is wrapped by the error InspectDLQ and Replay return when they
// refuse to receive from a queue; errors.As with a *PeekRefusal says why.
var ErrUnsafePeek = errors.New("doctor: receiving from the queue could move or hide live messages")

// PeekPlan is what receiving from a queue will do, known before the first
// receive: InspectOptions.BeforePeek and ReplayOptions.BeforePeek get it, and a
// PeekRefusal carries it.
type PeekPlan struct {
	// URL is the queue received from.
	URL string
	// Visible is its ApproximateNumberOfMessages before the first receive.
	Visible int64
	// Max is the most messages that will be received; 0 means every visible one.
	Max int
	// HiddenFor is how long each received message stays hidden at most (the
	// receive's visibility timeout): it is released when the run ends, so only a
	// run that dies leaves it hidden that long.
	HiddenFor time.Duration
	// Forced lists the reasons to refuse that Force overrode; empty when the
	// queue is a dead-letter queue without a RedrivePolicy of its own.
	Forced []string
}

// String says what the receives will do, in one sentence without a final period:
// "receives up to 1000 of the 5 visible messages of URL: each one's
// ApproximateReceiveCount rises by 1 and it is hidden for up to 2m (released at the end)".
func (p PeekPlan) String() string { return p.describe(false) }

// describe is String, or with would the same in the conditional, for a refusal.
func (p PeekPlan) describe(would bool) string {
	n := fmt.Sprintf("every one of the %d visible messages", p.Visible)
	switch {
	case p.Visible == 0:
		n = "the messages that become visible (none is now)"
	case p.Visible == 1:
		n = "the 1 visible message"
	case p.Max > 0 && int64(p.Max) < p.Visible:
		n = fmt.Sprintf("up to %d of the %d visible messages", p.Max, p.Visible)
	}
	if would {
		return fmt.Sprintf("would receive %s of %s: each one's ApproximateReceiveCount would rise by 1 and it would be hidden for up to %s",
			n, p.URL, fmtDur(p.HiddenFor))
	}
	return fmt.Sprintf("receives %s of %s: each one's ApproximateReceiveCount rises by 1 and it is hidden for up to %s (released at the end)",
		n, p.URL, fmtDur(p.HiddenFor))
}

// PeekRefusal is why InspectDLQ or Replay refused to receive from a queue, and
// what the receives would have done. It unwraps to ErrUnsafePeek.
type PeekRefusal struct {
	// Reasons say why, one sentence each: the queue is no dead-letter queue
	// (no queue's RedrivePolicy names it), it could not be told whether it is
	// one, or it has a RedrivePolicy of its own that the receives count toward.
	Reasons []string
	// NotDLQ is true when ListDeadLetterSourceQueues listed no queue, and
	// SourcesError says why that could not be asked ("" when it could).
	NotDLQ       bool
	SourcesError string
	// Redrive is the queue's own RedrivePolicy, nil when it has none.
	Redrive *RedrivePolicy
	// Peek is what the receives would have done.
	Peek PeekPlan
}

func (e *PeekRefusal) Error() string {
	return fmt.Sprintf("doctor: refusing to receive from %s: %s; the run %s",
		e.Peek.URL, strings.Join(e.Reasons, "; "), e.Peek.describe(true))
}

// Unwrap returns ErrUnsafePeek.
func (e *PeekRefusal) Unwrap() error { return ErrUnsafePeek }

// checkPeek decides whether the queue q, whose dead-letter sources are srcs
// (nil with srcsErr when they could not be listed), may be received from: it
// returns the plan, or a *PeekRefusal unless force.
func checkPeek(q Queue, visible int64, srcs []string, srcsErr string, max int, hidden time.Duration, force bool) (PeekPlan, error) {
	plan := PeekPlan{URL: q.URL, Visible: visible, Max: max, HiddenFor: hidden}
	ref := &PeekRefusal{SourcesError: srcsErr, Redrive: q.Redrive}
	switch {
	case srcs == nil:
		ref.Reasons = append(ref.Reasons, fmt.Sprintf("it cannot be told whether it is a dead-letter queue (%s)", srcsErr))
	case len(srcs) == 0:
		ref.NotDLQ = true
		ref.Reasons = append(ref.Reasons, "it is not a dead-letter queue: no queue's RedrivePolicy names it "+
			"(ListDeadLetterSourceQueues lists none), so its messages are live work that a receive hides from its consumers")
	}
	if r := q.Redrive; r != nil {
		ref.Reasons = append(ref.Reasons, fmt.Sprintf("it has a RedrivePolicy of its own (maxReceiveCount %d, to %s): every receive counts toward it, "+
			"so a message already received %d times (only a receive tells; a message SQS moved here keeps its count) "+
			"moves to %s when it is received again, by this run or by the next receive after it",
			r.MaxReceiveCount, arnName(r.DeadLetterTargetARN), r.MaxReceiveCount, arnName(r.DeadLetterTargetARN)))
	}
	if len(ref.Reasons) == 0 {
		return plan, nil
	}
	ref.Peek = plan
	if !force {
		return plan, ref
	}
	plan.Forced = ref.Reasons
	return plan, nil
}

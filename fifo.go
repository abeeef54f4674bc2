package sqsconsumer

import (
	"errors"
	"sync"

	"github.com/sqskit/sqsconsumer/internal/fifo"
)

// errEarlierFailed is the error of a FIFO message that did not run (or
// whose result in a batch does not count) because an earlier message of
// its group failed or was handed back: it is handed back at once
// (visibility 0), is not a handler failure (no breaker counts it, no
// backoff holds it), and SQS delivers the group again from the earlier
// message.
var errEarlierFailed = errors.New("sqsconsumer: an earlier message of its FIFO group failed; released without running to keep the group's order")

// groupOrder is where a Consumer keeps the order of its FIFO message
// groups (fifo.Order holds the rules): every message it holds from a FIFO
// queue is entered at dispatch and leaves when its settlement is over.
// Single-message mode starts a message only when it is the first of its
// group held here; batch mode lets a group's messages into one batch in
// order (batch.go); Pause, the breaker and shutdown hand back what has
// not started (handBackUnstarted). Messages of standard queues, and those
// without a group, pass through untouched. Safe for concurrent use.
type groupOrder struct {
	on bool // the queue is FIFO; set before Run's first receive

	mu sync.Mutex // guards o; a leaf: nothing else is locked under it
	o  fifo.Order[*delivery]
}

// ordered reports whether d's message has a group whose order counts.
func (g *groupOrder) ordered(d *delivery) bool { return g.on && d.msg.GroupID != "" }

// enter records d, just dispatched, at the end of its group: whether it
// may start now, waits for an earlier one, or must be handed back since
// an earlier one is being handed back.
func (g *groupOrder) enter(d *delivery) fifo.Verdict {
	if !g.ordered(d) {
		return fifo.Start
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.o.Enter(d.msg.GroupID, d)
}

// leave takes d out of its group once its settlement is over; done: its
// message was deleted. It returns the next of the group, which may start
// now (nil: none), and the later messages of the group that must be
// handed back because d was not done.
func (g *groupOrder) leave(d *delivery, done bool) (next *delivery, back []*delivery) {
	if !g.ordered(d) {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	next, _, back = g.o.Leave(d.msg.GroupID, d, done)
	return next, back
}

// handBack marks d as handed back (it will not run) and returns the later
// messages of its group, which must be handed back with it.
func (g *groupOrder) handBack(d *delivery) []*delivery {
	if !g.ordered(d) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.o.HandBack(d.msg.GroupID, d)
}

// tails marks and returns, in every group, the messages waiting behind
// the first (single-message mode: none of them holds a slot).
func (g *groupOrder) tails() []*delivery {
	if !g.on {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.o.Tails()
}

// group returns the messages of d's group held here, in order (d among
// them): nil when d has no ordered group.
func (g *groupOrder) group(d *delivery) []*delivery {
	if !g.ordered(d) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.o.Items(d.msg.GroupID)
}

// returning reports whether d is to be handed back (an earlier message of
// its group failed or was handed back).
func (g *groupOrder) returning(d *delivery) bool {
	if !g.ordered(d) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.o.Returning(d.msg.GroupID, d)
}

// earlierFailed applies the group rule to the results of members handled
// together in order (a batch): for each, whether its own result must be
// replaced by errEarlierFailed because an earlier member of its group
// failed (failed(i)), or because it is itself to be handed back.
func (g *groupOrder) earlierFailed(ds []*delivery, failed func(i int) bool) []bool {
	if !g.on {
		return make([]bool, len(ds))
	}
	out := fifo.EarlierFailed(len(ds), func(i int) string { return ds[i].msg.GroupID }, func(i int) bool {
		return ds[i].msg.GroupID != "" && failed(i)
	})
	for i, d := range ds {
		out[i] = out[i] || g.returning(d)
	}
	return out
}

// Package fifo keeps the order of SQS FIFO message groups: the one place
// where the rules of group order live, for the Consumer (single messages
// and batches, with Pause, the breaker and shutdown) and for the Lambda
// adapter.
//
// The rules: a group's messages held by a process run one at a time, in
// the order SQS delivered them; once one of them will not be done (it
// failed, was handed back, or its lease ended), every later one held is
// handed back too and never runs, and nothing of the group starts until
// every hand-back is over. SQS then delivers the group again from the
// first message that was not done.
package fifo

import "slices"

// Verdict is what Enter decides for a message that joined its group.
type Verdict int

const (
	// Start: the message is the first of its group held here; it may
	// start.
	Start Verdict = iota
	// Wait: an earlier message of its group is held here; it starts when
	// Leave returns it.
	Wait
	// HandBack: an earlier message of its group is being handed back; so
	// must this one be, at once (Leave it once that is done).
	HandBack
)

// Order keeps, for each group, the messages held in delivery order. The
// messages of a group that are to be handed back ("returning") always
// form the end of its list: marking one marks every later one, and a
// message that joins a group with a returning message is returning too.
//
// The zero value is ready to use. An Order is not safe for concurrent
// use: its owner guards it.
type Order[T comparable] struct {
	groups map[string]*group[T]
}

type group[T comparable] struct {
	items []item[T]
}

type item[T comparable] struct {
	x         T
	returning bool
}

// Enter adds x, just received, at the end of group g and says whether it
// may start, must wait, or must be handed back.
func (o *Order[T]) Enter(g string, x T) Verdict {
	if o.groups == nil {
		o.groups = make(map[string]*group[T])
	}
	gr := o.groups[g]
	if gr == nil {
		gr = &group[T]{}
		o.groups[g] = gr
	}
	v := Start
	switch n := len(gr.items); {
	case n > 0 && gr.items[n-1].returning:
		v = HandBack
	case n > 0:
		v = Wait
	}
	gr.items = append(gr.items, item[T]{x: x, returning: v == HandBack})
	return v
}

// Leave takes x out of group g once it is settled: done when its message
// was deleted, false otherwise (failed, released, handed back, lease
// ended). When x was done and was the group's first, next is the new
// first, which may start now (ok true), unless it is returning. When x
// was not done, every later message of the group not yet returning is
// marked returning and listed in back: the caller hands them back (a
// message already returning is someone else's to hand back). Leave of a
// message not in the group does nothing.
func (o *Order[T]) Leave(g string, x T, done bool) (next T, ok bool, back []T) {
	gr := o.groups[g]
	if gr == nil {
		return next, false, nil
	}
	i := gr.index(x)
	if i < 0 {
		return next, false, nil
	}
	if !done {
		back = gr.markFrom(i + 1)
	}
	gr.items = slices.Delete(gr.items, i, i+1)
	if len(gr.items) == 0 {
		delete(o.groups, g)
		return next, false, back
	}
	if i == 0 && done && !gr.items[0].returning {
		return gr.items[0].x, true, back
	}
	return next, false, back
}

// Successor returns the message directly behind x when x is the first of
// group g and that message is not returning (ok false otherwise): the one
// that would start if x left done. The caller that knows it for a new
// delivery of x's own message (delivered again while x wound down) may
// let it take x's place: x then leaves as done, so nothing behind it goes
// back.
func (o *Order[T]) Successor(g string, x T) (y T, ok bool) {
	gr := o.groups[g]
	if gr == nil || len(gr.items) < 2 || gr.items[0].x != x || gr.items[1].returning {
		return y, false
	}
	return gr.items[1].x, true
}

// HandBack marks x, which will be handed back without running, and every
// later message of its group as returning, and lists the later ones that
// were not returning yet: the caller hands them back as well. x stays in
// the group until its Leave.
func (o *Order[T]) HandBack(g string, x T) (back []T) {
	gr := o.groups[g]
	if gr == nil {
		return nil
	}
	i := gr.index(x)
	if i < 0 {
		return nil
	}
	back = gr.markFrom(i + 1)
	gr.items[i].returning = true
	return back
}

// Tails marks, in every group, the messages behind the first as
// returning and lists those not returning yet: for a pause or a shutdown,
// which hand back what has not started. The first of each group stays as
// it is (it runs, or waits for a slot: the caller decides).
func (o *Order[T]) Tails() (back []T) {
	for _, gr := range o.groups {
		back = append(back, gr.markFrom(1)...)
	}
	return back
}

// Ahead lists the messages before x in group g, in order (nil when x is
// the first or not there). The slice is the caller's.
func (o *Order[T]) Ahead(g string, x T) []T {
	gr := o.groups[g]
	if gr == nil {
		return nil
	}
	i := gr.index(x)
	if i <= 0 {
		return nil
	}
	out := make([]T, i)
	for j := range out {
		out[j] = gr.items[j].x
	}
	return out
}

// Items lists the messages held in group g, in order. The slice is the
// caller's.
func (o *Order[T]) Items(g string) []T {
	gr := o.groups[g]
	if gr == nil {
		return nil
	}
	out := make([]T, len(gr.items))
	for j := range out {
		out[j] = gr.items[j].x
	}
	return out
}

// Returning reports whether x, in group g, is to be handed back.
func (o *Order[T]) Returning(g string, x T) bool {
	gr := o.groups[g]
	if gr == nil {
		return false
	}
	i := gr.index(x)
	return i >= 0 && gr.items[i].returning
}

// Len is the number of messages held in group g.
func (o *Order[T]) Len(g string) int {
	if gr := o.groups[g]; gr != nil {
		return len(gr.items)
	}
	return 0
}

// Groups is the number of groups with messages held.
func (o *Order[T]) Groups() int { return len(o.groups) }

func (gr *group[T]) index(x T) int {
	for i := range gr.items {
		if gr.items[i].x == x {
			return i
		}
	}
	return -1
}

// markFrom marks items[from:] returning and returns those newly marked.
func (gr *group[T]) markFrom(from int) []T {
	var back []T
	for j := from; j < len(gr.items); j++ {
		if !gr.items[j].returning {
			gr.items[j].returning = true
			back = append(back, gr.items[j].x)
		}
	}
	return back
}

// EarlierFailed applies the group-order rule to the results of a sequence
// handled together (a batch, a Lambda event): it reports, for each item in
// sequence order, whether it must fail because an earlier item of its
// group failed. failed(i) says whether item i failed on its own; group(i)
// is its group. An item that failed on its own is not marked (its own
// failure stands), unless an earlier one of its group failed too. The
// items marked are the ones whose own result must be replaced: they may
// not be settled as done.
func EarlierFailed(n int, group func(i int) string, failed func(i int) bool) []bool {
	out := make([]bool, n)
	var bad map[string]bool
	for i := range n {
		g := group(i)
		if bad[g] {
			out[i] = true
			continue
		}
		if failed(i) {
			if bad == nil {
				bad = make(map[string]bool)
			}
			bad[g] = true
		}
	}
	return out
}

package sqsconsumer

import (
	"errors"
	"sync"

	"github.com/sqskit/sqsconsumer/ecsprotect"

	"github.com/sqskit/sqsconsumer/internal/broken"
	"github.com/sqskit/sqsconsumer/internal/fifo"
)

// registry is the run's one record of what it holds: every delivery from
// its dispatch (add) to the end of its settlement (leave, then done). It
// indexes them by message ID (a redelivery of a message held here is
// adopted, not run twice), counts them for the shutdown's wait (idle),
// and keeps the order of FIFO message groups (fifo.Order holds the
// rules), which single-message mode, the batcher, Pause, the breaker and
// the shutdown all ask. Health reads it too (all). Safe for concurrent
// use.
//
// The count is not a sync.WaitGroup: a receive in flight at shutdown
// dispatches its messages (to hand them back) while the shutdown waits,
// and a WaitGroup's Add from zero must not race its Wait (it panics:
// "WaitGroup is reused before previous Wait has returned").
type registry struct {
	fifo bool // the queue is FIFO; set before the first receive
	// busy, when set (WithScaleInProtection), is told when the registry
	// starts holding anything (Acquire) and when it holds nothing again
	// (Release). Its methods only count, never block: they are called
	// under mu.
	busy holder

	mu   sync.Mutex // guards the fields below; under it only the Protector's lock is taken (busy)
	byID map[string]*delivery
	// behind holds the deliveries whose message's entry in byID a newer
	// delivery took (replace) while they wind down, until their own
	// leave: all still lists them (a handler that runs on).
	behind map[*delivery]struct{}
	n      int           // deliveries added and not yet done
	idleCh chan struct{} // closed when n comes down to 0; nil while nobody waits
	order  fifo.Order[*delivery]
}

// holder is told when something starts and stops being held
// (*ecsprotect.Protector).
type holder interface {
	Acquire()
	Release()
}

func newRegistry(fifoQueue bool, busy *ecsprotect.Protector) *registry {
	g := &registry{fifo: fifoQueue, byID: make(map[string]*delivery)}
	if busy != nil {
		g.busy = busy
	}
	return g
}

// errEarlierFailed is the error of a FIFO message that did not run (or
// whose result in a batch does not count) because an earlier message of
// its group failed or was handed back: it is handed back at once
// (visibility 0), is not a handler failure (no breaker counts it, no
// backoff holds it), and SQS delivers the group again from the earlier
// message.
var errEarlierFailed = errors.New("sqsconsumer: an earlier message of its FIFO group failed; released without running to keep the group's order")

// ordered reports whether d's message has a group whose order counts.
func (g *registry) ordered(d *delivery) bool { return g.fifo && d.msg.GroupID != "" }

// add records d, just made, unless a delivery of its message is held:
// that one is returned (prev) and d is not added; then the caller either
// hands the new receive to prev or, when prev is only being finished,
// puts d in its place (replace). Once added, d counts as held and stands
// at the end of its FIFO group: v says whether it may start now, waits
// for an earlier one, or must be handed back since an earlier one is
// being handed back.
func (g *registry) add(d *delivery) (prev *delivery, v fifo.Verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if prev = g.byID[d.msg.ID]; prev != nil {
		return prev, fifo.Start
	}
	g.byID[d.msg.ID] = d
	return nil, g.enterLocked(d)
}

// replace records d in place of old (which stays counted and in its group
// until its own leave), and reports false, doing nothing, when the
// message's entry is no longer old (another receive of it was dispatched
// meanwhile). On a FIFO queue d then waits behind old in its group, and
// takes old's place if old leaves undone (leave): a redelivery that
// arrives while old winds down keeps the group's order.
func (g *registry) replace(d, old *delivery) (ok bool, v fifo.Verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byID[d.msg.ID] != old {
		return false, fifo.Start
	}
	g.byID[d.msg.ID] = d
	if g.behind == nil {
		g.behind = make(map[*delivery]struct{})
	}
	g.behind[old] = struct{}{}
	return true, g.enterLocked(d)
}

func (g *registry) enterLocked(d *delivery) fifo.Verdict {
	if g.n++; g.n == 1 && g.busy != nil {
		g.busy.Acquire()
	}
	if !g.ordered(d) {
		return fifo.Start
	}
	return g.order.Enter(d.msg.GroupID, d)
}

// leave takes d out once its settlement is over (done: its message was
// deleted). It returns the next of its FIFO group, which may start now
// (nil: none), and the later messages of the group that must be handed
// back because d was not done; unless the next is a new delivery of d's
// own message (received again while d wound down): that one takes d's
// place, first of the group, and starts, and nothing behind it goes back.
// d still counts as held until done.
func (g *registry) leave(d *delivery, done bool) (next *delivery, back []*delivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byID[d.msg.ID] == d {
		delete(g.byID, d.msg.ID)
	}
	delete(g.behind, d)
	if g.ordered(d) {
		if y, ok := g.order.Successor(d.msg.GroupID, d); ok && y.msg.ID == d.msg.ID {
			done = true // its redelivery carries on in its place
		}
		next, _, back = g.order.Leave(d.msg.GroupID, d, done || broken.Is(broken.FIFOHandBackSkipped))
	}
	return next, back
}

// done ends d's count, the last step of its finish.
func (g *registry) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n > 0 {
		return
	}
	if g.busy != nil {
		g.busy.Release()
	}
	if g.idleCh != nil {
		close(g.idleCh)
		g.idleCh = nil
	}
}

// idle returns a channel closed once no delivery is held: at once if none
// is now. A delivery dispatched after that does not reopen it.
func (g *registry) idle() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := g.idleCh
	if ch == nil {
		ch = make(chan struct{})
		g.idleCh = ch
	}
	if g.n == 0 {
		close(ch)
		g.idleCh = nil
	}
	return ch
}

// all returns the deliveries held now: the newest delivery of each
// message, and the older ones still winding down behind them.
func (g *registry) all() []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*delivery, 0, len(g.byID)+len(g.behind))
	for _, d := range g.byID {
		out = append(out, d)
	}
	for d := range g.behind {
		out = append(out, d)
	}
	return out
}

// handBack marks d as handed back (it will not run) and returns the later
// messages of its group, which must be handed back with it.
func (g *registry) handBack(d *delivery) []*delivery {
	if !g.ordered(d) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.order.HandBack(d.msg.GroupID, d)
}

// tails marks and returns, in every group, the messages waiting behind
// the first (single-message mode: none of them holds a slot).
func (g *registry) tails() []*delivery {
	if !g.fifo {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.order.Tails()
}

// parkedBehind takes the deliveries parked behind an older delivery of
// their own message (delivery.parked), as takeBack does: the caller hands
// them back (parked) and the later messages of their groups (later,
// returnLater).
func (g *registry) parkedBehind() (parked, later []*delivery) {
	if !g.fifo {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range g.byID {
		if !d.parked.Load() || !g.ordered(d) {
			continue
		}
		if ok, l := g.takeBackLocked(d); ok {
			parked = append(parked, d)
			later = append(later, l...)
		}
	}
	return parked, later
}

// takeBack takes d, waiting behind an earlier message of its FIFO group
// (parked or not), to be handed back, when nobody hands it back yet: it
// marks d, and the later messages of its group, to be handed back and
// returns those later ones; false, doing nothing, otherwise (the earlier
// one's leave made it first: its finish hands it on; or it is being
// handed back already).
func (g *registry) takeBack(d *delivery) (ok bool, later []*delivery) {
	if !g.ordered(d) {
		return false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.takeBackLocked(d)
}

// takeBackLocked is takeBack for an ordered d; the caller holds mu.
func (g *registry) takeBackLocked(d *delivery) (ok bool, later []*delivery) {
	grp := d.msg.GroupID
	if len(g.order.Ahead(grp, d)) == 0 || g.order.Returning(grp, d) || d.parked.Load() && !d.parked.Swap(false) {
		return false, nil
	}
	return true, g.order.HandBack(grp, d)
}

// group returns the messages of d's group held here, in order (d among
// them): nil when d has no ordered group.
func (g *registry) group(d *delivery) []*delivery {
	if !g.ordered(d) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.order.Items(d.msg.GroupID)
}

// returning reports whether d is to be handed back (an earlier message of
// its group failed or was handed back).
func (g *registry) returning(d *delivery) bool {
	if !g.ordered(d) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.order.Returning(d.msg.GroupID, d)
}

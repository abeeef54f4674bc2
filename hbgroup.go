package sqsconsumer

import (
	"sync"
	"time"
)

// hbGroup starts the heartbeats of the leases of one receive. They were
// received by the same request with the same configuration, so their
// first renewal is due at the same instant, and one timer serves them all
// instead of one per lease. Most leases are settled before then and leave
// the group; when the last one leaves, the timer is stopped. A lease whose
// schedule moves earlier leaves the group for a timer of its own.
type hbGroup struct {
	owner *sync.WaitGroup // counts armed timers and running fire calls

	mu     sync.Mutex // guards the fields below
	at     time.Time  // when the timer fires; zero until armed
	timer  *time.Timer
	leases []*Lease // nil entries have left
	left   int      // non-nil entries
	fired  bool
}

func newHBGroup(owner *sync.WaitGroup) *hbGroup { return &hbGroup{owner: owner} }

// add registers l, whose first wake is at, and reports whether it joined:
// it does not when the group's timer is set for another instant or has
// fired. The caller holds l.mu.
func (g *hbGroup) add(l *Lease, at time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.fired:
		return false
	case g.timer == nil:
		if g.leases == nil {
			g.leases = make([]*Lease, 0, maxBatchSize)
		}
		g.at = at
		g.owner.Add(1)
		g.timer = time.AfterFunc(time.Until(at), g.fire)
	case !g.at.Equal(at):
		return false
	}
	l.groupIdx = uint8(len(g.leases)) // at most maxBatchSize
	g.leases = append(g.leases, l)
	g.left++
	return true
}

// fireAt is when the group's timer fires.
func (g *hbGroup) fireAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.at
}

// remove takes l out before the timer fires and reports whether it was
// still waiting (false: the timer fired and l's heartbeat is starting).
// The caller holds l.mu.
func (g *hbGroup) remove(l *Lease) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fired || int(l.groupIdx) >= len(g.leases) || g.leases[l.groupIdx] != l {
		return false
	}
	g.leases[l.groupIdx] = nil
	g.left--
	if g.left == 0 && g.timer.Stop() {
		g.leases = nil
		g.owner.Done()
	}
	return true
}

// fire starts the heartbeat of every lease still waiting.
func (g *hbGroup) fire() {
	defer g.owner.Done()
	g.mu.Lock()
	g.fired = true
	leases := g.leases
	g.leases = nil
	g.mu.Unlock()
	for _, l := range leases {
		if l == nil {
			continue
		}
		l.mu.Lock()
		mine := l.group == g
		if mine {
			l.group = nil
		}
		l.mu.Unlock()
		if mine {
			go l.heartbeat()
		}
	}
}

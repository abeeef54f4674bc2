// Package share is a budget of handler slots shared by several Consumers:
// the machinery of package fleet, kept out of the root package's API.
//
// A Pool holds size slots. Each Consumer in it has a Member. A Consumer's
// flow takes a slot (Acquire) before it starts a handler and gives it back
// (Release) when the handler is done; a slot given back goes to the member
// that deserves it most (Pick), which then starts its oldest waiting
// message through its grant callback. Members also tell the pool how many
// slots they could use (SetDemand); the pool divides the slots among them
// by priority and weight (Share), which each flow uses to size its
// receives, so that a queue with a small share does not read ahead
// messages it will not get slots for.
//
// Locking: a flow calls Acquire, SetWant, SetDemand and Share with its own
// lock held; the pool never takes a flow's lock while it holds its own,
// and calls the grant callbacks (which take their flow's lock) with no
// lock held. Release must be called with no flow lock held.
package share

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Attach joins a Consumer (the root package's *Consumer, passed as any)
// to a pool through m. The root package sets it in an init function;
// package fleet calls it. It fails if the Consumer's Run has been called
// (Run reads its member before it sets up) or it already belongs to a
// pool.
var Attach func(consumer any, m *Member) error

// Pool is a budget of handler slots. Safe for concurrent use.
type Pool struct {
	mu      sync.Mutex // guards everything below and the members' pool fields
	size    int
	free    int
	members []*Member
	at      time.Time // when the members' usage was last brought up to date
	timer   *time.Timer
	timerAt time.Time // when timer fires, zero if it is not armed
}

// NewPool returns a pool of size slots (size >= 1).
func NewPool(size int) *Pool {
	return &Pool{size: size, free: size}
}

// Size returns the number of slots.
func (p *Pool) Size() int { return p.size }

// Member is one Consumer's place in a pool. Weight, Priority and
// IdlePause are set by Join and read-only afterwards. The member's
// Consumer bounds the slots it holds itself (its concurrency).
type Member struct {
	pool *Pool

	Weight   int // share of the slots relative to other members of its priority (>= 1)
	Priority int // members of a higher priority get slots first
	// IdlePause is how long the member's Consumer waits after a receive
	// that got nothing before it sends the next (0: no pause).
	IdlePause time.Duration

	grant func() bool // starts the member's oldest ready message in a slot given to it; false if none
	wake  func()      // re-evaluates the member's receives; must not block or take locks

	// Guarded by pool.mu.
	held        int       // slots held, including one granted and not yet taken
	want        bool      // the member has ready messages and room for them
	expectUntil time.Time // messages are on their way until then (see SetDemand)
	demand      int       // slots it could use now
	share       int       // slots it is entitled to, for sizing receives
	usage       float64   // slot-seconds held, divided by Weight
	left        bool      // Leave took it out of the pool
}

// Join adds a member to p.
func (p *Pool) Join(weight, priority int, idlePause time.Duration) *Member {
	m := &Member{pool: p, Weight: weight, Priority: priority, IdlePause: idlePause}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members = append(p.members, m)
	return m
}

// Bind sets the member's callbacks, when its Consumer starts: grant starts
// the member's oldest ready message in a slot the pool gives it (false if
// it has none: the slot goes back), and wake makes it look again at its
// receives after its share grew (it must not block).
func (m *Member) Bind(grant func() bool, wake func()) {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	m.grant, m.wake = grant, wake
}

// advanceLocked brings every member's usage up to now.
func (p *Pool) advanceLocked(now time.Time) {
	if !p.at.IsZero() && now.After(p.at) {
		dt := now.Sub(p.at).Seconds()
		for _, m := range p.members {
			m.usage += float64(m.held) * dt / float64(m.Weight)
		}
	}
	p.at = now
}

// catchUpLocked keeps a member that held nothing from banking credit
// while it was idle: its usage is raised to the least usage of the
// members holding slots, so it competes as an equal, not as a creditor.
func (p *Pool) catchUpLocked(m *Member) {
	if m.held > 0 {
		return
	}
	least := math.Inf(1)
	for _, o := range p.members {
		if o != m && o.held > 0 {
			least = min(least, o.usage)
		}
	}
	if !math.IsInf(least, 1) {
		m.usage = max(m.usage, least)
	}
}

// Acquire takes a slot for m if one is free and no other member is
// waiting for one; otherwise it marks m as waiting, and a slot given back
// later is granted to it (through its grant callback) when its turn
// comes. The caller must want a slot: it has a ready message and room to
// start it.
func (m *Member) Acquire() bool {
	p := m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(time.Now())
	if !m.want {
		p.catchUpLocked(m)
	}
	if p.free > p.reservedLocked(m, time.Now()) && !p.othersWaitingLocked(m) {
		p.free--
		m.held++
		m.want = false
		return true
	}
	m.want = true
	return false
}

// othersWaitingLocked reports whether a member other than m, of m's
// priority or a higher one, waits for a slot: then a free slot is being
// handed out by a Release, in turn.
func (p *Pool) othersWaitingLocked(m *Member) bool {
	for _, o := range p.members {
		if o != m && o.want && o.Priority >= m.Priority {
			return true
		}
	}
	return false
}

// reservedLocked counts the free slots kept from m for members that
// come before it (see beats) and whose messages are on their way (see
// SetDemand), while they hold fewer slots than their share. Without it a
// queue's read-ahead that misses now and then (handlers finishing
// together) would hand the slot it misses to a queue behind it for a whole
// handler run: strict priority would leak, and weights would drift.
func (p *Pool) reservedLocked(m *Member, now time.Time) int {
	n := 0
	for _, o := range p.members {
		if o != m && o.expectUntil.After(now) && o.share > o.held && beats(o, m) {
			n += o.share - o.held
		}
	}
	return n
}

// beats reports whether a comes before b for a slot: a higher priority,
// or the same one and less slot time used for its weight.
func beats(a, b *Member) bool {
	return a.Priority > b.Priority || (a.Priority == b.Priority && a.usage < b.usage)
}

// armLocked makes the pool hand out slots again when the earliest
// reservation now in force ends.
func (p *Pool) armLocked(now time.Time) {
	var at time.Time
	for _, m := range p.members {
		if m.expectUntil.After(now) && (at.IsZero() || m.expectUntil.Before(at)) {
			at = m.expectUntil
		}
	}
	if at.IsZero() || (!p.timerAt.IsZero() && !p.timerAt.After(at) && p.timerAt.After(now)) {
		return
	}
	p.timerAt = at
	if p.timer == nil {
		p.timer = time.AfterFunc(at.Sub(now), func() {
			p.mu.Lock()
			p.timerAt = time.Time{}
			p.grantLocked()
			p.mu.Unlock()
		})
		return
	}
	p.timer.Reset(at.Sub(now))
}

// SetWant records whether m has ready messages and room to start them.
// Setting it must be followed by a Release (which hands out slots), or
// done through Acquire.
func (m *Member) SetWant(want bool) {
	p := m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if want && !m.want {
		p.advanceLocked(time.Now())
		p.catchUpLocked(m)
	}
	m.want = want
}

// Release gives back one of m's slots and hands free slots to the waiting
// members that deserve them most, calling their grant callbacks with no
// lock held. Call it with no flow lock held.
func (m *Member) Release() {
	p := m.pool
	p.mu.Lock()
	if m.left {
		// Leave gave its slots back already.
		p.mu.Unlock()
		return
	}
	p.advanceLocked(time.Now())
	m.held--
	p.free++
	p.grantLocked()
	p.mu.Unlock()
}

// Dispatch hands free slots to waiting members, as Release does, after a
// member's receive returned: slots kept for it (see reservedLocked)
// may be free for others now. Call it with no flow lock held.
func (m *Member) Dispatch() {
	p := m.pool
	p.mu.Lock()
	p.grantLocked()
	p.mu.Unlock()
}

// grantLocked hands free slots to the waiting members, best first; it
// unlocks p.mu around each grant callback.
func (p *Pool) grantLocked() {
	for p.free > 0 {
		w := p.pickLocked()
		if w == nil {
			break
		}
		p.free--
		w.held++
		grant := w.grant
		p.mu.Unlock()
		ok := grant()
		p.mu.Lock()
		if !ok && !w.left { // (a member that left gave the slot back then)
			// It had nothing to start after all (and has said so with
			// SetWant(false)): the slot is free again.
			p.advanceLocked(time.Now())
			w.held--
			p.free++
		}
	}
}

// pickLocked returns the waiting member that gets the next slot: of the
// highest priority, the one that has used the least slot time for its
// weight. nil if none waits, or if the free slots are kept for members
// that come before it (see reservedLocked).
func (p *Pool) pickLocked() *Member {
	var best *Member
	for _, m := range p.members {
		if !m.want || m.grant == nil {
			continue
		}
		if best == nil || beats(m, best) {
			best = m
		}
	}
	if now := time.Now(); best != nil && p.free <= p.reservedLocked(best, now) {
		p.armLocked(now)
		return nil
	}
	return best
}

// SetDemand records how many slots m could use now (0 when paused or
// stopped, 1 while its queue looks empty, its limit otherwise) and until
// when messages are on their way to it (zero: none; a receive in flight
// from a queue whose latest receive was full, expected back within about
// a round trip), and, if that changes the shares, recomputes them and
// wakes the members whose share grew.
func (m *Member) SetDemand(d int, expectUntil time.Time) {
	p := m.pool
	p.mu.Lock()
	m.expectUntil = expectUntil
	if m.demand == d {
		p.mu.Unlock()
		return
	}
	m.demand = d
	old := make([]int, len(p.members))
	for i, o := range p.members {
		old[i] = o.share
	}
	p.divideLocked()
	var wake []func()
	for i, o := range p.members {
		if o != m && o.share > old[i] && o.wake != nil {
			wake = append(wake, o.wake)
		}
	}
	p.mu.Unlock()
	for _, w := range wake {
		w()
	}
}

// Share returns how many slots m is entitled to now: its part of the pool
// by priority and weight among the members that could use slots, capped
// by what it could use, rounded up.
func (m *Member) Share() int {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	return m.share
}

// divideLocked recomputes every member's share.
func (p *Pool) divideLocked() {
	demands := make([]int, len(p.members))
	weights := make([]int, len(p.members))
	prios := make([]int, len(p.members))
	for i, m := range p.members {
		demands[i], weights[i], prios[i] = m.demand, m.Weight, m.Priority
	}
	for i, s := range Divide(p.size, demands, weights, prios) {
		p.members[i].share = int(math.Ceil(s - 1e-9))
	}
}

// Divide splits size slots among members with the given demands, weights
// and priorities: higher priorities are served first, each member of a
// priority gets slots in proportion to its weight, and none gets more
// than its demand (water-filling: what a capped member leaves goes to the
// others). Pure, for table tests.
func Divide(size int, demands, weights, prios []int) []float64 {
	out := make([]float64, len(demands))
	left := float64(size)
	levels := map[int]bool{}
	for _, pr := range prios {
		levels[pr] = true
	}
	for left > 0 && len(levels) > 0 {
		top := math.MinInt
		for pr := range levels {
			top = max(top, pr)
		}
		delete(levels, top)
		var open []int
		for i := range demands {
			if prios[i] == top && demands[i] > 0 {
				open = append(open, i)
			}
		}
		for len(open) > 0 && left > 1e-9 {
			sumW := 0
			for _, i := range open {
				sumW += weights[i]
			}
			unit := left / float64(sumW)
			var still []int
			capped := false
			for _, i := range open {
				if float64(demands[i]) <= unit*float64(weights[i]) {
					out[i] = float64(demands[i])
					left -= out[i]
					capped = true
				} else {
					still = append(still, i)
				}
			}
			if !capped {
				for _, i := range open {
					out[i] = unit * float64(weights[i])
				}
				left = 0
				break
			}
			open = still
		}
	}
	return out
}

// Leave removes m from p: a member whose Consumer never started, or one
// whose Consumer's Run has returned (its flow calls m no more). Members may
// join and leave while the others run. Slots m still counts as held (a
// grant that raced the end of its run) go back to the pool, the shares
// are worked out again without it (waking the members whose share grew),
// and free slots are handed to the waiting members. Call it with no flow
// lock held; after it the member is inert (a Release or a grant's answer
// from it changes nothing).
func (p *Pool) Leave(m *Member) {
	p.mu.Lock()
	i := slices.Index(p.members, m)
	if i < 0 {
		p.mu.Unlock()
		return
	}
	p.advanceLocked(time.Now())
	old := make([]int, len(p.members))
	for j, o := range p.members {
		old[j] = o.share
	}
	old = slices.Delete(old, i, i+1)
	p.members = slices.Delete(p.members, i, i+1)
	m.left = true
	p.free += m.held
	m.held, m.want, m.demand, m.share = 0, false, 0, 0
	p.divideLocked()
	var wake []func()
	for j, o := range p.members {
		if o.share > old[j] && o.wake != nil {
			wake = append(wake, o.wake)
		}
	}
	p.grantLocked()
	p.mu.Unlock()
	for _, w := range wake {
		w()
	}
}

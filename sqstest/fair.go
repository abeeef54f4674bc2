package sqstest

import (
	"container/heap"
	"math"
	"time"
)

// This file makes standard queues fair queues, as AWS describes them in the SQS
// developer guide ("How Amazon SQS fair queues work"): the tenants of a standard
// queue are its message groups (MessageGroupId), and each message without a group is
// a tenant of its own. A tenant is noisy when it accounts for more than 10% of the
// queue's in-flight messages and has at least 30 of its own in flight (concurrency
// share), or when its recent share of the consumers' processing time exceeds 10%
// (processing time share). Quiet tenants' messages are delivered first, in arrival
// order; then the noisy tenants', the one with the fewest in flight first. Nothing is
// dropped or throttled. A noisy tenant becomes quiet again when its backlog has been
// consumed or none of its messages has been in flight for 5 minutes.
//
// What the guide leaves open is chosen in unconfirmed.go (fairTimeConstant,
// fairPassInterval, processing time as time in flight, groupless messages always
// quiet).
//
// Cost: every message change touches its tenant in O(log g + log m) (g tenants with
// receivable messages, m of the tenant's receivable messages); a receive picks each
// message in O(log g); the periodic detection pass visits the tenants with messages
// in flight and the noisy ones, at most once per fairPassInterval.

// Documented thresholds ("How Amazon SQS fair queues work"; AWS calls them
// approximate, sqstest applies them exactly).
const (
	fairInFlightShare = 0.10 // concurrency share: more than this of the queue's in flight...
	fairMinInFlight   = 30   // ...and at least this many of the tenant's own
	fairTimeShare     = 0.10 // processing time share: more than this
	fairQuietAfter    = 5 * time.Minute
	// fairForgetAfter is how long an emptied tenant's processing time is kept
	// before the tenant is forgotten (its weight has decayed to e^-10 by then);
	// it bounds the memory kept for groups that are no longer used.
	fairForgetAfter = 10 * fairTimeConstant
)

// tenant is one tenant of a standard queue: a message group, or (loose) the
// messages without a group, which are each a tenant of their own and always quiet
// (see the fair-queue choices in unconfirmed.go); they share this one record only so
// that they take their place among the quiet tenants in arrival order.
type tenant struct {
	id    string
	loose bool
	// head and tail are its messages still in the queue, in arrival order, linked
	// through message.gprev and gnext (which FIFO queues use for their groups).
	head, tail             *message
	present, ready, leased int
	readyMsgs              msgHeap // its receivable messages by arrival

	noisy     bool
	idleSince time.Time // when leased last fell to 0
	pending   int       // messages picked by the current receive, not yet delivered
	where     int8      // heap it is in: 0 none, 1 quiet, 2 noisy
	hidx      int       // its position there

	// pt is its processing time (time in flight) in seconds, weighted by age with
	// exponential decay (fairTimeConstant), as of ptAt.
	pt   float64
	ptAt time.Time

	emptiedAt  time.Time // when present last fell to 0
	forgetting bool      // in fairIndex.idle
}

const (
	inNone int8 = iota
	inQuiet
	inNoisy
)

// tenantHeap is an indexed heap of tenants.
type tenantHeap struct {
	items []*tenant
	less  func(a, b *tenant) bool
}

func (h *tenantHeap) Len() int           { return len(h.items) }
func (h *tenantHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *tenantHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].hidx, h.items[j].hidx = i, j
}

func (h *tenantHeap) Push(x any) {
	t := x.(*tenant)
	t.hidx = len(h.items)
	h.items = append(h.items, t)
}

func (h *tenantHeap) Pop() any {
	n := len(h.items) - 1
	t := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	t.hidx = -1
	return t
}

func (h *tenantHeap) peek() *tenant {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// fairIndex is a standard queue's fair-queue state.
type fairIndex struct {
	tenants map[string]*tenant // by MessageGroupId
	loose   *tenant
	// quiet holds the quiet tenants with receivable messages by their oldest one;
	// noisy the noisy tenants with receivable messages by messages in flight (then
	// oldest).
	quiet, noisy tenantHeap
	noisySet     map[*tenant]struct{} // every noisy tenant
	inFlight     map[*tenant]struct{} // the groups with messages in flight
	// The noisy tenants' messages: in the queue, receivable, in flight.
	noisyPresent, noisyReady, noisyLeased int
	// pt is the queue's processing time as tenant.pt is a tenant's, as of ptAt.
	pt       float64
	ptAt     time.Time
	lastPass time.Time
	// idle lists the tenants that emptied, to be forgotten after fairForgetAfter.
	idle     []*tenant
	idleHead int
}

func newTenant(id string, loose bool) *tenant {
	return &tenant{id: id, loose: loose, hidx: -1, readyMsgs: msgHeap{less: byArrival, slot: readySlot}}
}

// byArrival and readySlot order a tenant's receivable messages; shared, so that a
// new tenant allocates no closures.
func byArrival(a, b *message) bool { return a.order < b.order }
func readySlot(m *message) *int    { return &m.readyIdx }

func (f *fairIndex) init() {
	f.tenants = map[string]*tenant{}
	f.loose = newTenant("", true)
	f.noisySet = map[*tenant]struct{}{}
	f.inFlight = map[*tenant]struct{}{}
	f.quiet.less = func(a, b *tenant) bool { return a.readyMsgs.peek().order < b.readyMsgs.peek().order }
	f.noisy.less = func(a, b *tenant) bool {
		if na, nb := a.leased+a.pending, b.leased+b.pending; na != nb {
			return na < nb
		}
		return a.readyMsgs.peek().order < b.readyMsgs.peek().order
	}
}

// decayed brings an exponentially weighted time-in-flight sum v, last brought up to
// date at *at with n messages in flight since, up to now.
func decayed(v float64, at *time.Time, n int, now time.Time) float64 {
	if at.IsZero() {
		*at = now
		return v
	}
	dt := now.Sub(*at).Seconds()
	if dt <= 0 {
		return v // a change dated earlier (a retention expiry) counts from the last update
	}
	*at = now
	tau := fairTimeConstant.Seconds()
	d := math.Exp(-dt / tau)
	return v*d + float64(n)*tau*(1-d)
}

// tenantFor returns the tenant of a new message of group id ("" = none).
func (f *fairIndex) tenantFor(id string) *tenant {
	if id == "" {
		return f.loose
	}
	t := f.tenants[id]
	if t == nil {
		t = newTenant(id, false)
		f.tenants[id] = t
	}
	return t
}

// fairBeforeLocked brings the queue's processing time up to now; call it before
// q.nLeased changes.
func (q *queue) fairBeforeLocked(now time.Time) {
	q.fair.pt = decayed(q.fair.pt, &q.fair.ptAt, q.nLeased, now)
}

// tenantDeltaLocked changes t's counts of messages in the queue, receivable and in
// flight, then re-evaluates it.
func (q *queue) tenantDeltaLocked(t *tenant, dPresent, dReady, dLeased int, now time.Time) {
	if dLeased != 0 {
		t.pt = decayed(t.pt, &t.ptAt, t.leased, now)
	}
	t.present += dPresent
	t.ready += dReady
	t.leased += dLeased
	if t.noisy {
		q.fair.noisyPresent += dPresent
		q.fair.noisyReady += dReady
		q.fair.noisyLeased += dLeased
	}
	if dLeased != 0 && !t.loose {
		if t.leased > 0 {
			q.fair.inFlight[t] = struct{}{}
		} else {
			delete(q.fair.inFlight, t)
			t.idleSince = now
		}
	}
	q.fairCheckLocked(t, now)
}

// fairCheckLocked applies the rules to t after a change and files it where it
// belongs.
func (q *queue) fairCheckLocked(t *tenant, now time.Time) {
	if !t.loose {
		backlog := t.present - t.leased
		switch {
		case t.noisy && backlog == 0:
			q.setNoisyLocked(t, false)
		case !t.noisy && backlog > 0 && q.meetsNoisyRuleLocked(t, now):
			q.setNoisyLocked(t, true)
		}
		if t.present == 0 {
			t.emptiedAt = now
			if !t.forgetting {
				t.forgetting = true
				q.fair.idle = append(q.fair.idle, t)
			}
		}
	}
	q.placeTenant(t)
}

// meetsNoisyRuleLocked reports whether t meets either documented rule now. A tenant
// none of whose messages has been in flight for fairQuietAfter meets neither: that
// is the documented way back to quiet, and its decayed processing time would
// otherwise keep its share while the whole queue is idle.
func (q *queue) meetsNoisyRuleLocked(t *tenant, now time.Time) bool {
	if t.leased >= fairMinInFlight && float64(t.leased) > fairInFlightShare*float64(q.nLeased) {
		return true
	}
	if t.leased == 0 && (t.idleSince.IsZero() || now.Sub(t.idleSince) >= fairQuietAfter) {
		return false
	}
	t.pt = decayed(t.pt, &t.ptAt, t.leased, now)
	q.fairBeforeLocked(now)
	return q.fair.pt > 0 && t.pt > fairTimeShare*q.fair.pt
}

func (q *queue) setNoisyLocked(t *tenant, noisy bool) {
	if t.noisy == noisy {
		return
	}
	sign := 1
	if !noisy {
		sign = -1
	}
	t.noisy = noisy
	q.fair.noisyPresent += sign * t.present
	q.fair.noisyReady += sign * t.ready
	q.fair.noisyLeased += sign * t.leased
	if noisy {
		q.fair.noisySet[t] = struct{}{}
	} else {
		delete(q.fair.noisySet, t)
	}
	q.placeTenant(t)
}

// placeTenant puts t in the heap its state calls for, or restores that heap's order.
func (q *queue) placeTenant(t *tenant) {
	want := inNone
	if t.readyMsgs.Len() > 0 {
		want = inQuiet
		if t.noisy {
			want = inNoisy
		}
	}
	h := func(w int8) *tenantHeap {
		if w == inQuiet {
			return &q.fair.quiet
		}
		return &q.fair.noisy
	}
	switch {
	case t.where == want && want != inNone:
		heap.Fix(h(want), t.hidx)
	case t.where != want:
		if t.where != inNone {
			heap.Remove(h(t.where), t.hidx)
		}
		if want != inNone {
			heap.Push(h(want), t)
		}
		t.where = want
	}
}

// nextTenant is the tenant whose oldest receivable message a receive takes next:
// quiet tenants first, by their oldest message; then the noisy one with the fewest
// in flight.
func (q *queue) nextTenant() *tenant {
	if t := q.fair.quiet.peek(); t != nil {
		return t
	}
	return q.fair.noisy.peek()
}

// fairPassLocked is the periodic detection: shares change as other tenants' messages
// come and go, so the quiet tenants with a backlog are checked against the rules, and
// the noisy ones against the 5-minute rule; emptied tenants are forgotten after
// fairForgetAfter. Only the quiet tenants with messages in flight need the check: a
// tenant is checked whenever its own messages change, and while none of them is in
// flight its share of processing time can only fall (its weighted time decays, the
// queue's decays at most as fast) and it cannot meet the concurrency rule. So the
// pass costs O(tenants in flight + noisy tenants), not O(tenants).
func (q *queue) fairPassLocked(now time.Time) {
	q.fair.lastPass = now
	var flip []*tenant
	for t := range q.fair.inFlight {
		if !t.noisy && t.present > t.leased && q.meetsNoisyRuleLocked(t, now) {
			flip = append(flip, t)
		}
	}
	for t := range q.fair.noisySet {
		if t.leased == 0 && now.Sub(t.idleSince) >= fairQuietAfter {
			flip = append(flip, t)
		}
	}
	for _, t := range flip {
		q.setNoisyLocked(t, !t.noisy)
	}
	f := &q.fair
	for f.idleHead < len(f.idle) {
		t := f.idle[f.idleHead]
		if t.present == 0 && now.Sub(t.emptiedAt) < fairForgetAfter {
			break
		}
		f.idle[f.idleHead] = nil
		f.idleHead++
		t.forgetting = false
		if t.present == 0 && !t.noisy && f.tenants[t.id] == t {
			delete(f.tenants, t.id)
		}
	}
	if f.idleHead > 64 && f.idleHead*2 > len(f.idle) {
		f.idle = append([]*tenant(nil), f.idle[f.idleHead:]...)
		f.idleHead = 0
	}
}

package sqsconsumer

import (
	"container/heap"
	"maps"
	"math"
	"sort"
	"time"
)

// fairReady is the flow's ready messages (received, leased, free to start,
// waiting for a handler slot) and the fair choice of which of them a free
// slot goes to. The flow holds one and calls it under its own mu only: it
// has no lock of its own, and nothing but the flow's methods use it.
//
// On a standard queue (on) whose messages carry a MessageGroupId, each
// group is a tenant, and each message without a group a tenant of its own:
// a free slot goes to a ready message of the tenant with the fewest slots
// held here, ties to the oldest ready message (by arrival here). A
// message without a group always counts 0 held, so such messages start in
// arrival order, as before, and ahead of every group that holds a slot.
// Off (a FIFO queue, whose registry already orders each group, or
// WithFairDispatch(false)) every message is treated as having no group:
// arrival order.
//
// With a limit (WithGroupLimit), a group holding limit slots is not
// eligible: its ready messages stay here (blocked), leased, until one of
// its slots frees. And the heavy groups (those above noisyShare of the
// recent slot time) share a pool of slots that leaves headroom for the
// other tenants while these are active (recap): slots freeing in waves
// (handlers started together by a burst finish together) would otherwise
// leave none free when another tenant's message arrives. While the pool
// is full the heavy groups' ready messages are blocked too.
//
// Cost: a message without a group is a queue push and pop; one with a
// group adds a map lookup and a heap operation over the groups with ready
// messages (O(log groups)) at each of enqueue, start and slot release.
// recap costs a pass over the slot time's 32 counters at most once every
// recapEvery, and a pass over the groups when the heavy ones change.
type fairReady[T grouped] struct {
	on    bool // groups count: a standard queue, WithFairDispatch on
	limit int  // WithGroupLimit: most slots one group holds; 0 for none
	conc  int  // the flow's slots

	// The headroom (recap): the heavy groups together may hold at most
	// poolCap slots; with poolCap 0 there is no pool and heavy is empty.
	// poolHeld is the slots they hold; lightActive is set while the
	// other tenants held more than headroomActive slots on average
	// recently. capAt is when these were last worked out.
	heavy       map[string]bool
	poolCap     int
	poolHeld    int
	lightActive bool
	capAt       time.Time

	seq          uint64        // arrival counter of ready messages
	loose        readyQueue[T] // ready messages without a group (all of them when !on)
	groups       map[string]*fairGroup[T]
	light        groupHeap[T] // groups not heavy with ready messages, below the limit
	heavyQ       groupHeap[T] // heavy groups with ready messages, below the limit
	heavyReady   int          // ready messages of the groups in heavyQ
	n            int          // ready messages in all
	limitBlocked int          // of them, in groups at the limit

	slots groupSlots // the groups' slot time, for Stats and recap
}

// grouped is what fairReady holds: a message that names its group (the
// flow's ticketed messages are).
type grouped interface {
	comparable
	flowGroup() string // its MessageGroupId, "" for none
}

// fairGroup is one group's state: its slots held and its ready messages.
type fairGroup[T grouped] struct {
	key     string
	running int  // slots its messages hold
	heavy   bool // in the heavy pool (fairReady.heavy)
	ready   readyQueue[T]
	idx     int // in its heap (light or heavyQ), -1 when not there
}

// readyEntry is a ready message and its arrival number.
type readyEntry[T grouped] struct {
	v   T
	seq uint64
}

// readyQueue is a first-in, first-out queue of ready messages.
type readyQueue[T grouped] struct {
	items []readyEntry[T]
	head  int
}

func (q *readyQueue[T]) len() int { return len(q.items) - q.head }

func (q *readyQueue[T]) push(e readyEntry[T]) {
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head >= 64 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, e)
}

func (q *readyQueue[T]) front() *readyEntry[T] { return &q.items[q.head] }

func (q *readyQueue[T]) pop() T {
	var none readyEntry[T]
	e := q.items[q.head]
	q.items[q.head] = none
	q.head++
	return e.v
}

// groupHeap orders groups by slots held, then by their oldest ready
// message.
type groupHeap[T grouped] []*fairGroup[T]

func (h groupHeap[T]) Len() int           { return len(h) }
func (h groupHeap[T]) Less(i, j int) bool { return before(h[i], h[j]) }

// before reports whether group a's next ready message goes before b's.
func before[T grouped](a, b *fairGroup[T]) bool {
	if a.running != b.running {
		return a.running < b.running
	}
	return a.ready.front().seq < b.ready.front().seq
}
func (h groupHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *groupHeap[T]) Push(x any) {
	g := x.(*fairGroup[T])
	g.idx = len(*h)
	*h = append(*h, g)
}
func (h *groupHeap[T]) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	g.idx = -1
	return g
}

func newFairReady[T grouped](on bool, limit, conc int) fairReady[T] {
	return fairReady[T]{on: on, limit: limit, conc: conc, groups: map[string]*fairGroup[T]{}}
}

// keyOf is d's tenant key: its group when groups count, "" (a tenant of
// its own) otherwise.
func (f *fairReady[T]) keyOf(d T) string {
	if !f.on {
		return ""
	}
	return d.flowGroup()
}

// atLimit reports whether group g holds as many slots as WithGroupLimit
// lets it.
func (f *fairReady[T]) atLimit(g *fairGroup[T]) bool {
	return f.limit > 0 && g.running >= f.limit
}

// poolFull reports whether the heavy groups hold all the slots their pool
// has.
func (f *fairReady[T]) poolFull() bool { return f.poolCap > 0 && f.poolHeld >= f.poolCap }

// heapOf is the heap g's ready messages wait in.
func (f *fairReady[T]) heapOf(g *fairGroup[T]) *groupHeap[T] {
	if g.heavy {
		return &f.heavyQ
	}
	return &f.light
}

// len is how many messages are ready, blocked ones included.
func (f *fairReady[T]) len() int { return f.n }

// blocked is how many ready messages may not start now: those of groups
// at their limit, and the heavy groups' while their pool is full.
func (f *fairReady[T]) blocked() int {
	if f.poolFull() {
		return f.limitBlocked + f.heavyReady
	}
	return f.limitBlocked
}

// eligible reports whether a ready message could take a free slot now.
func (f *fairReady[T]) eligible() bool {
	return f.loose.len() > 0 || len(f.light) > 0 || len(f.heavyQ) > 0 && !f.poolFull()
}

// mayStart reports whether a message of tenant key may take a slot, as
// far as the limit and the heavy pool go.
func (f *fairReady[T]) mayStart(key string) bool {
	if key == "" || f.limit == 0 && f.poolCap == 0 {
		return true
	}
	g := f.groups[key]
	if g == nil {
		return !f.heavy[key] || !f.poolFull()
	}
	return !f.atLimit(g) && (!g.heavy || !f.poolFull())
}

// push makes d ready.
func (f *fairReady[T]) push(d T) {
	f.seq++
	f.n++
	e := readyEntry[T]{v: d, seq: f.seq}
	key := f.keyOf(d)
	if key == "" {
		f.loose.push(e)
		return
	}
	g := f.group(key)
	g.ready.push(e)
	if f.atLimit(g) {
		f.limitBlocked++
		return
	}
	if g.heavy {
		f.heavyReady++
	}
	if g.idx < 0 {
		heap.Push(f.heapOf(g), g)
	}
}

// group returns key's state, made if new.
func (f *fairReady[T]) group(key string) *fairGroup[T] {
	g := f.groups[key]
	if g == nil {
		g = &fairGroup[T]{key: key, idx: -1, heavy: f.heavy[key]}
		f.groups[key] = g
	}
	return g
}

// pop takes the ready message the next free slot goes to; call it only
// when eligible. The caller seats it (seated).
func (f *fairReady[T]) pop() T {
	f.n--
	var h *groupHeap[T]
	if len(f.light) > 0 {
		h = &f.light
	}
	if len(f.heavyQ) > 0 && !f.poolFull() && (h == nil || before(f.heavyQ[0], f.light[0])) {
		h = &f.heavyQ
	}
	if f.loose.len() > 0 && (h == nil || (*h)[0].running > 0 || f.loose.front().seq < (*h)[0].ready.front().seq) {
		return f.loose.pop()
	}
	g := (*h)[0]
	v := g.ready.pop()
	if g.heavy {
		f.heavyReady--
	}
	if g.ready.len() == 0 {
		heap.Remove(h, 0)
	} else {
		heap.Fix(h, 0)
	}
	return v
}

// seated counts a slot more for group key ("" for none).
func (f *fairReady[T]) seated(key string) {
	if key == "" || !f.on {
		return
	}
	g := f.group(key)
	g.running++
	if g.heavy {
		f.poolHeld++
	}
	if g.idx >= 0 {
		if f.atLimit(g) {
			heap.Remove(f.heapOf(g), g.idx)
			f.limitBlocked += g.ready.len()
			if g.heavy {
				f.heavyReady -= g.ready.len()
			}
		} else {
			heap.Fix(f.heapOf(g), g.idx)
		}
	}
}

// released counts a slot less for group key ("" for none), held for
// held until now.
func (f *fairReady[T]) released(key string, held time.Duration, now time.Time) {
	f.slots.add(key, held, now)
	if !f.on {
		return
	}
	if now.Sub(f.capAt) >= recapEvery {
		f.recap(now)
	}
	if key == "" {
		return
	}
	g := f.groups[key]
	if g == nil {
		return
	}
	wasAt := f.atLimit(g)
	g.running--
	if g.heavy {
		f.poolHeld--
	}
	switch {
	case g.ready.len() == 0:
		if g.running <= 0 {
			delete(f.groups, key)
		}
	case wasAt && !f.atLimit(g):
		f.limitBlocked -= g.ready.len()
		if g.heavy {
			f.heavyReady += g.ready.len()
		}
		heap.Push(f.heapOf(g), g)
	case g.idx >= 0:
		heap.Fix(f.heapOf(g), g.idx)
	}
}

// takeAll returns every ready message, blocked ones included, oldest
// first; none is ready afterwards. Groups keep their slots held.
func (f *fairReady[T]) takeAll() []T {
	if f.n == 0 {
		return nil
	}
	all := make([]readyEntry[T], 0, f.n)
	all = append(all, f.loose.items[f.loose.head:]...)
	f.loose = readyQueue[T]{}
	for key, g := range f.groups {
		all = append(all, g.ready.items[g.ready.head:]...)
		g.ready = readyQueue[T]{}
		g.idx = -1
		if g.running <= 0 {
			delete(f.groups, key)
		}
	}
	f.light, f.heavyQ = f.light[:0], f.heavyQ[:0]
	f.n, f.limitBlocked, f.heavyReady = 0, 0, 0
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	out := make([]T, len(all))
	for i, e := range all {
		out[i] = e.v
	}
	return out
}

// Headroom: the heavy groups are those holding more than noisyShare (a
// tenth) of the recent slot time (the slot time figures, over about a
// minute): the groups Stats counts in NoisyGroups. While the other tenants
// (every group not heavy, and the messages without a group) held more
// than headroomActive slots on average, the heavy groups together may
// hold at most conc less a reserve of 1 + twice those slots, rounded up,
// and never less than half the slots. However many heavy groups there
// are, the reserve stays free for the others; a Consumer fed by heavy
// groups alone keeps every slot for them.
const (
	recapEvery     = 100 * time.Millisecond
	headroomActive = 0.05
)

// recap works out the heavy groups and their pool anew, at most once
// every recapEvery, and re-sorts the groups if the heavy ones changed.
func (f *fairReady[T]) recap(now time.Time) {
	f.capAt = now
	heavy, light, ok := f.slots.heavyAndLight(now)
	f.lightActive = ok && light > headroomActive
	capN := 0
	if f.lightActive && len(heavy) > 0 {
		if reserve := min(f.conc/2, int(math.Ceil(2*light))+1); reserve > 0 {
			capN = f.conc - reserve
		}
	}
	if capN == 0 {
		heavy = nil // no pool: the heavy groups are ordinary
	}
	f.poolCap = capN
	if maps.Equal(heavy, f.heavy) {
		return
	}
	f.heavy = heavy
	f.light, f.heavyQ = f.light[:0], f.heavyQ[:0]
	f.poolHeld, f.heavyReady, f.limitBlocked = 0, 0, 0
	for _, g := range f.groups {
		g.heavy, g.idx = heavy[g.key], -1
		if g.heavy {
			f.poolHeld += g.running
		}
		switch {
		case g.ready.len() == 0:
		case f.atLimit(g):
			f.limitBlocked += g.ready.len()
		default:
			h := f.heapOf(g)
			g.idx = len(*h)
			*h = append(*h, g)
			if g.heavy {
				f.heavyReady += g.ready.len()
			}
		}
	}
	heap.Init(&f.light)
	heap.Init(&f.heavyQ)
}

// fairGap is the longest a receive waits after the last one was sent
// while slots are free that only other tenants may take and those
// tenants are active (probeGap): a quiet tenant's message then waits in
// SQS at most this long (or a round trip, if longer) before a receive
// brings it.
const fairGap = 20 * time.Millisecond

// probeGap is the least time between probes (probeSize): fairGap while
// the tenants other than the capped ones are active, else the mean slot
// hold time (at least a round trip, at most a second), so that a group
// capped by WithGroupLimit alone does not draw receives faster than its
// own pace.
func (f *fairReady[T]) probeGap(hold, rtt time.Duration) time.Duration {
	if f.lightActive {
		return fairGap
	}
	return min(max(hold, rtt), time.Second)
}

// probeSize is the size of the receive due when blocked messages (of
// groups at their limit, or of heavy groups whose pool is full) stand in
// for the read-ahead and slots are free that only other tenants may take
// (free, with no ready message eligible): one receive at a time (none in
// flight: asked 0), at most one every gap after the last one was sent, so
// that the other tenants' messages keep coming (SQS hands a fair queue's
// quiet tenants out first). It asks for what the read-ahead lacks (want),
// at least 1 and at most a full receive, within the read-ahead bound
// (room): the capped groups' backlog then comes no faster than it runs,
// and beyond that one message a probe. When only time stands in the way
// it returns 0 and when to look again (at). It is pure, for table tests.
func probeSize(free bool, asked, room, want, size int, gap time.Duration, sentAt, now time.Time) (n int, at time.Time) {
	if !free || asked > 0 || room <= 0 {
		return 0, time.Time{}
	}
	if at := sentAt.Add(gap); now.Before(at) {
		return 0, at
	}
	return min(size, room, max(want, 1)), time.Time{}
}

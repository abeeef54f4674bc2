package sqsconsumer

import (
	"container/heap"
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
// its slots frees. And the tenant holding the most slot time leaves
// headroom for the others while they are active (recap): slots freeing
// in waves (handlers started together by a burst finish together) would
// otherwise leave none free when another tenant's message arrives.
//
// Cost: a message without a group is a queue push and pop; one with a
// group adds a map lookup and a heap operation over the groups with ready
// messages (O(log groups)) at each of enqueue, start and slot release.
type fairReady[T grouped] struct {
	on    bool // groups count: a standard queue, WithFairDispatch on
	limit int  // WithGroupLimit: most slots one group holds; 0 for none
	conc  int  // the flow's slots

	// The headroom cap (recap): group capKey may hold at most capN
	// slots; capN 0 for none. capAt is when it was last worked out.
	capKey string
	capN   int
	capAt  time.Time

	seq     uint64        // arrival counter of ready messages
	loose   readyQueue[T] // ready messages without a group (all of them when !on)
	groups  map[string]*fairGroup[T]
	heap    groupHeap[T] // groups with ready messages and below the limit
	n       int          // ready messages in all
	blocked int          // of them, in groups at the limit

	slots groupSlots // the groups' slot time, for Stats
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
	running int // slots its messages hold
	ready   readyQueue[T]
	idx     int // in the heap, -1 when not there
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

func (h groupHeap[T]) Len() int { return len(h) }
func (h groupHeap[T]) Less(i, j int) bool {
	if h[i].running != h[j].running {
		return h[i].running < h[j].running
	}
	return h[i].ready.front().seq < h[j].ready.front().seq
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

// atLimit reports whether group g holds as many slots as it may.
func (f *fairReady[T]) atLimit(g *fairGroup[T]) bool {
	return f.limit > 0 && g.running >= f.limit || f.capN > 0 && g.running >= f.capN && g.key == f.capKey
}

// len is how many messages are ready, blocked ones included.
func (f *fairReady[T]) len() int { return f.n }

// eligible reports whether a ready message could take a free slot now.
func (f *fairReady[T]) eligible() bool { return f.loose.len() > 0 || len(f.heap) > 0 }

// mayStart reports whether a message of tenant key may take a slot, as
// far as the limit goes.
func (f *fairReady[T]) mayStart(key string) bool {
	if key == "" || f.limit == 0 && f.capN == 0 {
		return true
	}
	g := f.groups[key]
	return g == nil || !f.atLimit(g)
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
	switch {
	case f.atLimit(g):
		f.blocked++
	case g.idx < 0:
		heap.Push(&f.heap, g)
	}
}

// group returns key's state, made if new.
func (f *fairReady[T]) group(key string) *fairGroup[T] {
	g := f.groups[key]
	if g == nil {
		g = &fairGroup[T]{key: key, idx: -1}
		f.groups[key] = g
	}
	return g
}

// pop takes the ready message the next free slot goes to; call it only
// when eligible. The caller seats it (seated).
func (f *fairReady[T]) pop() T {
	f.n--
	if f.loose.len() > 0 && (len(f.heap) == 0 || f.heap[0].running > 0 || f.loose.front().seq < f.heap[0].ready.front().seq) {
		return f.loose.pop()
	}
	g := f.heap[0]
	v := g.ready.pop()
	if g.ready.len() == 0 {
		heap.Remove(&f.heap, 0)
	} else {
		heap.Fix(&f.heap, 0)
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
	if g.idx >= 0 {
		if f.atLimit(g) {
			heap.Remove(&f.heap, g.idx)
			f.blocked += g.ready.len()
		} else {
			heap.Fix(&f.heap, g.idx)
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
	switch {
	case g.ready.len() == 0:
		if g.running <= 0 {
			delete(f.groups, key)
		}
	case wasAt && !f.atLimit(g):
		f.blocked -= g.ready.len()
		heap.Push(&f.heap, g)
	case g.idx >= 0:
		heap.Fix(&f.heap, g.idx)
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
	f.heap = f.heap[:0]
	f.n, f.blocked = 0, 0
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	out := make([]T, len(all))
	for i, e := range all {
		out[i] = e.v
	}
	return out
}

// Headroom: while tenants other than the one holding the most slot time
// held more than headroomActive slots on average recently (the slot time
// figures, over about a minute), that one may hold at most conc less
// 1 + twice their mean slots held, rounded up, and never less than half
// the slots. A Consumer fed by one tenant alone keeps every slot for it.
const (
	recapEvery     = time.Second
	headroomActive = 0.05
)

// recap works out the headroom cap anew, at most once every recapEvery,
// and re-sorts the groups if it changed.
func (f *fairReady[T]) recap(now time.Time) {
	f.capAt = now
	key, n := "", 0
	if top, others, ok := f.slots.topAndOthers(now); ok && others > headroomActive {
		reserve := min(f.conc/2, int(math.Ceil(2*others))+1)
		if reserve > 0 {
			key, n = top, f.conc-reserve
		}
	}
	if key == f.capKey && n == f.capN {
		return
	}
	f.capKey, f.capN = key, n
	f.heap = f.heap[:0]
	f.blocked = 0
	for _, g := range f.groups {
		g.idx = -1
		switch {
		case g.ready.len() == 0:
		case f.atLimit(g):
			f.blocked += g.ready.len()
		default:
			heap.Push(&f.heap, g)
		}
	}
}

// probeSize is the size of the receive due when messages of groups at
// their limit fill the read-ahead and slots are free that only other
// tenants may take (free, with no ready message eligible): one receive at
// a time (none in flight: asked 0), at most one every mean slot hold
// time (at least a round trip, at most a second) after the last one was
// sent, so that the other tenants' messages keep coming (SQS hands a fair
// queue's quiet tenants out first) while the capped group's backlog
// fills the read-ahead bound (room) at most at that pace. When only time
// stands in the way it returns 0 and when to look again (at). It is pure,
// for table tests.
func probeSize(free bool, asked, room, size int, hold, rtt time.Duration, sentAt, now time.Time) (n int, at time.Time) {
	if !free || asked > 0 || room <= 0 {
		return 0, time.Time{}
	}
	if at := sentAt.Add(min(max(hold, rtt), time.Second)); now.Before(at) {
		return 0, at
	}
	return min(size, room), time.Time{}
}

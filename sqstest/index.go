package sqstest

import (
	"container/heap"
	"time"
)

// This file keeps the per-queue indexes that make every action O(log n) in the number
// of messages (amortised), instead of a walk over the whole queue:
//
//   - retention: every message still in the queue, by enqueue time, so expiry pops
//     only the messages that expire;
//   - timers: the messages that are not receivable now (in flight or delayed), by the
//     time they become receivable, so lease ends and delays are noticed by popping,
//     and a long poll knows when to look again;
//   - standard queues (fair queues, fair.go): per tenant (message group; the
//     messages without a group together) its receivable messages by arrival, and the
//     tenants with receivable messages in two heaps, quiet ones by their oldest
//     message and noisy ones by messages in flight, so a receive pops the quiet
//     tenants' oldest messages first;
//   - FIFO queues: per message group the list of its messages in arrival order and
//     the number in flight, and readyGroups, the groups that can deliver now (none in
//     flight, first message receivable), by the arrival of their first message;
//   - dedupOrder: FIFO deduplication ids in the order they were recorded, so expired
//     ones are forgotten without a walk over the map.
//
// A message's ready and leased flags and its place in these indexes describe it as
// of the queue's last advanceLocked; every path that looks at them advances first.
// Time-based predicates (message.inFlight, handleRef.state) still read the times
// themselves and need no index.

// msgHeap is an indexed binary heap of messages: each message remembers its position
// (through slot), so it can be removed or re-keyed in O(log n).
type msgHeap struct {
	items []*message
	less  func(a, b *message) bool
	slot  func(m *message) *int
}

func (h *msgHeap) Len() int           { return len(h.items) }
func (h *msgHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *msgHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.slot(h.items[i]) = i
	*h.slot(h.items[j]) = j
}

func (h *msgHeap) Push(x any) {
	m := x.(*message)
	*h.slot(m) = len(h.items)
	h.items = append(h.items, m)
}

func (h *msgHeap) Pop() any {
	n := len(h.items) - 1
	m := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	*h.slot(m) = -1
	return m
}

func (h *msgHeap) add(m *message) { heap.Push(h, m) }

// remove takes m out of the heap if it is in it.
func (h *msgHeap) remove(m *message) {
	if i := *h.slot(m); i >= 0 {
		heap.Remove(h, i)
	}
}

// addOrFix inserts m, or restores the order after its key changed.
func (h *msgHeap) addOrFix(m *message) {
	if i := *h.slot(m); i >= 0 {
		heap.Fix(h, i)
	} else {
		heap.Push(h, m)
	}
}

func (h *msgHeap) peek() *message {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *msgHeap) pop() *message {
	if len(h.items) == 0 {
		return nil
	}
	return heap.Pop(h).(*message)
}

// fifoGroup is one message group of a FIFO queue.
type fifoGroup struct {
	id         string
	head, tail *message // the group's messages still in the queue, in arrival order
	inflight   int      // how many of them are leased
	idx        int      // position in queue.readyGroups, -1 when not there
}

// groupHeap orders the groups that can deliver by the arrival of their first message.
type groupHeap []*fifoGroup

func (h groupHeap) Len() int           { return len(h) }
func (h groupHeap) Less(i, j int) bool { return h[i].head.order < h[j].head.order }
func (h groupHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *groupHeap) Push(x any) {
	g := x.(*fifoGroup)
	g.idx = len(*h)
	*h = append(*h, g)
}

func (h *groupHeap) Pop() any {
	old := *h
	n := len(old) - 1
	g := old[n]
	old[n] = nil
	*h = old[:n]
	g.idx = -1
	return g
}

// queueIndex is the part of a queue that the indexes above need.
type queueIndex struct {
	nextOrder   uint64
	retention   msgHeap
	timers      msgHeap
	fair        fairIndex // standard queues only
	groups      map[string]*fifoGroup
	readyGroups groupHeap
	// collecting suppresses group re-evaluation while a receive picks messages, so a
	// group is visited once per receive; collectLocked re-evaluates afterwards.
	collecting bool
	nReady     int // messages with ready set
	nLeased    int // messages with leased set
	dedupOrder []dedupRecord
	dedupHead  int

	// History (WithHistoryLimit only): the messages that left the queue, in the
	// order they left, from departedHead on.
	departed     []*message
	departedHead int
	evicted      int // evicted messages still in queue.msgs, removed by compaction
}

type dedupRecord struct {
	key string
	at  time.Time
}

func (x *queueIndex) init() {
	x.retention = msgHeap{
		less: func(a, b *message) bool {
			if !a.enqueuedAt.Equal(b.enqueuedAt) {
				return a.enqueuedAt.Before(b.enqueuedAt)
			}
			return a.order < b.order
		},
		slot: func(m *message) *int { return &m.retIdx },
	}
	x.timers = msgHeap{
		less: func(a, b *message) bool {
			if !a.wakeAt.Equal(b.wakeAt) {
				return a.wakeAt.Before(b.wakeAt)
			}
			return a.order < b.order
		},
		slot: func(m *message) *int { return &m.timerIdx },
	}
	x.fair.init()
	x.groups = map[string]*fifoGroup{}
}

// present is the number of messages still in the queue.
func (x *queueIndex) present() int { return x.retention.Len() }

// enqueueLocked adds a new message (sent, or moved in from a redrive) to q.
func (s *Server) enqueueLocked(q *queue, m *message, now time.Time) {
	m.q = q
	m.order = q.nextOrder
	q.nextOrder++
	m.readyIdx, m.timerIdx, m.retIdx = -1, -1, -1
	q.msgs = append(q.msgs, m)
	q.byID[m.id] = m
	q.retention.add(m)
	if q.fifo {
		g := q.groups[m.groupID]
		if g == nil {
			g = &fifoGroup{id: m.groupID, idx: -1}
			q.groups[m.groupID] = g
		}
		m.group = g
		m.gprev = g.tail
		if g.tail != nil {
			g.tail.gnext = m
		} else {
			g.head = m
		}
		g.tail = m
	} else {
		t := q.fair.tenantFor(m.groupID)
		m.tenant = t
		m.gprev = t.tail
		if t.tail != nil {
			t.tail.gnext = m
		} else {
			t.head = m
		}
		t.tail = m
		q.tenantDeltaLocked(t, 1, 0, 0, now)
	}
	s.reindexLocked(q, m, now)
}

// reindexLocked files m (still in q) under its state at now: receivable (ready) or
// waiting in timers until max(availableAt, visibleAt); leased or not. Call it after
// any change to m's times.
func (s *Server) reindexLocked(q *queue, m *message, now time.Time) {
	leased := len(m.receives) > 0 && now.Before(m.visibleAt)
	ready := !now.Before(m.availableAt) && !now.Before(m.visibleAt)
	if !q.fifo {
		q.fairBeforeLocked(now)
	}
	if ready {
		q.timers.remove(m)
		if !q.fifo && m.readyIdx < 0 {
			m.tenant.readyMsgs.add(m)
		}
	} else {
		m.wakeAt = m.availableAt
		if m.visibleAt.After(m.wakeAt) {
			m.wakeAt = m.visibleAt
		}
		q.timers.addOrFix(m)
		if !q.fifo {
			m.tenant.readyMsgs.remove(m)
		}
	}
	dReady, dLeased := b2i(ready)-b2i(m.ready), b2i(leased)-b2i(m.leased)
	q.nReady += dReady
	q.nLeased += dLeased
	m.ready, m.leased = ready, leased
	if q.fifo {
		m.group.inflight += dLeased
		q.fixGroup(m.group)
	} else {
		q.tenantDeltaLocked(m.tenant, 0, dReady, dLeased, now)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fixGroup puts g in readyGroups if it can deliver now, and takes it out if not.
func (q *queue) fixGroup(g *fifoGroup) {
	if q.collecting {
		return
	}
	eligible := g.inflight == 0 && g.head != nil && g.head.ready
	switch {
	case eligible && g.idx < 0:
		heap.Push(&q.readyGroups, g)
	case eligible:
		heap.Fix(&q.readyGroups, g.idx)
	case g.idx >= 0:
		heap.Remove(&q.readyGroups, g.idx)
	}
	if g.head == nil && g.inflight == 0 && g.idx < 0 && q.groups[g.id] == g {
		delete(q.groups, g.id)
	}
}

// goneLocked records that m left q (deleted, moved, expired, purged, queue deleted)
// and takes it out of the indexes. m stays in the history (Messages, Message, its
// receipt handles) until WithHistoryLimit evicts it.
func (s *Server) goneLocked(q *queue, m *message, why goneReason, at time.Time) {
	if m.gone != present {
		return
	}
	m.gone, m.goneAt = why, at
	q.retention.remove(m)
	q.timers.remove(m)
	if !q.fifo {
		q.fairBeforeLocked(at)
	}
	q.nReady -= b2i(m.ready)
	q.nLeased -= b2i(m.leased)
	if g := m.group; g != nil {
		g.inflight -= b2i(m.leased)
		if m.gprev != nil {
			m.gprev.gnext = m.gnext
		} else {
			g.head = m.gnext
		}
		if m.gnext != nil {
			m.gnext.gprev = m.gprev
		} else {
			g.tail = m.gprev
		}
		m.gprev, m.gnext, m.group = nil, nil, nil
		q.fixGroup(g)
	}
	if t := m.tenant; t != nil {
		t.readyMsgs.remove(m)
		if m.gprev != nil {
			m.gprev.gnext = m.gnext
		} else {
			t.head = m.gnext
		}
		if m.gnext != nil {
			m.gnext.gprev = m.gprev
		} else {
			t.tail = m.gprev
		}
		m.gprev, m.gnext, m.tenant = nil, nil, nil
		dReady, dLeased := -b2i(m.ready), -b2i(m.leased)
		m.ready, m.leased = false, false
		q.tenantDeltaLocked(t, -1, dReady, dLeased, at)
	}
	m.ready, m.leased = false, false
	s.rememberGoneLocked(q, m)
}

// advanceLocked brings q's indexes up to now: messages past retention expire, leases
// and delays that ended make their messages receivable, expired deduplication ids are
// forgotten. Every action and helper that reads q's messages calls it first.
func (s *Server) advanceLocked(q *queue, now time.Time) {
	retention := time.Duration(q.intAttr("MessageRetentionPeriod")) * time.Second
	for m := q.retention.peek(); m != nil; m = q.retention.peek() {
		end := m.enqueuedAt.Add(retention)
		if now.Before(end) {
			break
		}
		s.goneLocked(q, m, goneExpired, end)
	}
	for m := q.timers.peek(); m != nil && !now.Before(m.wakeAt); m = q.timers.peek() {
		s.reindexLocked(q, m, now) // takes it out of timers
	}
	for q.dedupHead < len(q.dedupOrder) {
		d := q.dedupOrder[q.dedupHead]
		if now.Sub(d.at) < dedupWindow {
			break
		}
		if e, ok := q.dedup[d.key]; ok && e.at.Equal(d.at) {
			delete(q.dedup, d.key)
		}
		q.dedupOrder[q.dedupHead] = dedupRecord{}
		q.dedupHead++
	}
	if q.dedupHead > 64 && q.dedupHead*2 > len(q.dedupOrder) {
		q.dedupOrder = append([]dedupRecord(nil), q.dedupOrder[q.dedupHead:]...)
		q.dedupHead = 0
	}
	if !q.fifo && now.Sub(q.fair.lastPass) >= fairPassInterval {
		q.fairPassLocked(now)
	}
}

// recordDedupLocked remembers a FIFO deduplication id sent at now.
func (q *queue) recordDedupLocked(key string, m *message, now time.Time) {
	q.dedup[key] = dedupEntry{at: now, msg: m}
	q.dedupOrder = append(q.dedupOrder, dedupRecord{key: key, at: now})
}

// clearDedupLocked forgets every deduplication id (PurgeQueue on a FIFO queue).
func (q *queue) clearDedupLocked() {
	clear(q.dedup)
	q.dedupOrder, q.dedupHead = nil, 0
}

// nextEventLocked is the earliest future time a message of q becomes receivable
// (lease end or delay end), or zero. q must have been advanced to now.
func nextEventLocked(q *queue, now time.Time) time.Time {
	if m := q.timers.peek(); m != nil && m.wakeAt.After(now) {
		return m.wakeAt
	}
	return time.Time{}
}

// removeAllLocked makes every message still in q leave it for the reason why.
func (s *Server) removeAllLocked(q *queue, why goneReason, now time.Time) {
	all := append([]*message(nil), q.retention.items...)
	for _, m := range all {
		s.goneLocked(q, m, why, now)
	}
}

// rememberGoneLocked keeps m in the history and, with a history limit, evicts the
// oldest gone messages beyond it: they disappear from Messages and Message and their
// receipt handles are forgotten (answered as never issued).
func (s *Server) rememberGoneLocked(q *queue, m *message) {
	limit := s.cfg.historyLimit
	if limit <= 0 {
		return
	}
	q.departed = append(q.departed, m)
	for len(q.departed)-q.departedHead > limit {
		old := q.departed[q.departedHead]
		q.departed[q.departedHead] = nil
		q.departedHead++
		s.forgetLocked(q, old)
		q.evicted++
	}
	if q.departedHead > 64 && q.departedHead*2 > len(q.departed) {
		q.departed = append([]*message(nil), q.departed[q.departedHead:]...)
		q.departedHead = 0
	}
	if q.evicted > 64 && q.evicted*2 > len(q.msgs) {
		kept := q.msgs[:0]
		for _, m := range q.msgs {
			if !m.evicted {
				kept = append(kept, m)
			}
		}
		clear(q.msgs[len(kept):])
		q.msgs = kept
		q.evicted = 0
	}
}

// forgetLocked drops m from the history and its receipt handles from the server.
func (s *Server) forgetLocked(q *queue, m *message) {
	m.evicted = true
	for _, r := range m.receives {
		if ref := s.handles[r.ReceiptHandle]; ref != nil && ref.m == m {
			delete(s.handles, r.ReceiptHandle)
		}
	}
	if q.byID[m.id] == m {
		delete(q.byID, m.id)
	}
}

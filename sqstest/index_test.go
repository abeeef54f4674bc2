package sqstest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// TestIndexModel drives standard and FIFO queues (each with a dead-letter queue)
// through random sends, delays, receives (visibility 0 included), deletes with fresh
// and stale handles, visibility changes, Expire, retention expiry, purges and virtual
// time, and after every step checks the indexes of index.go against the messages
// themselves. Before every receive it computes, with the straightforward walk over
// the queue that the server used before it had indexes, which messages the receive
// must return and which it must move to the DLQ, and compares. "grouped" is a
// standard queue whose messages mostly carry one of four groups (one of them sent
// most): a fair queue, whose receives the walk orders by the tenants' noisy flags
// (fair_test.go tests how they are set).
func TestIndexModel(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"standard", "fifo", "grouped"} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s/seed=%d", kind, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { runIndexModel(t, kind == "fifo", kind == "grouped", seed) })
			})
		}
	}
}

func runIndexModel(t *testing.T, fifo, grouped bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	s := NewServer(WithHistoryLimit(int(rng.IntN(3)) * 20)) // 0 = unlimited, 20, 40
	defer s.Close()
	suffix := ""
	if fifo {
		suffix = ".fifo"
	}
	dlqURL, err := s.CreateQueue("dlq"+suffix, nil)
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:dlq` + suffix + `","maxReceiveCount":3}`,
	}
	if !fifo {
		attrs["DelaySeconds"] = "1"
	}
	url, err := s.CreateQueue("q"+suffix, attrs)
	if err != nil {
		t.Fatal(err)
	}
	md := &model{s: s, rng: rng, suffix: suffix, grouped: grouped, dedup: map[string]time.Time{}}
	for step := range 1500 {
		func() {
			s.mu.Lock()
			defer s.mu.Unlock() // also when a check fails: Close takes the lock
			md.step(t, step)
		}()
		switch r := rng.IntN(10); {
		case r < 5:
		case r < 9:
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		default:
			time.Sleep(time.Duration(rng.IntN(40)) * time.Second)
		}
	}
	if len(s.Messages(url)) == 0 || s.Messages(dlqURL) == nil {
		t.Fatal("nothing happened")
	}
	if grouped && md.noisy == 0 {
		t.Fatal("no group was ever noisy")
	}
	t.Logf("%d of 1500 steps ended with a noisy group", md.noisy)
}

// model is the state of one TestIndexModel run.
type model struct {
	s       *Server
	rng     *rand.Rand
	suffix  string
	grouped bool     // standard queue, messages with groups
	noisy   int      // grouped: steps that ended with a noisy group
	handles []string // every handle issued, in order
	sent    int
	dedup   map[string]time.Time // FIFO: deduplication id -> when it was recorded
}

// step runs one random operation and checks the indexes. s.mu is held.
func (md *model) step(t *testing.T, step int) {
	s, rng := md.s, md.rng
	q, dlq := s.queues["q"+md.suffix], s.queues["dlq"+md.suffix]
	fifo := q.fifo
	now := time.Now()
	switch op := rng.IntN(100); {
	case op < 25: // send
		in := sendInput{MessageBody: ptr("m" + strconv.Itoa(md.sent))}
		if fifo {
			in.MessageGroupID = ptr("g" + strconv.Itoa(rng.IntN(4)))
			id := strconv.Itoa(md.sent)
			if rng.IntN(4) == 0 { // resend a recent one: deduplicated within 5 minutes
				id = strconv.Itoa(max(0, md.sent-1-rng.IntN(20)))
			}
			in.MessageDeduplicationID = &id
			if at, ok := md.dedup[id]; !ok || now.Sub(at) >= dedupWindow {
				md.dedup[id] = now
			}
		} else {
			if rng.IntN(2) == 0 {
				d := time.Duration(rng.IntN(3)) * time.Second
				in.delay = &d
			}
			if g := rng.IntN(10); md.grouped && g < 8 {
				in.MessageGroupID = ptr("g" + strconv.Itoa(max(0, g-4))) // g0 half the time
			}
		}
		md.sent++
		s.advanceLocked(q, now)
		if _, err := s.sendLocked(q, in, false, now); err != nil {
			t.Fatal(err)
		}
	case op < 50: // receive, from the queue or the DLQ
		target := q
		if rng.IntN(4) == 0 {
			target = dlq
		}
		max := 1 + rng.IntN(10)
		vt := time.Duration(rng.IntN(4)) * time.Second
		s.advanceLocked(target, now)
		wantPicked, wantMoved := naiveCollect(s, target, max, now)
		got := s.collectLocked(target, max, vt, now)
		if gotIDs := ids(got); !slices.Equal(gotIDs, wantPicked) {
			t.Fatalf("step %d: receive(max %d) from %s returned %v, want %v", step, max, target.name, gotIDs, wantPicked)
		}
		for _, m := range wantMoved {
			if m.gone != goneMoved {
				t.Fatalf("step %d: %s not moved to the DLQ", step, m.id)
			}
		}
		for _, m := range got {
			md.handles = append(md.handles, m.receives[len(m.receives)-1].ReceiptHandle)
		}
	case op < 65 && len(md.handles) > 0: // delete, often with the latest handle
		h := pickHandle(rng, md.handles)
		ref := s.handles[h]
		if ref == nil {
			break // forgotten by the history limit
		}
		_ = s.deleteLocked(ref.q, h, false, now)
	case op < 78 && len(md.handles) > 0: // visibility change
		h := pickHandle(rng, md.handles)
		if ref := s.handles[h]; ref != nil {
			s.advanceLocked(ref.q, now)
			_ = s.changeVisibilityLocked(ref.q, h, int64(rng.IntN(4)), false, now)
		}
	case op < 82 && len(md.handles) > 0: // Expire
		if ref := s.handles[pickHandle(rng, md.handles)]; ref != nil && ref.m.inFlight(now) {
			ref.m.visibleAt = now
			s.reindexLocked(ref.q, ref.m, now)
		}
	case op < 83: // purge (at most once a minute)
		if s.purgeLocked(q, now) == nil {
			clear(md.dedup)
		}
	case op < 86: // change the queue's delay (FIFO: later messages of a group can be receivable before earlier ones)
		v := strconv.Itoa(rng.IntN(3))
		if err := s.setQueueAttributesLocked(q, map[string]string{"DelaySeconds": v}, now); err != nil {
			t.Fatal(err)
		}
	case op < 87: // shorten retention to the minimum, or restore the default
		v := "60"
		if q.attrs["MessageRetentionPeriod"] == "60" {
			v = strconv.Itoa(defaultRetention)
		}
		if err := s.setQueueAttributesLocked(q, map[string]string{"MessageRetentionPeriod": v}, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []*queue{q, dlq} {
		s.advanceLocked(x, now)
		checkIndex(t, step, s, x, now)
	}
	if len(q.fair.noisySet) > 0 {
		md.noisy++
	}
	if fifo && !q.purgedAt.Equal(now) {
		for id, at := range md.dedup {
			_, kept := q.dedup[id]
			if want := now.Sub(at) < dedupWindow; kept != want {
				t.Fatalf("step %d: deduplication id %s recorded at %v: kept=%v, want %v", step, id, at, kept, want)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func pickHandle(rng *rand.Rand, handles []string) string {
	if rng.IntN(3) > 0 {
		return handles[len(handles)-1-rng.IntN(min(len(handles), 5))]
	}
	return handles[rng.IntN(len(handles))]
}

func ids(ms []*message) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.id)
	}
	return out
}

// presentInOrder lists q's messages still in the queue, in arrival order.
func presentInOrder(q *queue) []*message {
	var out []*message
	for _, m := range q.msgs {
		if m.gone == present {
			out = append(out, m)
		}
	}
	return out
}

// naiveCollect is the receive selection as the server made it before it had indexes:
// one walk over the queue's messages in arrival order.
func naiveCollect(s *Server, q *queue, max int, now time.Time) (picked []string, moved []*message) {
	picked = []string{}
	redrives := func(m *message) bool {
		if q.redrive == nil || m.receiveCount < q.redrive.MaxReceiveCount {
			return false
		}
		dlq := s.queueByARNLocked(q.redrive.TargetARN)
		return dlq != nil && dlq != q
	}
	take := func(m *message) {
		if redrives(m) {
			moved = append(moved, m)
		} else {
			picked = append(picked, m.id)
		}
	}
	live := presentInOrder(q)
	if !q.fifo {
		// Quiet tenants' messages first, in arrival order; then the noisy tenants',
		// the one with the fewest in flight (counting this receive's picks) first.
		noisy := func(m *message) bool { t := q.fair.tenants[m.groupID]; return m.groupID != "" && t != nil && t.noisy }
		inflight := map[string]int{}
		var rest []*message
		for _, m := range live {
			inflight[m.groupID] += b2i(m.inFlight(now))
			if m.available(now) && noisy(m) {
				rest = append(rest, m)
			}
		}
		for _, m := range live {
			if len(picked) < max && m.available(now) && !noisy(m) {
				take(m)
			}
		}
		for len(picked) < max && len(rest) > 0 {
			best := 0
			for i, m := range rest {
				if inflight[m.groupID] < inflight[rest[best].groupID] {
					best = i
				}
			}
			m := rest[best]
			rest = slices.Delete(rest, best, best+1)
			if !redrives(m) {
				inflight[m.groupID]++
			}
			take(m)
		}
		return picked, moved
	}
	var order []string
	heads := map[string][]*message{}
	blocked := map[string]bool{}
	for _, m := range live {
		g := m.groupID
		if blocked[g] {
			continue
		}
		if m.inFlight(now) || !m.available(now) {
			blocked[g] = true
			if m.inFlight(now) {
				delete(heads, g)
			}
			continue
		}
		if _, seen := heads[g]; !seen {
			order = append(order, g)
		}
		heads[g] = append(heads[g], m)
	}
	for _, g := range order {
		for _, m := range heads[g] {
			if len(picked) == max {
				break
			}
			take(m)
		}
	}
	return picked, moved
}

// checkIndex verifies q's indexes against its messages at now (q advanced to now).
func checkIndex(t *testing.T, step int, s *Server, q *queue, now time.Time) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d, queue %s: %s", step, q.name, fmt.Sprintf(format, args...))
	}
	live := presentInOrder(q)
	if q.present() != len(live) {
		fail("retention heap holds %d messages, %d are present", q.present(), len(live))
	}
	retention := time.Duration(q.intAttr("MessageRetentionPeriod")) * time.Second
	var nReady, nLeased int
	for _, m := range live {
		if !now.Before(m.enqueuedAt.Add(retention)) {
			fail("%s outlived its retention", m.id)
		}
		if m.retIdx < 0 || q.retention.items[m.retIdx] != m {
			fail("%s missing from the retention heap", m.id)
		}
		if m.ready != m.available(now) || m.leased != m.inFlight(now) {
			fail("%s: ready=%v leased=%v, want %v %v", m.id, m.ready, m.leased, m.available(now), m.inFlight(now))
		}
		nReady += b2i(m.ready)
		nLeased += b2i(m.leased)
		inTimers := m.timerIdx >= 0 && q.timers.items[m.timerIdx] == m
		if m.ready == inTimers {
			fail("%s: ready=%v but in timers=%v", m.id, m.ready, inTimers)
		}
		if inTimers {
			want := m.availableAt
			if m.visibleAt.After(want) {
				want = m.visibleAt
			}
			if !m.wakeAt.Equal(want) || !m.wakeAt.After(now) {
				fail("%s: wakeAt %v, want %v after now %v", m.id, m.wakeAt, want, now)
			}
		}
		inReady := !q.fifo && m.tenant != nil && m.readyIdx >= 0 && m.tenant.readyMsgs.items[m.readyIdx] == m
		if inReady != (m.ready && !q.fifo) {
			fail("%s: in ready heap=%v, ready=%v", m.id, inReady, m.ready)
		}
		if q.fifo && (m.group == nil || q.groups[m.groupID] != m.group) {
			fail("%s: not in its group", m.id)
		}
	}
	for k, e := range q.dedup {
		if now.Sub(e.at) >= dedupWindow {
			fail("deduplication id %s kept past the window", k)
		}
	}
	kept := 0
	for _, m := range q.msgs {
		kept += b2i(m.gone != present && !m.evicted)
		for _, r := range m.receives {
			if ref := s.handles[r.ReceiptHandle]; (ref != nil) == m.evicted {
				fail("%s (evicted=%v): handle known=%v", m.id, m.evicted, ref != nil)
			}
		}
		if (q.byID[m.id] == m) == m.evicted {
			fail("%s (evicted=%v): byID wrong", m.id, m.evicted)
		}
	}
	if limit := s.cfg.historyLimit; limit > 0 && kept > limit {
		fail("%d gone messages kept, limit %d", kept, limit)
	}
	for _, m := range q.msgs {
		if m.gone != present && (m.retIdx >= 0 || m.timerIdx >= 0 || m.readyIdx >= 0 || m.group != nil || m.tenant != nil || m.ready || m.leased) {
			fail("gone message %s still indexed", m.id)
		}
	}
	if nReady != q.nReady || nLeased != q.nLeased {
		fail("counters ready=%d leased=%d, want %d %d", q.nReady, q.nLeased, nReady, nLeased)
	}
	for _, h := range []*msgHeap{&q.retention, &q.timers} {
		for i := 1; i < h.Len(); i++ {
			if h.less(h.items[i], h.items[(i-1)/2]) {
				fail("heap order broken at %d", i)
			}
		}
	}
	if !q.fifo {
		checkFair(q, live, now, fail)
		return
	}
	inGroups := 0
	for id, g := range q.groups {
		var want []*message
		for _, m := range live {
			if m.groupID == id {
				want = append(want, m)
			}
		}
		var got []*message
		inflight := 0
		for m := g.head; m != nil; m = m.gnext {
			got = append(got, m)
			inflight += b2i(m.leased)
		}
		if !slices.Equal(got, want) || (len(got) > 0 && g.tail != got[len(got)-1]) {
			fail("group %s lists %v, want %v", id, ids(got), ids(want))
		}
		inGroups += len(got)
		if inflight != g.inflight {
			fail("group %s: inflight %d, want %d", id, g.inflight, inflight)
		}
		eligible := g.inflight == 0 && g.head != nil && g.head.ready
		if eligible != (g.idx >= 0 && q.readyGroups[g.idx] == g) {
			fail("group %s: eligible=%v, idx=%d", id, eligible, g.idx)
		}
		if g.head == nil {
			fail("empty group %s kept", id)
		}
	}
	if inGroups != len(live) {
		fail("groups hold %d messages, %d are present", inGroups, len(live))
	}
}

// checkFair checks a standard queue's fair-queue index against its live messages.
func checkFair(q *queue, live []*message, now time.Time, fail func(string, ...any)) {
	f := &q.fair
	tenants := []*tenant{f.loose}
	for id, t := range f.tenants {
		if t.id != id || t.loose {
			fail("tenant %q filed as %q", t.id, id)
		}
		tenants = append(tenants, t)
	}
	var nPresent, noisyPresent, noisyReady, noisyLeased, nNoisy int
	for _, t := range tenants {
		var want []*message
		ready, leased := 0, 0
		for _, m := range live {
			if m.groupID == t.id {
				want = append(want, m)
				ready += b2i(m.ready)
				leased += b2i(m.leased)
				if m.tenant != t {
					fail("%s: not filed under its tenant %q", m.id, t.id)
				}
			}
		}
		var got []*message
		for m := t.head; m != nil; m = m.gnext {
			got = append(got, m)
		}
		if !slices.Equal(got, want) || (len(got) > 0 && t.tail != got[len(got)-1]) {
			fail("tenant %q lists %v, want %v", t.id, ids(got), ids(want))
		}
		if t.present != len(want) || t.ready != ready || t.leased != leased || t.readyMsgs.Len() != ready {
			fail("tenant %q: present/ready/leased/heap %d/%d/%d/%d, want %d/%d/%d", t.id, t.present, t.ready, t.leased, t.readyMsgs.Len(), len(want), ready, leased)
		}
		for i := 1; i < t.readyMsgs.Len(); i++ {
			if t.readyMsgs.less(t.readyMsgs.items[i], t.readyMsgs.items[(i-1)/2]) {
				fail("tenant %q: ready heap order broken at %d", t.id, i)
			}
		}
		if t.noisy && (t.loose || t.present-t.leased == 0) {
			fail("tenant %q noisy without a backlog", t.id)
		}
		if _, in := f.noisySet[t]; in != t.noisy {
			fail("tenant %q: noisy=%v, in noisy set=%v", t.id, t.noisy, in)
		}
		wantWhere := inNone
		if ready > 0 {
			wantWhere = inQuiet
			if t.noisy {
				wantWhere = inNoisy
			}
		}
		h := map[int8]*tenantHeap{inQuiet: &f.quiet, inNoisy: &f.noisy}[wantWhere]
		if t.where != wantWhere || (h != nil && (t.hidx < 0 || t.hidx >= h.Len() || h.items[t.hidx] != t)) {
			fail("tenant %q: in heap %d at %d, want heap %d", t.id, t.where, t.hidx, wantWhere)
		}
		if _, in := f.inFlight[t]; in != (t.leased > 0 && !t.loose) {
			fail("tenant %q: %d in flight, in the in-flight set=%v", t.id, t.leased, in)
		}
		// What lets the periodic pass skip them: a quiet tenant with a backlog and
		// none in flight never meets a rule without a change of its own.
		if !t.loose && !t.noisy && t.leased == 0 && t.present > 0 && q.meetsNoisyRuleLocked(t, now) {
			fail("quiet tenant %q with none in flight meets a rule", t.id)
		}
		if t.pending != 0 {
			fail("tenant %q: %d pending after a receive", t.id, t.pending)
		}
		nPresent += len(want)
		if t.noisy {
			nNoisy++
			noisyPresent += t.present
			noisyReady += t.ready
			noisyLeased += t.leased
		}
	}
	if nPresent != len(live) {
		fail("tenants hold %d messages, %d are present", nPresent, len(live))
	}
	if nNoisy != len(f.noisySet) || noisyPresent != f.noisyPresent || noisyReady != f.noisyReady || noisyLeased != f.noisyLeased {
		fail("noisy totals %d/%d/%d/%d, want %d/%d/%d/%d", len(f.noisySet), f.noisyPresent, f.noisyReady, f.noisyLeased, nNoisy, noisyPresent, noisyReady, noisyLeased)
	}
	for _, h := range []*tenantHeap{&f.quiet, &f.noisy} {
		for i := 1; i < h.Len(); i++ {
			if h.less(h.items[i], h.items[(i-1)/2]) {
				fail("tenant heap order broken at %d", i)
			}
		}
	}
}

// A standard queue forgets a group fairForgetAfter after its last message left, so
// a server that sees many short-lived groups does not keep them all.
func TestFairForgetsEmptiedGroups(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := NewServer()
		defer s.Close()
		url, err := s.CreateQueue("q", nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			if _, err := s.Send(url, "m", WithGroupID("g"+strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
		groups := func() int {
			s.mu.Lock()
			defer s.mu.Unlock()
			q := s.queues["q"]
			s.advanceLocked(q, time.Now())
			return len(q.fair.tenants)
		}
		if n := groups(); n != 100 {
			t.Fatalf("%d groups known, want 100", n)
		}
		s.mu.Lock()
		err = s.purgeLocked(s.queues["q"], time.Now())
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(fairForgetAfter - time.Second)
		if n := groups(); n != 100 {
			t.Fatalf("%d groups known just before fairForgetAfter, want 100", n)
		}
		time.Sleep(time.Second)
		if n := groups(); n != 0 {
			t.Fatalf("%d groups known after fairForgetAfter, want 0", n)
		}
	})
}

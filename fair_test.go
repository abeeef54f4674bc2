package sqsconsumer

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// fairFlow is a flow of conc slots with fair dispatch (fair) and a group
// limit, and a maker of its messages: msg("a") is a new message of group
// a, counted as received.
func fairFlow(conc int, fair bool, limit int) (*flow[*delivery], func(group string) *delivery) {
	f := newFlow[*delivery](flowConfig{conc: conc, size: 10, maxAhead: 100, maxPollers: 1, spawn: func() {}, fair: fair, groupLimit: limit})
	n := 0
	return f, func(group string) *delivery {
		n++
		f.received(0, 1, 0, 0, time.Now(), time.Millisecond)
		return &delivery{msg: Message{ID: fmt.Sprint(n), GroupID: group}}
	}
}

// A free slot goes to the group with the fewest running, not to the oldest
// ready message: a quiet group's message overtakes a noisy group's backlog.
func TestFairDispatchFewestRunningFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f, msg := fairFlow(2, true, 0)
		noisy := []*delivery{msg("noisy"), msg("noisy"), msg("noisy"), msg("noisy")}
		for i, d := range noisy {
			want := enqueued
			if i < 2 {
				want = startNow
			}
			require.Equal(t, want, f.enqueue(d), "noisy %d", i)
		}
		quiet := msg("quiet")
		require.Equal(t, enqueued, f.enqueue(quiet))

		next, ok := f.leave(noisy[0], true)
		require.True(t, ok)
		require.Same(t, quiet, next, "quiet runs none, noisy one: quiet goes first though it came last")
		next, ok = f.leave(noisy[1], true)
		require.True(t, ok)
		require.Same(t, noisy[2], next, "then the noisy backlog, in arrival order")
	})
}

// Among groups running as many, the oldest ready message goes first; a
// message without a group is a tenant of its own, running none.
func TestFairDispatchTiesByArrival(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f, msg := fairFlow(2, true, 0)
		a1, x := msg("a"), msg("x")
		require.Equal(t, startNow, f.enqueue(a1))
		require.Equal(t, startNow, f.enqueue(x))
		a2, b1, loose, a3 := msg("a"), msg("b"), msg(""), msg("a")
		for _, d := range []*delivery{a2, b1, loose, a3} {
			require.Equal(t, enqueued, f.enqueue(d))
		}
		// a1 keeps running; the other slot passes from message to message.
		var order []*delivery
		for cur := x; ; {
			next, ok := f.leave(cur, true)
			if !ok {
				break
			}
			order = append(order, next)
			cur = next
		}
		// a runs one, b and the groupless one none: b1 (it came first),
		// then the groupless one, then a's in order.
		require.Equal(t, []*delivery{b1, loose, a2, a3}, order)
	})
}

// Off (a FIFO queue, or WithFairDispatch(false)), messages start in
// arrival order whatever their group.
func TestFairDispatchOffIsArrivalOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f, msg := fairFlow(1, false, 1)
		first := msg("noisy")
		require.Equal(t, startNow, f.enqueue(first))
		n2, q := msg("noisy"), msg("quiet")
		require.Equal(t, enqueued, f.enqueue(n2))
		require.Equal(t, enqueued, f.enqueue(q))
		next, ok := f.leave(first, true)
		require.True(t, ok)
		require.Same(t, n2, next, "the oldest first, and the limit does not apply")
	})
}

// WithGroupLimit is a hard cap: a group's messages beyond it wait, even
// with slots free, and another group's message takes a free slot at once.
func TestGroupLimitIsHardCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f, msg := fairFlow(4, true, 2)
		var noisy []*delivery
		for i := range 4 {
			d := msg("noisy")
			noisy = append(noisy, d)
			want := enqueued
			if i < 2 {
				want = startNow
			}
			require.Equal(t, want, f.enqueue(d), "noisy %d", i)
		}
		running, waiting, _, _ := f.snapshot()
		require.Equal(t, 2, running, "two slots free, but noisy is at its limit")
		require.Equal(t, 2, waiting)
		require.Equal(t, 2, f.ready.blocked())

		q := msg("quiet")
		require.Equal(t, startNow, f.enqueue(q), "a free slot and only blocked messages ready: the quiet one starts")
		next, ok := f.leave(q, true)
		require.False(t, ok, "the freed slot is not noisy's")
		require.Nil(t, next)

		next, ok = f.leave(noisy[0], true)
		require.True(t, ok)
		require.Same(t, noisy[2], next, "a noisy slot frees: its next message takes it")
		require.Equal(t, 1, f.ready.blocked())

		ready := f.takeReady()
		require.Equal(t, []*delivery{noisy[3]}, ready, "blocked messages are handed back with the rest")
		require.Zero(t, f.ready.blocked())
		require.Zero(t, f.ready.len())
	})
}

// Blocked messages count as read ahead, so a capped group's backlog is
// not received faster than it runs; while they leave slots free that only
// other tenants may take, one receive at a time still goes out, at most
// one a mean slot hold time (no other tenant active), asking for what the
// read-ahead lacks but at least one message, within the read-ahead bound.
func TestGroupLimitProbes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f, msg := fairFlow(4, true, 1)
		f.maxAhead = 3
		for range 5 {
			f.enqueue(msg("noisy"))
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		require.Equal(t, 4, f.ready.blocked())
		f.hold, f.sentAt = 50*time.Millisecond, time.Now()
		require.Zero(t, f.nextLocked(time.Now()), "the last receive was sent just now")
		f.sentAt = time.Now().Add(-50 * time.Millisecond)
		// 3 free slots, no read-ahead yet (no completions), 4 waiting:
		// the read-ahead lacks nothing, so the probe asks for one.
		require.Equal(t, 1, f.nextLocked(time.Now()))
		f.asked = 1
		require.Zero(t, f.nextLocked(time.Now()), "one at a time")
	})
}

// probeSize: nothing without a free slot, with a receive in flight or at
// the read-ahead bound; else after gap, what the read-ahead lacks, at
// least one, at most a full receive and the room left.
func TestProbeSize(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	sent := now.Add(-30 * time.Millisecond)
	for _, c := range []struct {
		name              string
		free              bool
		asked, room, want int
		gap               time.Duration
		n                 int
		at                time.Time
	}{
		{name: "no free slot", free: false, room: 100, want: 5, gap: fairGap},
		{name: "in flight", free: true, asked: 1, room: 100, want: 5, gap: fairGap},
		{name: "no room", free: true, room: 0, want: 5, gap: fairGap},
		{name: "too soon", free: true, room: 100, want: 5, gap: 50 * time.Millisecond, at: sent.Add(50 * time.Millisecond)},
		{name: "what is lacking", free: true, room: 100, want: 5, gap: fairGap, n: 5},
		{name: "at least one", free: true, room: 100, want: -7, gap: fairGap, n: 1},
		{name: "at most a receive", free: true, room: 100, want: 25, gap: fairGap, n: 10},
		{name: "within the room", free: true, room: 3, want: 5, gap: fairGap, n: 3},
	} {
		n, at := probeSize(c.free, c.asked, c.room, c.want, 10, c.gap, sent, now)
		require.Equal(t, c.n, n, c.name)
		require.Equal(t, c.at, at, c.name)
	}
}

// Messages handed back come in arrival order, whatever their group.
func TestFairReadyTakeAllInArrivalOrder(t *testing.T) {
	t.Parallel()
	r := newFairReady[*delivery](true, 0, 4)
	var in []*delivery
	for i, g := range []string{"a", "", "b", "a", "", "b"} {
		d := &delivery{msg: Message{ID: fmt.Sprint(i), GroupID: g}}
		in = append(in, d)
		r.push(d)
	}
	require.Equal(t, in, r.takeAll())
	require.Zero(t, r.len())
	require.False(t, r.eligible())
}

// Stats' groups: the top five by slot time, the count of groups above a
// tenth, the rest counted; memory bounded whatever the number of groups.
func TestGroupSlotsTopAndNoisy(t *testing.T) {
	t.Parallel()
	var s groupSlots
	now := time.Unix(1000, 0)
	s.add("big", 60*time.Second, now)
	s.add("mid", 20*time.Second, now)
	for i := range 1000 {
		s.add(fmt.Sprint("small", i), 10*time.Millisecond, now)
	}
	require.LessOrEqual(t, len(s.byName), groupSlotCounters, "bounded")
	g := s.figures(now)
	require.Len(t, g.top, topGroups)
	require.Equal(t, "big", g.top[0].Group)
	require.Equal(t, "mid", g.top[1].Group)
	require.InDelta(t, 60.0, g.top[0].SlotTime.Seconds(), 1)
	require.InDelta(t, 60.0/90, g.top[0].Share, 0.01)
	require.Equal(t, 2, g.noisy, "big and mid are above a tenth")
	require.Equal(t, groupSlotCounters-topGroups, g.others)
	require.InDelta(t, 9.0, g.otherSlots.Seconds(), 1, "the small groups, less the three named")

	// A minute later with no more slot time, every figure decays by e.
	later := s.figures(now.Add(groupSlotTau))
	require.InDelta(t, 60/2.718, later.top[0].SlotTime.Seconds(), 0.5)
	require.InDelta(t, g.top[0].Share, later.top[0].Share, 1e-9, "shares do not change with decay")
	// Hours later the weights are rebased without overflow.
	far := now.Add(500 * groupSlotTau)
	s.add("late", time.Second, far)
	require.Equal(t, "late", s.figures(far).top[0].Group)
}

// WithGroupLimit is validated; its error wraps ErrInvalidOption and names
// the option.
func TestWithGroupLimitValidated(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	for _, n := range []int{0, -1, maxGroupLimit + 1} {
		_, err := New(&fakeClient{}, "https://sqs.example/q", h, WithGroupLimit(n))
		require.ErrorIs(t, err, ErrInvalidOption, "n=%d", n)
		require.ErrorContains(t, err, "WithGroupLimit")
	}
	c, err := New(&fakeClient{}, "https://sqs.example/q", h, WithGroupLimit(3), WithFairDispatch(true))
	require.NoError(t, err)
	require.Equal(t, 3, c.s.groupLimit)
	require.False(t, c.s.fifoDispatch)
	c, err = New(&fakeClient{}, "https://sqs.example/q", h, WithFairDispatch(false))
	require.NoError(t, err)
	require.True(t, c.s.fifoDispatch)
}

// The heavy tenants (above a tenth of the slot time) leave headroom while
// others are active: together they hold at most conc less 1 + twice the
// others' mean slots, at most half the slots; heavy tenants alone keep
// every slot.
func TestFairHeadroom(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	alone := newFairReady[*delivery](true, 0, 20)
	alone.slots.add("noisy", 20*time.Minute, now)
	alone.recap(now)
	require.Zero(t, alone.poolCap, "one tenant alone: no headroom")
	require.False(t, alone.lightActive)

	r := newFairReady[*delivery](true, 0, 20)
	r.slots.add("noisy", 19*time.Minute, now)
	r.slots.add("quiet", 54*time.Second, now) // 0.9 slots over the minute
	r.recap(now)
	require.Equal(t, map[string]bool{"noisy": true}, r.heavy)
	require.Equal(t, 20-3, r.poolCap, "1 + ceil(2 × 0.9)")
	require.True(t, r.lightActive)
	for range 17 {
		r.seated("noisy")
	}
	r.push(&delivery{msg: Message{ID: "n", GroupID: "noisy"}})
	require.False(t, r.eligible(), "noisy's pool is full")
	require.Equal(t, 1, r.blocked())
	require.True(t, r.mayStart("quiet"))
	require.False(t, r.mayStart("noisy"))

	r.slots.add("other", 30*time.Minute, now) // a second heavy tenant
	r.recap(now.Add(recapEvery))
	require.Equal(t, map[string]bool{"noisy": true, "other": true}, r.heavy)
	require.Equal(t, 17, r.poolCap, "the quiet tenant's reserve does not shrink")
	require.False(t, r.eligible())

	for i := range 12 { // the others now hold more than half, each a little
		r.slots.add(fmt.Sprint("light-", i), time.Minute, now)
	}
	r.recap(now.Add(2 * recapEvery))
	require.Equal(t, 10, r.poolCap, "never less than half the slots")
	require.Equal(t, map[string]bool{"noisy": true, "other": true}, r.heavy)

	r2 := newFairReady[*delivery](true, 0, 20)
	r2.slots.add("a", 10*time.Minute, now)
	r2.slots.add("b", 10*time.Minute, now)
	r2.recap(now)
	require.Zero(t, r2.poolCap, "heavy tenants alone: no headroom")
	require.Nil(t, r2.heavy)
}

// Issue 35, case 8: with two (or three) heavy tenants, the slots a heavy
// one leaves go to the other heavy ones only up to their pool: the
// reserve stays free for the quiet tenants, and a quiet message starts at
// once. (Before, only the tenant with the most slot time was capped, at
// half the slots, and the second took the other half.)
func TestFairHeadroomManyHeavy(t *testing.T) {
	t.Parallel()
	for _, heavy := range []int{2, 3} {
		synctest.Test(t, func(t *testing.T) {
			f, msg := fairFlow(20, true, 0)
			now := time.Now()
			for i := range heavy {
				f.ready.slots.add(fmt.Sprint("noisy-", i), 10*time.Minute, now)
			}
			f.ready.slots.add("quiet", 54*time.Second, now) // 0.9 slots: a reserve of 3
			// A burst of each heavy tenant, interleaved: the first 20 start.
			var running, backlog []*delivery
			for i := range 60 {
				d := msg(fmt.Sprint("noisy-", i%heavy))
				if f.enqueue(d) == startNow {
					running = append(running, d)
				} else {
					backlog = append(backlog, d)
				}
			}
			require.Len(t, running, 20)
			// Slots free; the heavy tenants refill them up to their pool.
			time.Sleep(50 * time.Millisecond)
			for _, d := range running[:5] {
				next, ok := f.leave(d, true)
				if ok {
					require.Contains(t, backlog, next)
					running = append(running, next)
				}
			}
			n, _, _, _ := f.snapshot()
			require.Equal(t, 17, n, "%d heavy tenants together hold 17: 3 slots stay free", heavy)
			for i := range 3 {
				q := msg(fmt.Sprint("quiet-", i))
				require.Equal(t, startNow, f.enqueue(q), "quiet message %d starts at once", i)
				running = append(running, q)
			}
			require.Equal(t, enqueued, f.enqueue(msg("quiet-3")), "the reserve is used up")
		})
	}
}

// While the heavy tenants' pool is full, their backlog waits here and the
// quiet tenants are active, a receive goes out every fairGap (one at a
// time), though the read-ahead lacks nothing: a quiet tenant's message
// waits in SQS at most that long. Without quiet tenants the probes keep
// the mean hold time's pace.
func TestFairPacesReceives(t *testing.T) {
	t.Parallel()
	for _, quiet := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			f, msg := fairFlow(20, true, 1000)
			now := time.Now()
			f.ready.slots.add("noisy", 10*time.Minute, now)
			if quiet {
				f.ready.slots.add("quiet", 54*time.Second, now)
			}
			var running []*delivery
			for range 60 {
				if d := msg("noisy"); f.enqueue(d) == startNow {
					running = append(running, d)
				}
			}
			time.Sleep(50 * time.Millisecond)
			for _, d := range running[:3] {
				f.leave(d, true) // the recap: a pool of 17 with the quiet tenant
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			now = time.Now()
			f.hold, f.rtt = 50*time.Millisecond, rttEstimate{}
			f.rtt.add(now, 10*time.Millisecond)
			f.sentAt = now.Add(-fairGap + time.Millisecond)
			if !quiet {
				require.Zero(t, f.ready.blocked(), "no pool without a quiet tenant")
				require.Zero(t, f.nextLocked(now), "nothing lacking, nothing blocked: no receive")
				return
			}
			require.Equal(t, 17, f.running)
			require.Equal(t, 40, f.ready.blocked(), "the 40 not started")
			require.Zero(t, f.nextLocked(now), "the last receive went out less than fairGap ago")
			require.Equal(t, now.Add(time.Millisecond), f.timerAt, "the timer wakes the pollers at fairGap")
			f.sentAt = now.Add(-fairGap)
			require.Equal(t, 1, f.nextLocked(now), "nothing lacking: one message")
			f.asked = 1
			require.Zero(t, f.nextLocked(now), "one at a time")
		})
	}
}

// The slot time figures' mean slots count over the time since the first
// slot time when that is shorter than the decay's window: a Consumer a
// few seconds old knows its tenants' load at once.
func TestGroupSlotsLightWarmup(t *testing.T) {
	t.Parallel()
	var s groupSlots
	now := time.Unix(1000, 0)
	for range 18 { // 18 slots for the first second
		s.add("noisy", time.Second, now.Add(time.Second))
	}
	s.add("quiet", time.Second, now.Add(time.Second)) // 1 slot
	heavy, light, ok := s.heavyAndLight(now.Add(time.Second))
	require.True(t, ok)
	require.Equal(t, map[string]bool{"noisy": true}, heavy)
	require.InDelta(t, 1.0, light, 0.02, "one slot over the second since the first slot time began")

	heavy, light, ok = s.heavyAndLight(now.Add(time.Second + 10*groupSlotTau))
	require.True(t, ok)
	require.Equal(t, map[string]bool{"noisy": true}, heavy, "shares do not change with decay")
	require.Less(t, light, 0.001, "ten windows later hardly anything is left")
	_, light, _ = s.heavyAndLight(now.Add(time.Second + 250*groupSlotTau)) // rebases the weights
	require.Less(t, light, 1e-9, "250 windows later nothing is left")

	// Hours later the weights are rebased on the way: the figures hold.
	far := now.Add(500 * groupSlotTau)
	s.add("quiet", time.Second, far)
	heavy, light, ok = s.heavyAndLight(far.Add(time.Second))
	require.True(t, ok)
	require.Equal(t, map[string]bool{"quiet": true}, heavy, "the old slot time has decayed away")
	require.Zero(t, light)

	var none groupSlots
	_, _, ok = none.heavyAndLight(now)
	require.False(t, ok)
}

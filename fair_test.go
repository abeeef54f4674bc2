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
		require.Equal(t, 2, f.ready.blocked)

		q := msg("quiet")
		require.Equal(t, startNow, f.enqueue(q), "a free slot and only blocked messages ready: the quiet one starts")
		next, ok := f.leave(q, true)
		require.False(t, ok, "the freed slot is not noisy's")
		require.Nil(t, next)

		next, ok = f.leave(noisy[0], true)
		require.True(t, ok)
		require.Same(t, noisy[2], next, "a noisy slot frees: its next message takes it")
		require.Equal(t, 1, f.ready.blocked)

		ready := f.takeReady()
		require.Equal(t, []*delivery{noisy[3]}, ready, "blocked messages are handed back with the rest")
		require.Zero(t, f.ready.blocked)
		require.Zero(t, f.ready.len())
	})
}

// Blocked messages count as read ahead, so a capped group's backlog is
// not received faster than it runs; while they leave slots free that only
// other tenants may take, one receive at a time still goes out, at most
// one a mean slot hold time, within the read-ahead bound.
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
		require.Equal(t, 4, f.ready.blocked)
		f.hold, f.sentAt = 50*time.Millisecond, time.Now()
		require.Zero(t, f.nextLocked(time.Now()), "the last receive was sent just now")
		f.sentAt = time.Now().Add(-50 * time.Millisecond)
		// running 1 + waiting 4 = 5 of conc + maxAhead 7: 2 more fit.
		require.Equal(t, 2, f.nextLocked(time.Now()))
		f.asked = 2
		require.Zero(t, f.nextLocked(time.Now()), "one at a time")
	})
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
	c, err := New(&fakeClient{}, "https://sqs.example/q", h, WithGroupLimit(3), WithFairDispatch(false))
	require.NoError(t, err)
	require.Equal(t, 3, c.s.groupLimit)
	require.True(t, c.s.fifoDispatch)
}

// The tenant holding the most slot time leaves headroom while others are
// active (1 + twice their mean slots, at most half the slots); a tenant
// alone keeps every slot.
func TestFairHeadroom(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	alone := newFairReady[*delivery](true, 0, 20)
	alone.slots.add("noisy", 20*time.Minute, now)
	alone.recap(now)
	require.Zero(t, alone.capN, "one tenant alone: no headroom")

	r := newFairReady[*delivery](true, 0, 20)
	r.slots.add("noisy", 19*time.Minute, now)
	r.slots.add("quiet", 54*time.Second, now) // 0.9 slots over the minute
	r.recap(now)
	require.Equal(t, "noisy", r.capKey)
	require.Equal(t, 20-3, r.capN, "1 + ceil(2 × 0.9)")
	for range 17 {
		r.seated("noisy")
	}
	r.push(&delivery{msg: Message{ID: "n", GroupID: "noisy"}})
	require.False(t, r.eligible(), "noisy is at its headroom cap")
	require.True(t, r.mayStart("quiet"))

	r.slots.add("other", 30*time.Minute, now) // the others now hold more than half
	r.recap(now.Add(recapEvery))
	require.Equal(t, "other", r.capKey)
	require.Equal(t, 10, r.capN, "never less than half the slots")
	require.True(t, r.eligible(), "the re-sort unblocks noisy")
	require.Zero(t, r.blocked)
}

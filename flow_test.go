package sqsconsumer

import (
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReadAhead(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	tests := []struct {
		name                string
		rate, capacity      float64
		due                 int
		rtt                 time.Duration
		limit               int
		wantCover, wantAhed int
	}{
		{"nothing finished yet: no read-ahead", 0, inf, 0, 10 * time.Millisecond, 1000, 0, 0},
		{"fast handlers below capacity: twice the rate over the round trip, plus a batch", 2000, inf, 0, 10 * time.Millisecond, 1000, 40, 50},
		{"at capacity: the handlers' own pace", 2000, 2000, 0, 10 * time.Millisecond, 1000, 20, 30},
		{"slow handlers: next to nothing", 1.0 / 3, 1.0 / 3, 0, 10 * time.Millisecond, 1000, 1, 2},
		{"a burst due within the round trip is covered", 20, 20, 20, 100 * time.Millisecond, 1000, 20, 22},
		{"round trip of 0: only the batch gather", 500, 500, 0, 0, 1000, 0, 10},
		{"capped by the bound", 20000, inf, 0, 100 * time.Millisecond, 1000, 1000, 1000},
		{"bound 0: no read-ahead at all", 2000, inf, 0, 10 * time.Millisecond, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cover, ahead := readAhead(tt.rate, tt.capacity, tt.due, tt.rtt, maxReceiveSize, tt.limit)
			require.Equal(t, tt.wantCover, cover, "cover")
			require.Equal(t, tt.wantAhed, ahead, "ahead")
		})
	}
}

func TestReceiveSize(t *testing.T) {
	t.Parallel()
	base := flowCounts{conc: 20, size: 10}
	with := func(f func(*flowCounts)) flowCounts { c := base; f(&c); return c }
	tests := []struct {
		name string
		c    flowCounts
		want int
	}{
		{"idle, nothing measured: a full batch for the free slots", base, 10},
		{"quiet queue: one receive at a time", with(func(c *flowCounts) { c.quiet = true; c.asked = 10 }), 0},
		{"quiet queue, nothing asked: one receive", with(func(c *flowCounts) { c.quiet = true }), 10},
		{"every slot covered, nothing ahead: wait", with(func(c *flowCounts) { c.asked = 20 }), 0},
		{"one slot uncovered: ask for it now, not a batch later", with(func(c *flowCounts) { c.running = 19 }), 1},
		{"a slot freed but the read-ahead covers it: wait for a full batch", with(func(c *flowCounts) {
			c.running, c.waiting, c.cover, c.ahead = 20, 5, 3, 13
		}), 0},
		{"a batch missing from the read-ahead: ask a full one", with(func(c *flowCounts) {
			c.running, c.waiting, c.cover, c.ahead = 20, 3, 3, 13
		}), 10},
		{"below the round-trip cover: ask for what is missing", with(func(c *flowCounts) {
			c.running, c.waiting, c.cover, c.ahead = 20, 1, 3, 6
		}), 5},
		{"never more than a batch", with(func(c *flowCounts) { c.cover, c.ahead = 100, 110 }), 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, receiveSize(tt.c))
		})
	}
}

func TestRateMeter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := rateMeter{start: t0}
	require.Zero(t, m.value(t0.Add(time.Second)))
	young := rateMeter{start: t0}
	for i := range 10 { // 10 events in the first 50 ms: 200 a second
		young.add(t0.Add(time.Duration(i+1) * 5 * time.Millisecond))
	}
	require.InDelta(t, 200, young.value(t0.Add(50*time.Millisecond)), 20, "a young meter reads the rate since its start")
	now := t0
	for range 5000 { // 1000 a second for 5 s: many time constants
		now = now.Add(time.Millisecond)
		m.add(now)
	}
	require.InDelta(t, 1000, m.value(now), 5)
	require.InDelta(t, 1000*math.Exp(-1), m.value(now.Add(rateTau)), 5, "decays by e each time constant")
}

// The flow counts every message in one place at a time: waiting, in a
// slot, or settling (its slot given back before its delete is confirmed,
// at most concurrency + max read-ahead of them); a message that leaves
// takes its count with it, and a freed slot goes to the oldest ready
// message.
func TestFlowCounts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		paused := new(atomic.Bool)
		f := newFlow[*delivery](flowConfig{conc: 2, size: 10, maxAhead: 1, maxPollers: 1, spawn: func() {}, paused: paused})
		f.received(0, 4, 0, 0, time.Now(), time.Millisecond)
		ds := []*delivery{{}, {}, {}, {}}
		for i, d := range ds {
			v := f.enqueue(d)
			if i < 2 {
				require.Equal(t, startNow, v, "message %d", i)
				require.Equal(t, placeSlot, d.ticket.place, "message %d seated by the flow", i)
			} else {
				require.Equal(t, enqueued, v, "message %d", i)
				require.Equal(t, placeWaiting, d.ticket.place, "message %d", i)
			}
		}
		running, waiting, _, _ := f.snapshot()
		require.Equal(t, 2, running)
		require.Equal(t, 2, waiting)

		next, ok := f.leave(ds[0], true)
		require.True(t, ok)
		require.Same(t, ds[2], next, "the oldest ready message takes the slot")
		require.Equal(t, placeSlot, ds[2].ticket.place)
		require.Equal(t, placeOut, ds[0].ticket.place)
		running, waiting, _, _ = f.snapshot()
		require.Equal(t, 2, running)
		require.Equal(t, 1, waiting)

		require.True(t, f.takeSettling())
		require.True(t, f.takeSettling())
		next, ok = f.settleEarly(ds[1])
		require.True(t, ok, "room for a third settling message: the slot goes to the ready one")
		require.Same(t, ds[3], next)
		require.Equal(t, placeSettling, ds[1].ticket.place)
		_, ok = f.settleEarly(ds[2])
		require.False(t, ok, "at most concurrency + max read-ahead settle at once")
		require.Equal(t, placeSlot, ds[2].ticket.place, "it keeps its slot until it leaves")
		f.leave(ds[1], true)
		require.True(t, f.takeSettling(), "a settling message that leaves makes room")

		waitingOne := &delivery{}
		f.received(0, 1, 0, 0, time.Now(), time.Millisecond)
		require.Equal(t, enqueued, f.enqueue(waitingOne), "both slots are busy (ds[2], ds[3])")
		paused.Store(true) // Pause
		require.Equal(t, []*delivery{waitingOne}, f.takeReady(), "a pause takes the ready messages out")
		_, waiting, _, _ = f.snapshot()
		require.Equal(t, 1, waiting, "a message taken out still counts until it leaves")
		_, ok = f.leave(waitingOne, false)
		require.False(t, ok)
		_, waiting, _, _ = f.snapshot()
		require.Zero(t, waiting)
		require.Equal(t, notStarting, f.enqueue(&delivery{}), "nothing starts while paused")
	})
}

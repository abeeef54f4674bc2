package scaling

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func policy() Policy {
	return Policy{Target: 30 * time.Second, ScaleInAfter: 5 * time.Minute, Utilization: 0.85}
}

// steady is a reading of a queue that receives 100 msg/s, served by
// replicas of 20 msg/s each (concurrency 20, 1 s a message): 100
// messages in flight for 1 s each.
func steady(at time.Duration) Reading {
	return Reading{At: t0.Add(at), Visible: 0, InFlight: 100, Capacity: 20, MeanInFlight: time.Second}
}

func TestSteadyState(t *testing.T) {
	t.Parallel()
	s := NewSignal(policy())
	var f Figure
	for i := range 10 {
		f = s.Update(steady(time.Duration(i) * 30 * time.Second))
	}
	require.True(t, f.Known)
	require.InDelta(t, 100, f.ArrivalRate, 1e-9)
	require.InDelta(t, 100, f.Demand, 1e-9)
	require.InDelta(t, 100/(20*0.85), f.Raw, 1e-9) // 5.88
	require.Equal(t, 6, f.Replicas)
}

// A backlog adds backlog/target to the demand, and a growing backlog adds
// its growth to the arrival rate.
func TestBacklogAndGrowth(t *testing.T) {
	t.Parallel()
	s := NewSignal(policy())
	f := s.Update(Reading{At: t0, Visible: 600, InFlight: 100, Capacity: 20, MeanInFlight: time.Second})
	require.InDelta(t, 100, f.ArrivalRate, 1e-9) // no growth from one reading
	require.InDelta(t, 100+600.0/30, f.Demand, 1e-9)
	require.Equal(t, 8, f.Replicas) // 120 / 17 = 7.06

	// 30 s later 3,600 visible: a rise, followed at once. Arrivals this
	// reading: 100 departures + 3,000/30 growth = 200, smoothed by a
	// quarter to 125.
	f = s.Update(Reading{At: t0.Add(30 * time.Second), Visible: 3600, InFlight: 100, Capacity: 20, MeanInFlight: time.Second})
	require.InDelta(t, 3600, f.Visible, 1e-9)
	require.InDelta(t, 125, f.ArrivalRate, 1e-9)
	require.InDelta(t, 125+3600.0/30, f.Demand, 1e-9)
	require.Equal(t, 15, f.Replicas) // 245 / 17 = 14.4

	// The backlog started: 0 visible (a fall, smoothed to 1,800), arrivals
	// this reading 100 - 3,600/30 = -20, smoothed to 88.75: (88.75 + 60)
	// / 17 = 8.75 → 9, above the held arrivals' figure (125/17 → 8). The
	// backlog's share is not held.
	f = s.Update(Reading{At: t0.Add(time.Minute), InFlight: 100, Capacity: 20, MeanInFlight: time.Second})
	require.InDelta(t, 1800, f.Visible, 1e-9)
	require.InDelta(t, 88.75, f.ArrivalRate, 1e-9)
	require.Equal(t, 9, f.Replicas)
	for i := 3; i < 6; i++ {
		f = s.Update(Reading{At: t0.Add(time.Duration(i) * 30 * time.Second), InFlight: 100, Capacity: 20, MeanInFlight: time.Second})
	}
	require.Less(t, f.Visible, 250.0)
	require.InDelta(t, (f.ArrivalRate+f.Visible/30)/17, f.Raw, 1e-9)
	require.Equal(t, 8, f.Replicas, "down to the held arrivals' figure once the backlog is gone")
}

// The figure rises at once and falls only to the highest figure of the
// last ScaleInAfter: one reversal per change of load.
func TestScaleInWindow(t *testing.T) {
	t.Parallel()
	s := NewSignal(policy())
	high := Reading{InFlight: 200, Capacity: 20, MeanInFlight: time.Second} // 11.8 -> 12
	low := Reading{InFlight: 40, Capacity: 20, MeanInFlight: time.Second}   // smoothed down
	var got []int
	at := time.Duration(0)
	for range 4 {
		r := high
		r.At = t0.Add(at)
		got = append(got, s.Update(r).Replicas)
		at += 30 * time.Second
	}
	for range 14 {
		r := low
		r.At = t0.Add(at)
		got = append(got, s.Update(r).Replicas)
		at += 30 * time.Second
	}
	// 12 while high and for the five minutes after the last high
	// reading (at 90 s, held until 360 s), then down as the smoothed
	// arrivals fall toward the low figure, 3 (40/17 = 2.35): never up
	// again.
	want := []int{12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 10, 8, 7, 6, 5}
	require.Equal(t, want, got)
	reversals := 0
	for i := 2; i < len(got); i++ {
		if (got[i]-got[i-1])*(got[i-1]-got[i-2]) < 0 {
			reversals++
		}
	}
	require.Zero(t, reversals)
}

func TestNeverZeroWhileMessagesAreThere(t *testing.T) {
	t.Parallel()
	for _, zero := range []bool{false, true} {
		p := policy()
		p.ScaleToZero = zero
		s := NewSignal(p)
		// A trickle: one message in flight, a tiny demand.
		f := s.Update(Reading{At: t0, InFlight: 1, Capacity: 1000, MeanInFlight: time.Second})
		require.Equal(t, 1, f.Replicas, "scale to zero %v", zero)
		f = s.Update(Reading{At: t0.Add(time.Minute), Visible: 1, Capacity: 1000, MeanInFlight: time.Second})
		require.Equal(t, 1, f.Replicas)
	}
}

func TestScaleToZero(t *testing.T) {
	t.Parallel()
	p := policy()
	p.ScaleToZero = true
	s := NewSignal(p)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 30 * time.Second) }
	f := s.Update(Reading{At: at(0), InFlight: 100, Capacity: 20, MeanInFlight: time.Second})
	require.Equal(t, 6, f.Replicas)
	f = s.Update(Reading{At: at(1), Capacity: 20, MeanInFlight: time.Second})
	require.Equal(t, 6, f.Replicas, "one empty reading may be SQS's approximation")
	f = s.Update(Reading{At: at(2), Capacity: 20, MeanInFlight: time.Second})
	require.Equal(t, 0, f.Replicas, "empty twice: nothing to do")
	require.True(t, f.Known)
	// A delayed message is something to do, even when not counted as
	// backlog.
	f = s.Update(Reading{At: at(3), Delayed: 1, Capacity: 20, MeanInFlight: time.Second})
	require.Equal(t, 1, f.Replicas)

	// Without ScaleToZero the floor is 1.
	s = NewSignal(policy())
	for i := range 4 {
		f = s.Update(Reading{At: at(i), Capacity: 20, MeanInFlight: time.Second})
	}
	require.Equal(t, 1, f.Replicas)
}

func TestUnknownUntilMeasured(t *testing.T) {
	t.Parallel()
	s := NewSignal(policy())
	f := s.Update(Reading{At: t0, Visible: 500})
	require.False(t, f.Known)
	require.Contains(t, f.Reason, "no completions measured yet")
	require.Zero(t, f.Replicas)

	// An empty queue needs the floor, measured or not.
	s = NewSignal(policy())
	f = s.Update(Reading{At: t0})
	require.True(t, f.Known)
	require.Equal(t, 1, f.Replicas)

	// Once known, an unknown reading (capacity lost?) keeps the last figure.
	f = s.Update(Reading{At: t0.Add(30 * time.Second), InFlight: 100, Capacity: 20, MeanInFlight: time.Second})
	require.Equal(t, 6, f.Replicas) // the first measured arrivals: 100/17 = 5.9
	f = s.Update(Reading{At: t0.Add(time.Minute), InFlight: 100})
	require.False(t, f.Known)
	require.Equal(t, 6, f.Replicas)
}

func TestDelayedCountsWhenAsked(t *testing.T) {
	t.Parallel()
	r := Reading{At: t0, Delayed: 3000, InFlight: 100, Capacity: 20, MeanInFlight: time.Second}
	require.Equal(t, 6, NewSignal(policy()).Update(r).Replicas)
	p := policy()
	p.CountDelayed = true
	require.Equal(t, 12, NewSignal(p).Update(r).Replicas) // (100 + 100) / 17 = 11.8
}

func TestClamps(t *testing.T) {
	t.Parallel()
	p := policy()
	p.Min, p.Max = 3, 5
	s := NewSignal(p)
	require.Equal(t, 5, s.Update(steady(0)).Replicas)
	s = NewSignal(p)
	require.Equal(t, 3, s.Update(Reading{At: t0, InFlight: 1, Capacity: 20, MeanInFlight: time.Second}).Replicas)
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mod  func(*Policy)
		want string
	}{
		{func(p *Policy) { p.Target = 0 }, "Target"},
		{func(p *Policy) { p.Utilization = 1.5 }, "Utilization"},
		{func(p *Policy) { p.Utilization = 0 }, "Utilization"},
		{func(p *Policy) { p.ScaleInAfter = -1 }, "ScaleInAfter"},
		{func(p *Policy) { p.Min = -1 }, "Min"},
		{func(p *Policy) { p.Min, p.Max = 5, 2 }, "Min 5 above Max 2"},
	} {
		p := policy()
		tt.mod(&p)
		err := p.Check()
		require.Error(t, err)
		require.Contains(t, err.Error(), tt.want)
	}
	require.NoError(t, policy().Check())
}

func TestHold(t *testing.T) {
	t.Parallel()
	h := Hold{Window: time.Minute}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	require.Equal(t, 3, h.Add(at(0), 3))
	require.Equal(t, 5, h.Add(at(10), 5), "rises at once")
	require.Equal(t, 5, h.Add(at(30), 2))
	require.Equal(t, 5, h.Add(at(69), 2), "5 was added 59 s ago")
	require.Equal(t, 2, h.Add(at(70), 2), "out of the window")
	h.Reset()
	require.Equal(t, 1, h.Add(at(71), 1))
	var zero Hold
	require.Equal(t, 4, zero.Add(at(0), 4))
	require.Equal(t, 1, zero.Add(at(1), 1), "no window: the latest")
}

func TestProcess(t *testing.T) {
	t.Parallel()
	q := func(replicas int, demand float64, slot time.Duration, util float64) Queue {
		return Queue{Replicas: replicas, Demand: demand, SlotTime: slot, Utilization: util}
	}
	for _, tt := range []struct {
		name   string
		queues []Queue
		budget int
		want   int
		slots  float64
	}{
		{"none", nil, 10, 0, 0},
		// 3 × 4 msg/s × 1 s = 12 slots busy; a budget of 10 at 0.9 plans 9.
		{"three small queues", []Queue{q(1, 4, time.Second, 0.9), q(1, 4, time.Second, 0.9), q(1, 4, time.Second, 0.9)}, 10, 2, 12},
		// Exactly a budget's worth at utilization 1: one replica.
		{"exact", []Queue{q(1, 5, 2*time.Second, 1)}, 10, 1, 10},
		{"just above", []Queue{q(1, 5.01, 2*time.Second, 1)}, 10, 2, 10.02},
		// The lowest utilization rules: 8 slots over 10 × 0.5.
		{"lowest utilization", []Queue{q(1, 4, time.Second, 0.9), q(1, 4, time.Second, 0.5)}, 10, 2, 8},
		// A queue's own figure is a floor (its concurrency caps it per replica).
		{"a queue's floor", []Queue{q(7, 1, time.Second, 0.9)}, 100, 7, 1},
	} {
		got, slots := Process(tt.queues, tt.budget)
		require.Equal(t, tt.want, got, tt.name)
		require.InDelta(t, tt.slots, slots, 1e-9, tt.name)
	}
}

// Peek figures a reading as Update would and leaves the Signal as it was.
func TestPeekChangesNothing(t *testing.T) {
	t.Parallel()
	p := Policy{Target: 30 * time.Second, ScaleInAfter: 5 * time.Minute, Utilization: 0.9}
	at := time.Unix(0, 0)
	a, b := NewSignal(p), NewSignal(p)
	first := Reading{At: at, Visible: 20, InFlight: 10, Capacity: math.Inf(1)}
	require.False(t, a.Update(first).Known)
	b.Update(first)
	measured := first
	measured.Capacity, measured.MeanInFlight = 100, 100*time.Millisecond
	f := a.Peek(measured)
	require.True(t, f.Known)
	require.Equal(t, b.Update(measured), f, "what Update says")
	next := Reading{At: at.Add(30 * time.Second), Capacity: 100, MeanInFlight: 100 * time.Millisecond}
	c := NewSignal(p)
	c.Update(first)
	require.Equal(t, c.Update(next), a.Update(next), "as if Peek had not been called")
}

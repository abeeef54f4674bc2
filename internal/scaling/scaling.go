// Package scaling computes how many replicas a queue needs from readings
// of the queue (SQS's approximate counts) and of one replica (its measured
// capacity): the pure arithmetic behind a Consumer's scaling signal and a
// fleet's, with no clock and no I/O, so that tables can test it.
package scaling

import (
	"fmt"
	"math"
	"time"
)

// smoothing is the weight of a new reading in the smoothed counts and the
// smoothed backlog slope: half, so one odd reading moves the figure only
// half way and two readings in a row move it three quarters of the way.
const smoothing = 0.5

// arrivalSmoothing is the weight of a new reading in the smoothed
// arrival rate: a quarter, a time constant of about 4 readings (2
// minutes at 30 s), so that the noise of small in-flight counts (a count
// of 15 varies by ±4 from one reading to the next) does not reach the
// figure, which the scale-in window would then hold at its highest.
const arrivalSmoothing = 0.25

// emptyReadings is how many readings in a row must find the queue empty
// (nothing visible, in flight or delayed) before the figure may be 0
// (Policy.ScaleToZero): one empty reading may be SQS's approximation.
const emptyReadings = 2

// Policy is what the figure aims at. Every field must be valid (the
// Consumer's options check them).
type Policy struct {
	// Target is the longest acceptable wait from send to handler start.
	Target time.Duration
	// ScaleInAfter is the window the figure falls within: it is the
	// highest raw figure of the readings of the last ScaleInAfter, so it
	// rises at once and falls only after it.
	ScaleInAfter time.Duration
	// Utilization is the share (0 to 1] of a replica's measured capacity
	// the figure plans for.
	Utilization float64
	// ScaleToZero lets the figure be 0 once the queue has been empty for
	// emptyReadings readings in a row.
	ScaleToZero bool
	// CountDelayed counts delayed messages as backlog.
	CountDelayed bool
	// Min and Max clamp the figure (0: no clamp). Min never lifts a
	// figure of 0 that ScaleToZero allowed.
	Min, Max int
}

// Reading is one look at the queue and at the replica that reads it.
type Reading struct {
	At time.Time
	// SQS's approximate counts: ApproximateNumberOfMessages,
	// ApproximateNumberOfMessagesNotVisible, ApproximateNumberOfMessagesDelayed.
	Visible, InFlight, Delayed int64
	// Capacity is how many messages a second one replica finishes when
	// never starved (its slots over their mean hold time); 0, negative or
	// +Inf when not measured yet.
	Capacity float64
	// MeanInFlight is the time SQS counts messages as not visible per
	// handler run at the replica (from each receive to the answer of the
	// delete or release that ended it, retry visibility and messages
	// handed back unstarted included), so that InFlight / MeanInFlight is
	// the rate of runs; 0 when not measured.
	MeanInFlight time.Duration
}

// Figure is the outcome of a reading.
type Figure struct {
	// Known is false when the figure cannot be computed yet; Reason says
	// why, and Replicas is then the last known figure (0 if none).
	Known  bool
	Reason string
	// Replicas is the figure: replicas the queue needs, after the
	// scale-in window and the clamps.
	Replicas int
	// Raw is this reading's figure before rounding, the window and the
	// clamps: Demand / (Capacity × Utilization).
	Raw float64
	// The smoothed counts.
	Visible, InFlight, Delayed float64
	// ArrivalRate is the inferred rate at which messages reach the queue
	// (messages a second): the whole queue's departures (in flight over
	// the mean time in flight) plus the backlog's growth, smoothed.
	ArrivalRate float64
	// Demand is the rate the replicas must finish (messages a second) to
	// keep up and start the backlog within Target: ArrivalRate + backlog
	// / Target.
	Demand float64
	// Capacity is the reading's per-replica capacity (messages a second).
	Capacity float64
	At       time.Time
}

// Signal turns readings into figures. It keeps the smoothed counts, the
// slope and the scale-in window between readings. Not safe for concurrent
// use: its owner serialises Update.
type Signal struct {
	p    Policy
	n    int // readings so far
	vis  float64
	infl float64
	del  float64
	// arrivals is the smoothed arrival rate, messages a second.
	arrivals    float64
	prevVisible int64 // the last reading's visible count
	prevAt      time.Time
	empty       int  // readings in a row that found the queue empty
	hold        Hold // raw figures (rounded up) of the last ScaleInAfter
	last        Figure
}

// NewSignal returns a Signal for p.
func NewSignal(p Policy) *Signal { return &Signal{p: p} }

// Peek returns the figure Update would return for r, without changing
// s: for a figure between readings (a capacity just measured) that must
// not count as one more reading in the smoothing and the window.
func (s *Signal) Peek(r Reading) Figure {
	c := *s
	c.hold.points = append([]point(nil), s.hold.points...)
	return c.Update(r)
}

// Hold is the highest of the figures added within a window: it rises at
// once and falls only when a figure has been out of the window for
// Window. The zero value holds for no time (the latest figure). Not safe
// for concurrent use.
type Hold struct {
	Window time.Duration
	points []point
}

type point struct {
	at time.Time
	n  int
}

// Add adds figure n taken at at (not before the previous one's) and
// returns the highest figure of the window ending at at.
func (h *Hold) Add(at time.Time, n int) int {
	h.points = append(h.points, point{at, n})
	cut := 0
	for cut < len(h.points)-1 && at.Sub(h.points[cut].at) >= h.Window {
		cut++
	}
	h.points = h.points[cut:]
	high := 0
	for _, p := range h.points {
		high = max(high, p.n)
	}
	return high
}

// Reset forgets every figure.
func (h *Hold) Reset() { h.points = h.points[:0] }

// Update takes one reading and returns the figure.
func (s *Signal) Update(r Reading) Figure {
	growth := 0.0 // the visible count's growth since the last reading, messages a second
	if s.n == 0 {
		s.vis, s.infl, s.del = float64(r.Visible), float64(r.InFlight), float64(r.Delayed)
	} else {
		follow(&s.vis, r.Visible)
		s.infl += smoothing * (float64(r.InFlight) - s.infl)
		follow(&s.del, r.Delayed)
		if dt := r.At.Sub(s.prevAt).Seconds(); dt > 0 {
			growth = float64(r.Visible-s.prevVisible) / dt
		}
	}
	s.n++
	s.prevAt, s.prevVisible = r.At, r.Visible
	if r.Visible == 0 && r.InFlight == 0 && r.Delayed == 0 {
		s.empty++
	} else {
		s.empty = 0
	}

	f := Figure{Visible: s.vis, InFlight: s.infl, Delayed: s.del, Capacity: r.Capacity, At: r.At}
	backlog := s.vis
	if s.p.CountDelayed {
		backlog += s.del
	}
	zeroOK := s.p.ScaleToZero && s.empty >= emptyReadings
	var steady float64 // the replicas the arrivals alone need
	measured := r.Capacity > 0 && !math.IsInf(r.Capacity, 1) && r.MeanInFlight > 0
	switch {
	case measured:
		// Arrivals are departures (the whole queue's, by Little's law:
		// messages in flight over their mean time in flight) plus the
		// backlog's growth, both from this reading's raw counts, which
		// move together (a drain raises one and lowers the other). Noisy
		// where few messages are in flight, the sum is smoothed over some
		// minutes; a rise of load shows at once in the backlog's share.
		arrival := float64(r.InFlight)/r.MeanInFlight.Seconds() + growth
		if s.arrivals == 0 {
			s.arrivals = arrival
		} else {
			s.arrivals += arrivalSmoothing * (arrival - s.arrivals)
		}
		f.ArrivalRate = max(0, s.arrivals)
		f.Demand = f.ArrivalRate + backlog/s.p.Target.Seconds()
		per := r.Capacity * s.p.Utilization
		f.Raw = f.Demand / per
		steady = f.ArrivalRate / per
	case s.empty > 0:
		// Nothing to do and nothing measured: the floor is the answer.
	default:
		// The last known figure stands (carried by unknown ones).
		f.Replicas, f.Reason = s.last.Replicas, "no completions measured yet: one replica's capacity is unknown"
		s.last = f
		return f
	}
	need := int(math.Ceil(f.Raw - 1e-9))
	switch {
	case zeroOK:
		need = 0 // the raw counts, not the smoothed ones, say the queue is empty
	default:
		need = max(need, 1) // never 0 while anything is, or may soon be, there
	}
	// The arrivals' figure is held for ScaleInAfter: it is what noise in
	// the counts makes go up and down. The backlog's share is not: once
	// the backlog is started, the replicas that drained it are not needed.
	s.hold.Window = s.p.ScaleInAfter
	f.Replicas = max(need, s.hold.Add(r.At, max(int(math.Ceil(steady-1e-9)), 1)))
	if l := s.last.Replicas; s.last.Known && l > 0 && f.Replicas != l && abs(f.Replicas-l)*10 <= l {
		// Within a tenth of the last figure: not worth a change (the
		// Kubernetes autoscaler's tolerance is a tenth too).
		f.Replicas = l
	}
	if zeroOK {
		// An empty queue ends the window and the smoothing: what they
		// held was for work that is gone.
		f.Replicas = 0
		s.hold.Reset()
		s.vis, s.infl, s.del, s.arrivals = 0, 0, 0, 0
	}
	if f.Replicas > 0 && s.p.Min > 0 {
		f.Replicas = max(f.Replicas, s.p.Min)
	}
	if s.p.Max > 0 {
		f.Replicas = min(f.Replicas, s.p.Max)
	}
	f.Known = true
	s.last = f
	return f
}

// follow moves a smoothed count toward the reading v: at once when v is
// higher (a backlog that grows must be seen at once), by half otherwise
// (a count that falls may be SQS's approximation).
func follow(cur *float64, v int64) {
	if f := float64(v); f > *cur {
		*cur = f
	} else {
		*cur += smoothing * (f - *cur)
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// Check reports what is wrong with p, naming the field, or nil.
func (p Policy) Check() error {
	switch {
	case p.Target <= 0:
		return fmt.Errorf("policy: Target %v: must be positive (the longest acceptable wait from send to handler start)", p.Target)
	case p.ScaleInAfter < 0:
		return fmt.Errorf("policy: ScaleInAfter %v: must not be negative", p.ScaleInAfter)
	case !(p.Utilization > 0 && p.Utilization <= 1):
		return fmt.Errorf("policy: Utilization %v: must be in (0, 1]", p.Utilization)
	case p.Min < 0 || p.Max < 0:
		return fmt.Errorf("policy: Min %d, Max %d: must not be negative", p.Min, p.Max)
	case p.Max > 0 && p.Min > p.Max:
		return fmt.Errorf("policy: Min %d above Max %d", p.Min, p.Max)
	}
	return nil
}

// Queue is one queue's known figure, as a fleet adds them up (Process).
type Queue struct {
	Replicas int           // the queue's own figure
	Demand   float64       // messages a second its replicas must finish
	SlotTime time.Duration // mean time a message holds one of its slots
	// Utilization is the queue's policy's.
	Utilization float64
}

// Process returns the replicas of a process whose queues share a budget
// of handler slots: the slots the queues' demand keeps busy (Σ Demand ×
// SlotTime, Little's law) over the budget times the lowest utilization,
// never below the highest queue's own figure (a queue gets no more slots
// in a replica than its own concurrency). It also returns the slots.
func Process(queues []Queue, budget int) (replicas int, slots float64) {
	util := 1.0
	for _, q := range queues {
		slots += q.Demand * q.SlotTime.Seconds()
		util = min(util, q.Utilization)
		replicas = max(replicas, q.Replicas)
	}
	if budget > 0 {
		replicas = max(replicas, int(math.Ceil(slots/(float64(budget)*util)-1e-9)))
	}
	return replicas, slots
}

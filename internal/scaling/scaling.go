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
	// MeanInFlight is the mean time a message stays in flight (from its
	// receive to its settlement) at the replica; 0 when not measured.
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
	// the mean time in flight) plus the backlog's smoothed slope.
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
	p      Policy
	n      int // readings so far
	vis    float64
	infl   float64
	del    float64
	slope  float64 // smoothed d(visible)/dt, messages a second
	prevAt time.Time
	empty  int     // readings in a row that found the queue empty
	window []point // raw figures (rounded up) of the last ScaleInAfter
	last   Figure
}

type point struct {
	at time.Time
	n  int
}

// NewSignal returns a Signal for p.
func NewSignal(p Policy) *Signal { return &Signal{p: p} }

// Update takes one reading and returns the figure.
func (s *Signal) Update(r Reading) Figure {
	if s.n == 0 {
		s.vis, s.infl, s.del = float64(r.Visible), float64(r.InFlight), float64(r.Delayed)
	} else {
		prev := s.vis
		s.vis += smoothing * (float64(r.Visible) - s.vis)
		s.infl += smoothing * (float64(r.InFlight) - s.infl)
		s.del += smoothing * (float64(r.Delayed) - s.del)
		if dt := r.At.Sub(s.prevAt).Seconds(); dt > 0 {
			s.slope += smoothing * ((s.vis-prev)/dt - s.slope)
		}
	}
	s.n++
	s.prevAt = r.At
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
	measured := r.Capacity > 0 && !math.IsInf(r.Capacity, 1) && r.MeanInFlight > 0
	switch {
	case measured:
		departures := s.infl / r.MeanInFlight.Seconds()
		f.ArrivalRate = max(0, departures+s.slope)
		f.Demand = f.ArrivalRate + backlog/s.p.Target.Seconds()
		f.Raw = f.Demand / (r.Capacity * s.p.Utilization)
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
	s.window = append(s.window, point{r.At, need})
	cut := 0
	for cut < len(s.window)-1 && r.At.Sub(s.window[cut].at) >= s.p.ScaleInAfter {
		cut++
	}
	s.window = s.window[cut:]
	for _, p := range s.window {
		f.Replicas = max(f.Replicas, p.n)
	}
	if zeroOK {
		// An empty queue ends the window: what it held was for work
		// that is gone.
		f.Replicas, s.window = 0, s.window[len(s.window)-1:]
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

// Last returns the latest figure (the zero Figure before any reading).
func (s *Signal) Last() Figure { return s.last }

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

package scalesim

import (
	"fmt"
	"math"
	"time"
)

// Trace is a load over virtual time, at full scale: the rate producers send at,
// bursts sent all at once, and how much slower than usual handlers run. A Trace is a
// value with pure functions; it is safe for concurrent use.
type Trace struct {
	// Name identifies the trace in results and tables.
	Name string
	// Duration is how long the producers send, from the start of the run.
	// Replica-minutes are counted over it; after it the run lasts until every
	// message sent was handled.
	Duration time.Duration
	// Rate is the arrival rate in messages per second at virtual time at (since the
	// start of the run). Nil means no steady arrivals.
	Rate func(at time.Duration) float64
	// Bursts are batches of messages sent in one instant.
	Bursts []Burst
	// Slowdown is the factor handler times are multiplied by at virtual time at;
	// nil means 1 throughout.
	Slowdown func(at time.Duration) float64
	// Steady is the window judged as steady state: after the trace's transient
	// (for a step, three of the longest start delays after it) and until Duration.
	// Waits of messages sent in it make SteadyP99.
	Steady Window
	// ReplicasWindow is the part of Steady in which the replica count is compared
	// with the fewest that meet the target: once a scale-in could have happened
	// (the signal's scale-in window and the autoscaler's cooldown have passed).
	ReplicasWindow Window
	// Need is the load the fewest replicas must carry in steady state, in messages
	// per second at normal handler speed: the peak rate, times the slowdown where
	// the peak is slowed. For a burst it is the burst's size divided by the target
	// wait (all of it started within the target).
	Need func(target time.Duration) float64
	// Steps counts the changes of load the trace makes: the reversals of a policy
	// that follows the load without flapping are at most Steps.
	Steps int
}

// Burst is N messages sent at virtual time At.
type Burst struct {
	At time.Duration
	N  int
}

// Window is a span of virtual time since the start of a run, [From, To).
type Window struct{ From, To time.Duration }

// Contains reports whether at is in [From, To).
func (w Window) Contains(at time.Duration) bool { return at >= w.From && at < w.To }

// Transient is the settling time after a change of load that the steady-state
// assertions skip: three of the longest start delays (DefaultStartDelayMax), the
// time the autoscaler needs for a decision, a replica's start, and the drain of
// what piled up meanwhile.
const Transient = 3 * DefaultStartDelayMax

// settle is how long after a scale-out the replica count may still be high: the
// signal's scale-in window (5 min) plus the autoscaler's cooldown (5 min).
const settle = 10 * time.Minute

// Step is a step from low to high messages per second at virtual time at; the run
// lasts length after it.
func Step(low, high float64, at, length time.Duration) Trace {
	end := at + length
	return Trace{
		Name:     "step",
		Duration: end,
		Rate: func(t time.Duration) float64 {
			if t < at {
				return low
			}
			return high
		},
		Steady:         Window{at + Transient, end},
		ReplicasWindow: Window{min(at+settle+Transient, end-5*time.Minute), end},
		Need:           func(time.Duration) float64 { return high },
		Steps:          1,
	}
}

// Ramp is a daily cycle compressed into period: the rate rises from low to high and
// back along a cosine, (low+high)/2 - (high-low)/2·cos(2πt/period), over one period.
func Ramp(low, high float64, period time.Duration) Trace {
	return Trace{
		Name:     "ramp",
		Duration: period,
		Rate: func(t time.Duration) float64 {
			return (low+high)/2 - (high-low)/2*math.Cos(2*math.Pi*float64(t)/float64(period))
		},
		Steady:         Window{Transient, period},
		ReplicasWindow: Window{period/2 - period/20, period/2 + period/20},
		Need:           func(time.Duration) float64 { return high },
		Steps:          2,
	}
}

// BurstOnIdle sends n messages at virtual time at on an idle queue; the run lasts
// length after it.
func BurstOnIdle(n int, at, length time.Duration) Trace {
	return Trace{
		Name:     "burst",
		Duration: at + length,
		Bursts:   []Burst{{At: at, N: n}},
		// Every message belongs to the burst: its waits are the whole run's.
		Steady:         Window{0, at + length},
		ReplicasWindow: Window{at + length - 5*time.Minute, at + length},
		Need: func(target time.Duration) float64 {
			return float64(n) / target.Seconds()
		},
		Steps: 2,
	}
}

// Slow holds rate messages per second while handlers take factor times as long
// from at for length; the run lasts tail after that.
func Slow(rate, factor float64, at, length, tail time.Duration) Trace {
	return Trace{
		Name:     "slow",
		Duration: at + length + tail,
		Rate:     func(time.Duration) float64 { return rate },
		Slowdown: func(t time.Duration) float64 {
			if t >= at && t < at+length {
				return factor
			}
			return 1
		},
		Steady:         Window{Transient, at + length + tail},
		ReplicasWindow: Window{at + Transient, at + length},
		Need:           func(time.Duration) float64 { return rate * factor },
		Steps:          2,
	}
}

// Idle holds rate messages per second until at, then nothing for length.
func Idle(rate float64, at, length time.Duration) Trace {
	return Trace{
		Name:     "idle",
		Duration: at + length,
		Rate: func(t time.Duration) float64 {
			if t < at {
				return rate
			}
			return 0
		},
		Steady:         Window{Transient, at},
		ReplicasWindow: Window{at - 5*time.Minute, at},
		Need:           func(time.Duration) float64 { return rate },
		Steps:          1,
	}
}

// Names of the standard traces, in the order of the README's table.
var Names = []string{"step", "ramp", "burst", "slow", "idle"}

// Standard returns the named trace of issue 26 at full scale:
//
//   - step: 20 msg/s for 10 min, then 2,000 msg/s for 30 min;
//   - ramp: a day compressed into 1 h, 200 to 2,000 msg/s and back along a cosine;
//   - burst: 100,000 messages at minute 1 on an idle queue, 30 min in all;
//   - slow: 1,000 msg/s for 40 min, handlers 2× slower from minute 10 to 20;
//   - idle: 1,000 msg/s for 15 min, then nothing for 20 min.
func Standard(name string) (Trace, error) {
	switch name {
	case "step":
		return Step(20, 2000, 10*time.Minute, 30*time.Minute), nil
	case "ramp":
		return Ramp(200, 2000, time.Hour), nil
	case "burst":
		return BurstOnIdle(100_000, time.Minute, 29*time.Minute), nil
	case "slow":
		return Slow(1000, 2, 10*time.Minute, 10*time.Minute, 20*time.Minute), nil
	case "idle":
		return Idle(1000, 15*time.Minute, 20*time.Minute), nil
	}
	return Trace{}, fmt.Errorf("scalesim: unknown trace %q (known: %v)", name, Names)
}

package scalesim

import (
	"errors"
	"testing"
	"time"
)

// StepInput is a step from ArrivalAvg to ArrivalPeak run with the inputs a capacity
// plan takes (doctor.PlanInput's), so that the plan and the simulation can be
// compared on the same figures. Rates are full-scale messages per second.
type StepInput struct {
	// HandlerP50 and HandlerP99 define the lognormal handler time. Required.
	HandlerP50, HandlerP99 time.Duration
	// ArrivalAvg is the rate before the step, ArrivalPeak after it;
	// 0 <= ArrivalAvg <= ArrivalPeak, ArrivalPeak > 0.
	ArrivalAvg, ArrivalPeak float64
	// Target is the longest acceptable wait. Required.
	Target time.Duration
	// Concurrency is each replica's slots at full scale; Scale divides it and
	// the rates (see Config.Scale). Concurrency required; Scale default 1.
	Concurrency, Scale int
	// Policy decides the replicas. Required.
	Policy Policy
	// Before and After are the spans before and after the step. Defaults 5 min
	// (time for the replicas to measure their capacity) and 20 min.
	Before, After time.Duration
	// Seed seeds the run.
	Seed uint64
}

// StepTrace is the step MeasureStep runs for in.
func StepTrace(in StepInput) Trace {
	before, after := in.Before, in.After
	if before == 0 {
		before = 5 * time.Minute
	}
	if after == 0 {
		after = 20 * time.Minute
	}
	return Step(in.ArrivalAvg, in.ArrivalPeak, before, after)
}

// MeasureStep runs StepTrace(in) in a synctest bubble of its own (t must not be in
// one). After the transient, the Result's SteadyMaxReplicas are the most replicas
// in the trace's ReplicasWindow (from the step + 13 min: the transient, the
// signal's scale-in window and the autoscaler's cooldown) and its SettledP99 the
// p99 wait of the messages sent in that window.
func MeasureStep(t *testing.T, in StepInput) (*Result, error) {
	if in.HandlerP50 <= 0 || in.Target <= 0 || in.Concurrency <= 0 {
		return nil, errors.New("scalesim: StepInput needs HandlerP50, Target and Concurrency > 0")
	}
	if in.ArrivalAvg < 0 || in.ArrivalPeak <= 0 || in.ArrivalAvg > in.ArrivalPeak {
		return nil, errors.New("scalesim: StepInput needs 0 <= ArrivalAvg <= ArrivalPeak and ArrivalPeak > 0")
	}
	return Run(t, Config{
		Trace: StepTrace(in), Policy: in.Policy, Target: in.Target,
		HandlerP50: in.HandlerP50, HandlerP99: in.HandlerP99,
		Concurrency: in.Concurrency, Scale: in.Scale, Seed: in.Seed,
	})
}

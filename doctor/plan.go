package doctor

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/internal/scaling"
)

// Defaults of PlanInput: a zero field takes the default named after it.
const (
	// DefaultPlanBatchSize is the receive batch size: SQS's maximum, 10.
	DefaultPlanBatchSize = 10
	// DefaultPlanWaitTime is the long-poll wait: SQS's maximum, 20 s.
	DefaultPlanWaitTime = 20 * time.Second
	// DefaultPlanScalingInterval is how often each replica reads
	// GetQueueAttributes for the scaling signal (sqsconsumer's
	// ScalingPolicy.Interval default): 30 s.
	DefaultPlanScalingInterval = sqsconsumer.DefaultScalingInterval
	// DefaultPlanUtilization is the share of a replica's measured capacity
	// planned for: sqsconsumer's ScalingPolicy default,
	// DefaultScalingUtilization (0.9).
	DefaultPlanUtilization = sqsconsumer.DefaultScalingUtilization
	// DefaultPlanHandOff is the receive round trip: how long SQS takes to
	// hand a message to a waiting long poll and the answer to reach the
	// consumer, and the gap between one receive's answer and the next
	// receive reaching SQS. 20 ms is a typical in-region round trip.
	DefaultPlanHandOff = 20 * time.Millisecond
	// DefaultPlanMaxReceiveCount is the redrive policy's maxReceiveCount
	// when none is given: 5, enough for a few transient failures, well
	// above the 1 that CheckMaxReceiveCount warns about.
	DefaultPlanMaxReceiveCount = 5
	// DefaultPlanDecisionPeriod is how often the autoscaler decides:
	// every 60 s, as ECS service auto scaling's target tracking does with
	// one-minute CloudWatch metrics.
	DefaultPlanDecisionPeriod = time.Minute
	// DefaultPlanStartDelay is how long a replica the autoscaler starts
	// takes to serve: 45 s, the middle of the 30–60 s a container usually
	// takes to be placed, pulled and started.
	DefaultPlanStartDelay = 45 * time.Second
	// DefaultPlanScaleInAfter is how long the signal holds its highest
	// figure before it falls (sqsconsumer's ScalingPolicy.ScaleInAfter
	// default): 5 minutes.
	DefaultPlanScaleInAfter = sqsconsumer.DefaultScaleInAfter
	// DefaultPlanScaleInCooldown is how long the autoscaler waits after a
	// scaling activity before it scales in: 300 s, ECS target tracking's
	// default ScaleInCooldown.
	DefaultPlanScaleInCooldown = 5 * time.Minute
	// PlanDLQRetention is the dead-letter queue's retention the plan
	// gives: SQS's maximum, 14 days, so that it is longer than the
	// source's (CheckDLQRetention).
	PlanDLQRetention = 14 * 24 * time.Hour
	// PlanMaxRetention is the longest source retention the plan chooses:
	// 13 days, a day below the DLQ's.
	PlanMaxRetention = 13 * 24 * time.Hour
	// PlanMonth is the month the request counts are for: 730 hours, the
	// month of AWS's pricing calculator.
	PlanMonth = 730 * time.Hour
	// ListPriceStandard and ListPriceFIFO are AWS's published list prices
	// per million requests for standard and FIFO queues in us-east-1's
	// first tier (https://aws.amazon.com/sqs/pricing/), in US dollars.
	ListPriceStandard = 0.40
	ListPriceFIFO     = 0.50
	// FreeTierRequests is how many requests a month AWS's free tier
	// leaves free per account, for all its queues together.
	FreeTierRequests = 1_000_000
	// BillingChunk is the payload SQS bills as one request: 64 KiB; a
	// call carrying a 256 KiB payload is billed as 4 requests.
	BillingChunk = 64 * 1024
	// coalesceWindow is how long a Consumer waits for more deletes or
	// visibility changes before it sends a partial batch (calls.go).
	coalesceWindow = 25 * time.Millisecond
	// z99 is the standard normal's 0.99 quantile.
	z99 = 2.3263478740408408
	// maxServers bounds replicas × concurrency in the queueing model.
	maxServers = 10_000_000
)

// PlanInput is what Plan plans for. Rates are in messages per second for
// the whole queue; durations must not be negative. A zero field takes the
// default its doc names, so a PlanInput needs only the handler times, the
// rates, the target and the concurrency. The step-transient model's
// parameters (DecisionPeriod, StartDelay, DecisionLag, ScaleInAfter,
// ScaleInCooldown) are fields so that a simulation can pass its own.
type PlanInput struct {
	// HandlerP50 and HandlerP99 are the handler's median and 99th
	// percentile time, handler start to return (sqsconsumer's
	// Stats.HandlerP50 and HandlerP99). Required: 0 < P50 <= P99.
	HandlerP50, HandlerP99 time.Duration
	// HandlerMean is the mean handler time. 0: estimated from P50 and P99
	// as a lognormal's mean, P50 × exp(σ²/2) with σ = ln(P99/P50) / 2.326
	// (CapacityPlan.MeanEstimated says so).
	HandlerMean time.Duration
	// HoldP99 is the p99 of the time a message is held, receive to
	// settle (sqsconsumer's Stats.P99), which the lease must cover. 0:
	// HandlerP99.
	HoldP99 time.Duration
	// ArrivalAvg and ArrivalPeak are the average and peak arrival rates,
	// msg/s: 0 <= ArrivalAvg <= ArrivalPeak. The month's requests are for
	// ArrivalAvg all month.
	ArrivalAvg, ArrivalPeak float64
	// Target is the longest acceptable p99 wait from send to handler
	// start (sqsconsumer's ScalingPolicy.Target). Required, > 0.
	Target time.Duration
	// Concurrency is each replica's handler slots. Required, >= 1.
	Concurrency int
	// FIFO plans for a FIFO queue: its list price. Group order is not
	// modelled (the plan assumes enough groups to keep every slot busy).
	FIFO bool
	// MessageSize is the mean message size in bytes, for SQS's billing in
	// 64 KiB chunks. 0: small messages (one chunk per call). At most 1 MiB.
	MessageSize int
	// BatchSize is the receive batch size, 1 to 10. 0: 10.
	BatchSize int
	// WaitTime is the long-poll wait, 1 s to 20 s. 0: 20 s. Short polling
	// is not modelled (CheckLongPolling warns against it).
	WaitTime time.Duration
	// ScalingInterval is how often each replica calls GetQueueAttributes
	// for the signal. 0: 30 s.
	ScalingInterval time.Duration
	// Utilization is the share of capacity planned for, in (0, 1]. 0: 0.9
	// (DefaultPlanUtilization).
	Utilization float64
	// PricePerMillion is the price per million requests, US dollars. 0:
	// ListPriceStandard, or ListPriceFIFO for a FIFO queue.
	PricePerMillion float64
	// HandOff is the receive round trip (see DefaultPlanHandOff), added
	// to every wait and used to estimate batch fills. 0: 20 ms. A model of
	// virtual time, where calls take no time, passes time.Nanosecond.
	HandOff time.Duration
	// BatchFill is the mean number of messages per non-empty receive, 1 to
	// BatchSize, as measured (InputFromStats). 0: estimated (see
	// CapacityPlan.Requests).
	BatchFill float64
	// DeleteFill is the mean number of deletes per delete call, 1 to 10, as
	// measured. 0: estimated.
	DeleteFill float64
	// BatchFillSource and DeleteFillSource say where a given BatchFill and
	// DeleteFill come from, for the plan's explanation of its bill
	// (InputFromStats sets them; "" says "given"). Unused for estimated
	// fills, which the plan explains itself.
	BatchFillSource, DeleteFillSource string
	// RenewalsPerMessage is the mean number of lease renewals per message,
	// as measured (sqsconsumer's Stats.RenewalsPerMessage). 0: estimated
	// from the lognormal handler times and the lease.
	RenewalsPerMessage float64
	// MaxReceiveCount is the redrive policy's maxReceiveCount, 1 to 1000.
	// 0: 5.
	MaxReceiveCount int
	// Retention is the source queue's MessageRetentionPeriod, 60 s to 14
	// days. 0: chosen (the shortest whole number of days from 4 that keeps
	// the time to DLQ under a quarter of it, at most 13 days).
	Retention time.Duration
	// DecisionPeriod is how often the autoscaler decides. 0: 60 s.
	DecisionPeriod time.Duration
	// StartDelay is how long a new replica takes to serve. 0: 45 s.
	StartDelay time.Duration
	// DecisionLag is the time from the step to the first decision that
	// sees it. 0: ScalingInterval + DecisionPeriod, the worst phase (the
	// step lands just after a reading, which lands just after a decision).
	DecisionLag time.Duration
	// ScaleInAfter is how long the signal holds its highest figure. 0: 5 min.
	ScaleInAfter time.Duration
	// ScaleInCooldown is how long the autoscaler waits after any scaling
	// activity before it scales in. 0: 5 min.
	ScaleInCooldown time.Duration
	// StepWindow is the span after the step whose arrivals the step's p99
	// wait is taken over. 0: until the backlog has drained (at least until
	// the first new replicas serve).
	StepWindow time.Duration
}

// InputError names one bad field of a PlanInput. Plan returns them
// joined on one line ("; "), so errors.As finds the first and a command can
// map Field to its flag.
type InputError struct {
	Field   string // the PlanInput field, e.g. "HandlerP99"
	Problem string // e.g. "1s is below HandlerP50 (2s)"
}

func (e *InputError) Error() string { return "doctor: plan: " + e.Field + " " + e.Problem }

// InputErrors returns the InputErrors in err (as Plan returns them).
func InputErrors(err error) []*InputError {
	var out []*InputError
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(*InputError); ok {
			out = append(out, e)
			return
		}
		switch j := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range j.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(j.Unwrap())
		}
	}
	walk(err)
	return out
}

// CapacityPlan is what Plan derives. Durations are exact (not rounded for
// display); rates are msg/s; counts are per PlanMonth.
type CapacityPlan struct {
	// Input is the input with every default filled in.
	Input PlanInput
	// MeanEstimated is true when Input.HandlerMean was estimated from the
	// percentiles (lognormal) rather than given.
	MeanEstimated bool
	// Sigma is the lognormal's σ fitted to HandlerP50 and HandlerP99, and
	// ServiceSCV the squared coefficient of variation of handler time it
	// implies, exp(σ²) − 1 (0 for constant work, 1 like exponential).
	Sigma, ServiceSCV float64
	// CapacityPerReplica is what one replica's slots finish when never
	// starved: Concurrency / HandlerMean, msg/s (the signal's figure).
	CapacityPerReplica float64
	// Average and Peak are the steady states at the two rates.
	Average, Peak Load
	// Step is the transient of a step from ArrivalAvg to ArrivalPeak.
	Step StepPlan
	// Lease is the visibility timeout, heartbeat and dead-letter settings.
	Lease LeasePlan
	// Requests are the month's SQS requests by action and their cost.
	Requests Cost
	// Findings are Analyze's on the planned queue and DLQ: the plan's own
	// settings judged by sqsdoctor's rules (warnings appear only when an
	// input, such as a long Retention, forces them).
	Findings []Finding
	// Notes say what the plan could not meet, plainly.
	Notes []string
}

// Load is the plan for one steady arrival rate.
type Load struct {
	// Rate is the arrival rate, msg/s.
	Rate float64
	// Replicas is the signal's figure for the rate with an empty queue:
	// ceil(Rate / (CapacityPerReplica × Utilization)), at least 1.
	Replicas int
	// P99Wait is the predicted p99 wait from send to handler start at
	// Replicas: the queueing model's p99 (see Plan) plus HandOff; the
	// longest time.Duration when the slots cannot keep up (Utilization 1
	// at an exact quotient: the queue is not stable).
	P99Wait time.Duration
	// WaitProbability is the share of messages that find every slot busy
	// (Erlang C).
	WaitProbability float64
	// MeetsTarget reports P99Wait <= Target.
	MeetsTarget bool
	// FewestReplicas is the fewest replicas whose predicted p99 wait meets
	// the target (0 when none can: the target is below HandOff).
	FewestReplicas int
	// Busy is the share of slots busy at Replicas: Rate × HandlerMean /
	// (Replicas × Concurrency).
	Busy float64
}

// StepPlan is the fluid model of a step from ArrivalAvg to ArrivalPeak at
// time 0, with Average.Replicas serving. See Plan.
type StepPlan struct {
	// FirstDecision is when the first decision that sees the step is made
	// (Input.DecisionLag), and FirstServing when the replicas it starts
	// serve (+ StartDelay). Both are measured from the step.
	FirstDecision, FirstServing time.Duration
	// MaxReplicas is the most replicas asked for during the transient
	// (above Peak.Replicas while a backlog is drained).
	MaxReplicas int
	// PeakBacklog is the most messages waiting, and Drained when the
	// backlog is gone (0 when none builds up).
	PeakBacklog float64
	Drained     time.Duration
	// MaxWait is the longest wait of a message sent during the transient,
	// HandOff included.
	MaxWait time.Duration
	// P99Wait is the p99 wait, HandOff included, of the messages sent in
	// the first Window after the step.
	P99Wait time.Duration
	Window  time.Duration
	// Settled is when the replicas are back at Peak.Replicas (the hold
	// and the cooldown passed), and ReplicaMinutes the replica-minutes
	// served from the step to Settled.
	Settled        time.Duration
	ReplicaMinutes float64
}

// LeasePlan is the visibility and dead-letter settings the plan gives.
type LeasePlan struct {
	// VisibilityTimeout is the lease Advise and Analyze recommend for
	// HoldP99: twice the p99, rounded up as a person would configure it
	// (whole seconds, then 10 s steps above a minute), from 10 s to 12 h.
	// Heartbeat is a third of it: when the Consumer renews.
	VisibilityTimeout, Heartbeat time.Duration
	// MaxReceiveCount and TimeToDLQ = MaxReceiveCount × VisibilityTimeout.
	MaxReceiveCount int
	TimeToDLQ       time.Duration
	// Retention is the source queue's, DLQRetention the DLQ's.
	Retention, DLQRetention time.Duration
}

// Plan derives a capacity and cost plan from in. It is pure (no clock, no
// network) and safe for concurrent use; it returns InputErrors, joined,
// when in is bad.
//
// The model, and what it assumes:
//   - Handler time is lognormal through HandlerP50 and HandlerP99, with
//     mean HandlerMean when given. Arrivals are Poisson.
//   - Replicas follow the signal's formula with an empty queue,
//     ceil(rate / (Concurrency / mean × Utilization)), at least 1.
//   - The steady p99 wait treats the fleet as one queue with
//     c = replicas × Concurrency servers (SQS hands any message to any
//     free slot): Erlang C gives the share of messages that wait, and the
//     wait of those is exponential with mean (1 + SCV) / 2 / (cμ − λ),
//     Allen and Cunneen's correction of M/M/c for non-exponential work.
//     HandOff is added. FIFO group order is not modelled.
//   - The step is a fluid model: the backlog grows at ArrivalPeak minus
//     the serving capacity; the autoscaler decides first at DecisionLag,
//     then every DecisionPeriod, setting the signal's figure
//     ceil((rate + backlog / Target) / (capacity × Utilization)), held at
//     its highest for ScaleInAfter; replicas it adds serve StartDelay
//     later; it scales in only ScaleInCooldown after its last activity.
//     The signal's arrival estimate is taken to be exact at each decision.
//     A message sent while a backlog waits leaves when the capacity after
//     it has served the backlog ahead of it; one sent with none waits as
//     in the steady model at the replicas serving then.
//   - Requests are for ArrivalAvg over PlanMonth at Average.Replicas;
//     see Cost.
func Plan(in PlanInput) (*CapacityPlan, error) {
	p := &CapacityPlan{}
	if err := p.resolve(&in); err != nil {
		return nil, err
	}
	p.Input = in
	mean := in.HandlerMean.Seconds()
	p.CapacityPerReplica = float64(in.Concurrency) / mean
	var err error
	if p.Average, err = p.load(in.ArrivalAvg); err != nil {
		return nil, err
	}
	if p.Peak, err = p.load(in.ArrivalPeak); err != nil {
		return nil, err
	}
	for _, l := range []Load{p.Average, p.Peak} {
		switch {
		case l.FewestReplicas == 0:
			p.Notes = append(p.Notes, fmt.Sprintf("no replica count meets the target %s at %s msg/s: the hand-off alone takes %s", fmtDur(in.Target), fmtRate(l.Rate), fmtDur(in.HandOff)))
		case !l.MeetsTarget:
			p.Notes = append(p.Notes, fmt.Sprintf("at %s msg/s, %d replicas (utilization %s) predict a p99 wait of %s, above the target %s: %d replicas meet it; raise the signal's headroom (lower Utilization)",
				fmtRate(l.Rate), l.Replicas, sig2(in.Utilization), fmtFig(l.P99Wait), fmtDur(in.Target), l.FewestReplicas))
		}
	}
	p.Step = p.step()
	if p.Step.P99Wait > in.Target {
		p.Notes = append(p.Notes, fmt.Sprintf("during a step from %s to %s msg/s the p99 wait is %s, above the target %s, until the new replicas serve (%s after the step) and the backlog drains (%s)",
			fmtRate(in.ArrivalAvg), fmtRate(in.ArrivalPeak), fmtFig(p.Step.P99Wait), fmtDur(in.Target), fmtDur(p.Step.FirstServing), fmtFig(p.Step.Drained)))
	}
	p.lease()
	p.Requests = p.cost()
	return p, nil
}

// resolve validates in and fills in its defaults.
func (p *CapacityPlan) resolve(in *PlanInput) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &InputError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	nonNeg := func(field string, d time.Duration) bool {
		if d < 0 {
			bad(field, "%v must not be negative", d)
			return false
		}
		return true
	}
	dflt := func(field string, d *time.Duration, def time.Duration) {
		if nonNeg(field, *d) && *d == 0 {
			*d = def
		}
	}
	switch {
	case in.HandlerP50 <= 0:
		bad("HandlerP50", "%v must be positive", in.HandlerP50)
	case in.HandlerP99 <= 0:
		bad("HandlerP99", "%v must be positive", in.HandlerP99)
	case in.HandlerP99 < in.HandlerP50:
		bad("HandlerP99", "%v is below HandlerP50 (%v)", in.HandlerP99, in.HandlerP50)
	default:
		p.Sigma = math.Log(in.HandlerP99.Seconds()/in.HandlerP50.Seconds()) / z99
		p.ServiceSCV = math.Expm1(p.Sigma * p.Sigma)
		if nonNeg("HandlerMean", in.HandlerMean) && in.HandlerMean == 0 {
			in.HandlerMean = time.Duration(float64(in.HandlerP50) * math.Exp(p.Sigma*p.Sigma/2))
			p.MeanEstimated = true
		}
	}
	dflt("HoldP99", &in.HoldP99, in.HandlerP99)
	for _, r := range []struct {
		name string
		v    float64
	}{{"ArrivalAvg", in.ArrivalAvg}, {"ArrivalPeak", in.ArrivalPeak}} {
		if r.v < 0 || math.IsNaN(r.v) || math.IsInf(r.v, 0) {
			bad(r.name, "%v must be a finite rate of 0 or more msg/s", r.v)
		}
	}
	if in.ArrivalAvg >= 0 && in.ArrivalPeak < in.ArrivalAvg {
		bad("ArrivalPeak", "%v is below ArrivalAvg (%v)", in.ArrivalPeak, in.ArrivalAvg)
	}
	if in.Target <= 0 {
		bad("Target", "%v must be positive", in.Target)
	}
	if in.Concurrency < 1 {
		bad("Concurrency", "%d must be at least 1", in.Concurrency)
	}
	if in.MessageSize < 0 || in.MessageSize > 1<<20 {
		bad("MessageSize", "%d must be from 0 to 1048576 bytes", in.MessageSize)
	}
	if in.BatchSize == 0 {
		in.BatchSize = DefaultPlanBatchSize
	} else if in.BatchSize < 1 || in.BatchSize > 10 {
		bad("BatchSize", "%d must be from 1 to 10", in.BatchSize)
	}
	dflt("WaitTime", &in.WaitTime, DefaultPlanWaitTime)
	if in.WaitTime > 0 && (in.WaitTime < time.Second || in.WaitTime > 20*time.Second) {
		bad("WaitTime", "%v must be from 1s to 20s (short polling is not modelled)", in.WaitTime)
	}
	dflt("ScalingInterval", &in.ScalingInterval, DefaultPlanScalingInterval)
	switch u := in.Utilization; {
	case u == 0:
		in.Utilization = DefaultPlanUtilization
	case !(u > 0 && u <= 1):
		bad("Utilization", "%v must be above 0 and at most 1", u)
	}
	switch pr := in.PricePerMillion; {
	case pr == 0 && in.FIFO:
		in.PricePerMillion = ListPriceFIFO
	case pr == 0:
		in.PricePerMillion = ListPriceStandard
	case !(pr > 0) || math.IsInf(pr, 0):
		bad("PricePerMillion", "%v must be a positive price", pr)
	}
	dflt("HandOff", &in.HandOff, DefaultPlanHandOff)
	if f := in.BatchFill; f != 0 && !(f >= 1 && f <= float64(max(in.BatchSize, 1))) {
		bad("BatchFill", "%v must be from 1 to BatchSize (%d)", f, in.BatchSize)
	}
	if f := in.DeleteFill; f != 0 && !(f >= 1 && f <= 10) {
		bad("DeleteFill", "%v must be from 1 to 10", f)
	}
	if r := in.RenewalsPerMessage; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		bad("RenewalsPerMessage", "%v must be 0 or more", r)
	}
	if in.MaxReceiveCount == 0 {
		in.MaxReceiveCount = DefaultPlanMaxReceiveCount
	} else if in.MaxReceiveCount < 1 || in.MaxReceiveCount > 1000 {
		bad("MaxReceiveCount", "%d must be from 1 to 1000", in.MaxReceiveCount)
	}
	if nonNeg("Retention", in.Retention) && in.Retention != 0 && (in.Retention < time.Minute || in.Retention > PlanDLQRetention) {
		bad("Retention", "%v must be from 1m to 336h (14 days)", in.Retention)
	}
	dflt("DecisionPeriod", &in.DecisionPeriod, DefaultPlanDecisionPeriod)
	dflt("StartDelay", &in.StartDelay, DefaultPlanStartDelay)
	dflt("DecisionLag", &in.DecisionLag, in.ScalingInterval+in.DecisionPeriod)
	dflt("ScaleInAfter", &in.ScaleInAfter, DefaultPlanScaleInAfter)
	dflt("ScaleInCooldown", &in.ScaleInCooldown, DefaultPlanScaleInCooldown)
	nonNeg("StepWindow", in.StepWindow)
	if len(errs) == 0 && in.ArrivalPeak > 0 {
		capacity := float64(in.Concurrency) / in.HandlerMean.Seconds()
		if n := in.ArrivalPeak / (capacity * in.Utilization); n*float64(in.Concurrency) > maxServers {
			bad("ArrivalPeak", "%v needs about %.0f replicas of %d slots: more than the model's %d slots", in.ArrivalPeak, n, in.Concurrency, maxServers)
		}
	}
	return joinErrors(errs)
}

// replicasFor is the signal's figure for rate msg/s and backlog messages:
// ceil((rate + backlog/Target) / (CapacityPerReplica × Utilization)), at
// least 1. A relative tolerance of 1e-9 keeps float error from adding a
// replica to an exact quotient.
func (p *CapacityPlan) replicasFor(rate, backlog float64) int {
	in := &p.Input
	x := (rate + backlog/in.Target.Seconds()) / (p.CapacityPerReplica * in.Utilization)
	return max(1, int(math.Ceil(x*(1-1e-9))))
}

// load plans the steady state at rate.
func (p *CapacityPlan) load(rate float64) (Load, error) {
	in := &p.Input
	l := Load{Rate: rate, Replicas: p.replicasFor(rate, 0)}
	l.WaitProbability, l.P99Wait = p.steady(l.Replicas, rate)
	l.MeetsTarget = l.P99Wait <= in.Target
	l.Busy = rate / (float64(l.Replicas) * p.CapacityPerReplica)
	if in.HandOff < in.Target {
		// The fewest replicas that meet the target: at least the stable
		// minimum, found by doubling then bisection (the wait falls as
		// replicas rise).
		lo := max(1, int(math.Floor(rate/p.CapacityPerReplica))) // may be unstable
		meets := func(n int) bool { _, w := p.steady(n, rate); return w <= in.Target }
		hi := max(lo, l.Replicas)
		for !meets(hi) {
			hi *= 2
			if hi*in.Concurrency > 4*maxServers {
				return l, &InputError{Field: "Target", Problem: fmt.Sprintf("%v cannot be met at %v msg/s by any replica count the model handles", in.Target, rate)}
			}
		}
		for lo < hi {
			if mid := (lo + hi) / 2; meets(mid) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		l.FewestReplicas = hi
	}
	return l, nil
}

// steady returns the share of messages that wait for a slot and the p99
// wait, HandOff included, at n replicas and rate msg/s; a wait of
// math.MaxInt64 when the slots cannot keep up.
func (p *CapacityPlan) steady(n int, rate float64) (float64, time.Duration) {
	in := &p.Input
	c := n * in.Concurrency
	mu := 1 / in.HandlerMean.Seconds()
	if rate == 0 {
		return 0, in.HandOff
	}
	if rate >= float64(c)*mu {
		return 1, time.Duration(math.MaxInt64)
	}
	pw := erlangC(c, rate/mu)
	return pw, in.HandOff + p.waitQuantile(pw, float64(c)*mu-rate, 0.01)
}

// waitQuantile is the wait exceeded by a share tail of messages when a
// share pw of them wait, exponentially with mean (1 + SCV)/2 / slack
// (slack = cμ − λ, msg/s): 0 when pw <= tail.
func (p *CapacityPlan) waitQuantile(pw, slack, tail float64) time.Duration {
	if pw <= tail {
		return 0
	}
	theta := (1 + p.ServiceSCV) / 2 / slack
	return fromSecs(theta * math.Log(pw/tail))
}

// erlangC is the probability that an arrival waits in an M/M/c queue with
// offered load a = λ/μ < c, through the Erlang B recursion (stable for
// large c).
func erlangC(c int, a float64) float64 {
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	rho := a / float64(c)
	return b / (1 - rho*(1-b))
}

// fromSecs converts seconds to a Duration, saturating.
func fromSecs(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * 1e9)
}

// lease plans the visibility timeout and dead-letter settings, and judges
// them with Analyze.
func (p *CapacityPlan) lease() {
	in := &p.Input
	l := &p.Lease
	// The lease the checks recommend (and then judge the plan by).
	l.VisibilityTimeout = recommend(&work{p99: in.HoldP99}).lease
	l.Heartbeat = l.VisibilityTimeout / 3
	l.MaxReceiveCount = in.MaxReceiveCount
	l.TimeToDLQ = mulDur(l.VisibilityTimeout, l.MaxReceiveCount)
	l.DLQRetention = PlanDLQRetention
	l.Retention = in.Retention
	if l.Retention == 0 {
		const day = 24 * time.Hour
		l.Retention = RecommendedRetention
		for l.Retention < PlanMaxRetention && !farBelow(l.TimeToDLQ, l.Retention) {
			l.Retention += day
		}
		if !farBelow(l.TimeToDLQ, l.Retention) {
			p.Notes = append(p.Notes, fmt.Sprintf("maxReceiveCount %d × the lease %s = %s to the DLQ is not under a quarter of the longest retention the plan gives (%s): lower MaxReceiveCount",
				l.MaxReceiveCount, fmtDur(l.VisibilityTimeout), fmtDur(l.TimeToDLQ), fmtDur(l.Retention)))
		}
	}
	src := Queue{
		URL: "planned", FIFO: in.FIFO, VisibilityTimeout: l.VisibilityTimeout, RetentionPeriod: l.Retention, ReceiveWaitTime: in.WaitTime,
		Redrive: &RedrivePolicy{DeadLetterTargetARN: "planned-dlq", MaxReceiveCount: l.MaxReceiveCount},
	}
	dlq := Queue{URL: "planned-dlq", FIFO: in.FIFO, VisibilityTimeout: l.VisibilityTimeout, RetentionPeriod: l.DLQRetention, ReceiveWaitTime: in.WaitTime}
	p.Findings = Analyze(src, &dlq, Options{P99: in.HoldP99, Heartbeat: true})
	slices.SortStableFunc(p.Findings, func(x, y Finding) int { return int(y.Severity - x.Severity) })
}

// fmtRate formats a rate in msg/s with up to three significant digits.
func fmtRate(r float64) string {
	if r >= 100 {
		return strconv.FormatFloat(math.Round(r), 'f', -1, 64)
	}
	return strconv.FormatFloat(r, 'g', 3, 64)
}

// step runs the fluid model of a step from ArrivalAvg to ArrivalPeak (see
// Plan) in steps of dt, until the backlog has drained, the replicas are
// back at Peak.Replicas and the window is covered.
func (p *CapacityPlan) step() StepPlan {
	in := &p.Input
	rate := in.ArrivalPeak
	s := StepPlan{FirstDecision: in.DecisionLag, FirstServing: in.DecisionLag + in.StartDelay, MaxReplicas: p.Average.Replicas}
	dt := min(in.StartDelay, in.DecisionPeriod, in.Target).Seconds() / 100
	dt = min(max(dt, 0.001), 1)
	horizon := 48 * time.Hour.Seconds()
	if w := in.StepWindow.Seconds(); w > horizon {
		horizon = w
	}
	maxSteps := int(horizon / dt)

	type start struct {
		at float64
		n  int
	}
	// The signal holds the arrivals' figure for ScaleInAfter, not the
	// backlog's share (internal/scaling.Signal): the same hold here.
	var epoch time.Time
	hold := scaling.Hold{Window: in.ScaleInAfter}
	hold.Add(epoch, p.Average.Replicas) // the figure before the step
	var (
		pending      []start
		serving      = p.Average.Replicas
		total        = serving // serving + pending: what the autoscaler asked for
		lastActivity = math.Inf(-1)
		decide       = in.DecisionLag.Seconds()
		backlog      float64
		settled      = -1.0
		replicaSecs  float64
		// Per step: backlog and serving replicas at its start.
		backlogs []float64
		servings []int
	)
	for i := 0; i < maxSteps; i++ {
		t := float64(i) * dt
		for len(pending) > 0 && pending[0].at <= t+1e-9 {
			serving += pending[0].n
			pending = pending[1:]
		}
		if t+1e-9 >= decide {
			fig := max(p.replicasFor(rate, backlog), hold.Add(epoch.Add(fromSecs(t)), p.replicasFor(rate, 0)))
			switch {
			case fig > total:
				pending = append(pending, start{t + in.StartDelay.Seconds(), fig - total})
				total, lastActivity = fig, t
			case fig < total && t-lastActivity >= in.ScaleInCooldown.Seconds()-1e-9:
				// Scale in: cancel starts not yet serving, newest first,
				// then stop serving replicas (gracefully: their work is done).
				cut := total - fig
				for cut > 0 && len(pending) > 0 {
					last := &pending[len(pending)-1]
					k := min(cut, last.n)
					last.n -= k
					cut -= k
					if last.n == 0 {
						pending = pending[:len(pending)-1]
					}
				}
				serving -= cut
				total, lastActivity = fig, t
			}
			s.MaxReplicas = max(s.MaxReplicas, total)
			decide += in.DecisionPeriod.Seconds()
		}
		backlogs = append(backlogs, backlog)
		servings = append(servings, serving)
		if settled < 0 {
			replicaSecs += float64(total) * dt
		}
		capacity := float64(serving) * p.CapacityPerReplica
		next := max(0, backlog+(rate-capacity)*dt)
		if next == 0 && backlog > 0 {
			s.Drained = fromSecs(t + dt)
		}
		backlog = next
		s.PeakBacklog = max(s.PeakBacklog, backlog)
		if settled < 0 && t >= s.FirstServing.Seconds()-1e-9 && backlog == 0 && total == p.Peak.Replicas && serving == total {
			settled = t
		}
		window := max(in.StepWindow.Seconds(), s.FirstServing.Seconds(), s.Drained.Seconds())
		if settled >= 0 && backlog == 0 && t+dt >= window {
			break
		}
	}
	if settled < 0 {
		settled = float64(len(backlogs)) * dt
	}
	s.Settled = fromSecs(settled)
	s.ReplicaMinutes = replicaSecs / 60
	s.Window = in.StepWindow
	if s.Window == 0 {
		s.Window = max(s.FirstServing, s.Drained)
	}
	s.MaxWait, s.P99Wait = p.stepWaits(backlogs, servings, dt, s.Window)
	return s
}

// stepWaits returns the longest fluid wait and the p99 wait, HandOff
// included, of the messages sent in the first window of the step, from
// the backlog and serving replicas at the start of each step of dt
// seconds.
func (p *CapacityPlan) stepWaits(backlogs []float64, servings []int, dt float64, window time.Duration) (maxWait, p99 time.Duration) {
	in := &p.Input
	rate := in.ArrivalPeak
	n := len(backlogs)
	k := min(n, max(1, int(math.Round(window.Seconds()/dt))))
	// served[i] is the capacity served before step i: a message sent at
	// step i with backlog b ahead of it starts when served reaches
	// served[i] + b (the level rises with i, so one pointer walks it).
	served := make([]float64, n+1)
	for i := range n {
		served[i+1] = served[i] + float64(servings[i])*p.CapacityPerReplica*dt
	}
	var fluid []float64 // waits of messages sent behind a backlog, s
	steady := map[int]int{}
	j := 0
	var longest float64
	for i := range k {
		b := backlogs[i]
		c := float64(servings[i]) * p.CapacityPerReplica
		if b == 0 && rate < c {
			steady[servings[i]]++
			continue
		}
		level := served[i] + b
		j = max(j, i)
		for j < n && served[j+1] < level {
			j++
		}
		w := float64(j-i) * dt
		if j < n && servings[j] > 0 {
			w += (level - served[j]) / (float64(servings[j]) * p.CapacityPerReplica)
		}
		fluid = append(fluid, w)
		longest = max(longest, w)
	}
	type part struct{ pw, theta, share float64 }
	var parts []part
	for r, cnt := range steady {
		c := float64(r*in.Concurrency) / in.HandlerMean.Seconds()
		pw := erlangC(r*in.Concurrency, rate*in.HandlerMean.Seconds())
		parts = append(parts, part{pw, (1 + p.ServiceSCV) / 2 / (c - rate), float64(cnt) / float64(k)})
	}
	slices.Sort(fluid)
	// above(x) is the share of the window's messages that wait longer than x.
	above := func(x float64) float64 {
		m := len(fluid) - sortSearch(fluid, x)
		share := float64(m) / float64(k)
		for _, pt := range parts {
			share += pt.share * pt.pw * math.Exp(-x/pt.theta)
		}
		return share
	}
	hi := longest
	for _, pt := range parts {
		if pt.pw > 0.01*pt.share {
			hi = max(hi, pt.theta*math.Log(100*pt.pw))
		}
	}
	lo := 0.0
	if above(0) > 0.01 {
		for range 100 {
			mid := (lo + hi) / 2
			if above(mid) > 0.01 {
				lo = mid
			} else {
				hi = mid
			}
		}
	} else {
		hi = 0
	}
	return in.HandOff + fromSecs(longest), in.HandOff + fromSecs(hi)
}

// sortSearch returns the number of sorted xs at or below x.
func sortSearch(xs []float64, x float64) int {
	i, _ := slices.BinarySearchFunc(xs, x, func(a, b float64) int {
		if a <= b {
			return -1
		}
		return 1
	})
	return i
}

// String formats the plan as readable text, one section per part.
func (p *CapacityPlan) String() string {
	in := &p.Input
	var b strings.Builder
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	kind := "standard"
	if in.FIFO {
		kind = "FIFO"
	}
	mean := "mean " + fmtFig(in.HandlerMean)
	if p.MeanEstimated {
		mean += fmt.Sprintf(" (estimated: a lognormal through p50 and p99, σ %s)", sig2(p.Sigma))
	}
	pf("inputs    handler p50 %s, p99 %s, %s; %s msg/s average, %s peak; target wait %s; %d slots per replica; %s queue\n",
		fmtFig(in.HandlerP50), fmtFig(in.HandlerP99), mean, fmtRate(in.ArrivalAvg), fmtRate(in.ArrivalPeak), fmtDur(in.Target), in.Concurrency, kind)
	pf("capacity  %s msg/s per replica (%d slots / mean %s), planned at %s: %s msg/s\n\n",
		fmtRate(p.CapacityPerReplica), in.Concurrency, fmtFig(in.HandlerMean), pct(in.Utilization), fmtRate(p.CapacityPerReplica*in.Utilization))
	pf("replicas\n")
	for _, l := range []struct {
		name string
		l    Load
	}{{"average", p.Average}, {"peak", p.Peak}} {
		met := "meets the target"
		if !l.l.MeetsTarget {
			met = "ABOVE the target"
		}
		wait := fmtFig(l.l.P99Wait)
		if l.l.P99Wait == time.Duration(math.MaxInt64) {
			wait = "unbounded (the slots cannot keep up)"
		}
		pf("  %-7s  %s msg/s: %d (slots %s busy), p99 wait %s, %s; fewest that meet it: %d\n",
			l.name, fmtRate(l.l.Rate), l.l.Replicas, pct(l.l.Busy), wait, met, l.l.FewestReplicas)
	}
	s := p.Step
	pf("\nstep from %s to %s msg/s (decision every %s, first %s after the step; replicas serve %s after they are asked for)\n",
		fmtRate(in.ArrivalAvg), fmtRate(in.ArrivalPeak), fmtDur(in.DecisionPeriod), fmtDur(in.DecisionLag), fmtDur(in.StartDelay))
	if s.PeakBacklog > 0 {
		pf("  backlog peaks at %s messages; new replicas serve %s after the step, up to %d while it drains; drained %s after the step\n",
			sig3(s.PeakBacklog), fmtDur(s.FirstServing), s.MaxReplicas, fmtFig(s.Drained))
	} else {
		pf("  no backlog builds up: %d replicas keep up until the new ones serve (%s after the step)\n", p.Average.Replicas, fmtDur(s.FirstServing))
	}
	pf("  p99 wait %s (longest %s) over the messages sent in the first %s\n", fmtFig(s.P99Wait), fmtFig(s.MaxWait), fmtFig(s.Window))
	pf("  back at %d replicas %s after the step: %s replica-minutes\n\n", p.Peak.Replicas, fmtFig(s.Settled), sig3(s.ReplicaMinutes))
	l := p.Lease
	pf("lease\n")
	pf("  visibility timeout %s, heartbeat every %s (a third of the lease)\n", fmtDur(l.VisibilityTimeout), fmtFig(l.Heartbeat))
	pf("  maxReceiveCount %d: %s to the DLQ; retention %s; DLQ retention %s\n\n", l.MaxReceiveCount, fmtDur(l.TimeToDLQ), fmtDur(l.Retention), fmtDur(l.DLQRetention))
	c := p.Requests
	pf("requests a month (730h, %s messages, %s, $%s per million requests)\n", whole(c.Messages), count(int64(p.Average.Replicas), "replica"), price(in.PricePerMillion))
	reqs := func(ln CostLine) string {
		if ln.Exact {
			return whole(ln.Requests)
		}
		return sig3(ln.Requests)
	}
	for _, ln := range c.Lines {
		pf("  %-30s %14s  $%s\n", ln.Action, reqs(ln), money(ln.Dollars))
	}
	pf("  %-30s %14s  $%s", "total", sig3(c.Requests), money(c.Dollars))
	if c.Messages > 0 {
		pf(" ($%s per million messages)", dollars(c.PerMillionMessages))
	}
	pf("\n  range: $%s with full batches (%d messages per receive, 10 per delete and renewal call) to $%s with one message per call;\n"+
		"         the total above rests on the batch fills below\n", money(c.FullBatches.Dollars), in.BatchSize, money(c.SingleMessages.Dollars))
	pf("  free tier: the first %s requests a month are free per account, all queues together: at most $%s off, not deducted above\n",
		whole(FreeTierRequests), dollars(c.FreeTier))
	pf("  batch fill: %s messages per receive, %s\n", sig3(c.BatchFill), c.BatchFillBasis)
	pf("              %s deletes per delete call, %s\n", sig3(c.DeleteFill), c.DeleteFillBasis)
	renewals := "given"
	if slices.Contains(c.Estimated, "RenewalsPerMessage") {
		renewals = "estimated from the handler times and the heartbeat"
	}
	pf("  renewals per message %s (%s); %s per receive\n", sig3(c.RenewalsPerMessage), renewals, count(int64(c.ReceiveChunks), "billed request"))
	if len(p.Findings) > 0 {
		pf("\nchecks of the planned queue\n")
		for _, f := range p.Findings {
			pf("  %-5s  %-17s  %s\n", strings.ToUpper(f.Severity.String()), f.Check, f.Message)
		}
	}
	if len(p.Notes) > 0 {
		pf("\nnotes\n")
		for _, n := range p.Notes {
			pf("  %s\n", n)
		}
	}
	return b.String()
}

// sig3 formats an estimated count or figure with three significant
// digits, never padded with zeros that would read as digits: "0.0012",
// "1.42", "980", "87.7 thousand", "5.94 billion"; "<0.001" for a
// positive figure below 0.001.
func sig3(f float64) string {
	switch {
	case f <= 0:
		return "0"
	case f < 0.001:
		return "<0.001"
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'e', 2, 64), 64) // rounded to 3 digits first: 999.6 is 1.00 thousand
	if r < 1000 {
		return strconv.FormatFloat(r, 'g', 3, 64)
	}
	return scaled(r, []string{" thousand", " million", " billion", " trillion"})
}

// scaled formats r (>= 1000, rounded to three significant digits) as a
// mantissa from 1 to 999 with three digits and the name of its power of
// a thousand from names (thousand first); beyond the last name, in
// scientific notation.
func scaled(r float64, names []string) string {
	scale := 1000.0
	for _, name := range names {
		if m := r / scale; m < 1000 {
			decimals := 2
			if m >= 100 {
				decimals = 0
			} else if m >= 10 {
				decimals = 1
			}
			return strconv.FormatFloat(m, 'f', decimals, 64) + name
		}
		scale *= 1000
	}
	return strconv.FormatFloat(r, 'e', 2, 64)
}

// whole formats a count that follows from the inputs exactly, rounded to
// a whole number, with thousands separators: "87,600", "5,256,000,000".
func whole(f float64) string {
	digits := strconv.FormatFloat(math.Round(max(f, 0)), 'f', 0, 64)
	var out []byte
	for i := range len(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, digits[i])
	}
	return string(out)
}

// money formats an estimated sum of US dollars to the precision of the
// estimates behind it, three significant digits (to the cent below
// $100): "0.04", "89.41", "894", "2.38k", "1.05M"; "<0.01" for a
// positive sum below half a cent.
func money(d float64) string {
	if d < 100 {
		return dollars(d)
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(d, 'e', 2, 64), 64)
	if r < 1000 {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return scaled(r, []string{"k", "M", "B"})
}

// dollars formats US dollars to the cent; a positive figure below half
// a cent ("<0.01").
func dollars(d float64) string {
	if d > 0 && d < 0.005 {
		return "<0.01"
	}
	return strconv.FormatFloat(d, 'f', 2, 64)
}

// price formats a price per million requests: at least two decimals
// ("0.40", "0.375").
func price(d float64) string {
	s := strconv.FormatFloat(d, 'f', -1, 64)
	if i := strings.IndexByte(s, '.'); i < 0 {
		s += ".00"
	} else if len(s)-i == 2 {
		s += "0"
	}
	return s
}

// MarshalJSON writes the plan with durations in seconds (keys ending
// _seconds), rates in msg/s and money in US dollars.
func (p *CapacityPlan) MarshalJSON() ([]byte, error) {
	in := &p.Input
	sec := func(d time.Duration) float64 { return d.Seconds() }
	type load struct {
		Rate            float64 `json:"rate"`
		Replicas        int     `json:"replicas"`
		P99WaitSeconds  float64 `json:"p99_wait_seconds"`
		WaitProbability float64 `json:"wait_probability"`
		MeetsTarget     bool    `json:"meets_target"`
		FewestReplicas  int     `json:"fewest_replicas"`
		Busy            float64 `json:"busy"`
	}
	ld := func(l Load) load {
		return load{l.Rate, l.Replicas, sec(l.P99Wait), l.WaitProbability, l.MeetsTarget, l.FewestReplicas, l.Busy}
	}
	type line struct {
		Action   string  `json:"action"`
		Calls    float64 `json:"calls"`
		Requests float64 `json:"requests"`
		Dollars  float64 `json:"dollars"`
		Exact    bool    `json:"exact"`
	}
	lines := make([]line, len(p.Requests.Lines))
	for i, l := range p.Requests.Lines {
		lines[i] = line(l)
	}
	bound := func(b CostBound) map[string]float64 {
		return map[string]float64{"requests": b.Requests, "dollars": b.Dollars}
	}
	s, l, c := p.Step, p.Lease, p.Requests
	v := map[string]any{
		"input": map[string]any{
			"handler_p50_seconds": sec(in.HandlerP50), "handler_p99_seconds": sec(in.HandlerP99), "handler_mean_seconds": sec(in.HandlerMean),
			"hold_p99_seconds": sec(in.HoldP99), "arrival_avg": in.ArrivalAvg, "arrival_peak": in.ArrivalPeak, "target_seconds": sec(in.Target),
			"concurrency": in.Concurrency, "fifo": in.FIFO, "message_size": in.MessageSize, "batch_size": in.BatchSize,
			"wait_time_seconds": sec(in.WaitTime), "scaling_interval_seconds": sec(in.ScalingInterval), "utilization": in.Utilization,
			"price_per_million": in.PricePerMillion, "hand_off_seconds": sec(in.HandOff), "max_receive_count": in.MaxReceiveCount,
			"decision_period_seconds": sec(in.DecisionPeriod), "start_delay_seconds": sec(in.StartDelay), "decision_lag_seconds": sec(in.DecisionLag),
			"scale_in_after_seconds": sec(in.ScaleInAfter), "scale_in_cooldown_seconds": sec(in.ScaleInCooldown),
		},
		"mean_estimated": p.MeanEstimated, "sigma": p.Sigma, "service_scv": p.ServiceSCV,
		"capacity_per_replica": p.CapacityPerReplica,
		"average":              ld(p.Average), "peak": ld(p.Peak),
		"step": map[string]any{
			"first_decision_seconds": sec(s.FirstDecision), "first_serving_seconds": sec(s.FirstServing), "max_replicas": s.MaxReplicas,
			"peak_backlog": s.PeakBacklog, "drained_seconds": sec(s.Drained), "max_wait_seconds": sec(s.MaxWait),
			"p99_wait_seconds": sec(s.P99Wait), "window_seconds": sec(s.Window), "settled_seconds": sec(s.Settled), "replica_minutes": s.ReplicaMinutes,
		},
		"lease": map[string]any{
			"visibility_timeout_seconds": sec(l.VisibilityTimeout), "heartbeat_seconds": sec(l.Heartbeat), "max_receive_count": l.MaxReceiveCount,
			"time_to_dlq_seconds": sec(l.TimeToDLQ), "retention_seconds": sec(l.Retention), "dlq_retention_seconds": sec(l.DLQRetention),
		},
		"requests": map[string]any{
			"messages": c.Messages, "batch_fill": c.BatchFill, "delete_fill": c.DeleteFill, "renewals_per_message": c.RenewalsPerMessage,
			"estimated": nonNil(c.Estimated), "receive_chunks": c.ReceiveChunks, "lines": lines, "requests": c.Requests, "dollars": c.Dollars,
			"free_tier_dollars": c.FreeTier, "per_million_messages_dollars": c.PerMillionMessages,
			"batch_fill_basis": c.BatchFillBasis, "delete_fill_basis": c.DeleteFillBasis,
			"full_batches": bound(c.FullBatches), "single_messages": bound(c.SingleMessages),
		},
		"findings": nonNil(p.Findings),
		"notes":    nonNil(p.Notes),
	}
	return json.Marshal(v)
}

// nonNil returns s, or an empty slice for nil, so JSON has [] not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// InputFromStats starts a PlanInput from what a Consumer measured (its
// Stats, for example decoded from a running service's JSON with
// json.Unmarshal): the handler times (HandlerP50, HandlerP99,
// HandlerMean; a Stats from before they existed has only the
// receive-to-settle ones, P50/P99/Mean, an upper bound that counts the
// time a message waits in the process for a slot, and those are used
// then), the lease's p99 (Stats.P99, receive to settle), the renewals per
// message, the concurrency, and the batch fills its calls show (messages
// per non-empty receive, deletes per delete call). The caller adds the
// arrival rates and the target. It fails when nothing was processed.
func InputFromStats(st sqsconsumer.Stats) (PlanInput, error) {
	if st.Processed == 0 {
		return PlanInput{}, &InputError{Field: "Stats", Problem: "holds no processed message: nothing to plan from"}
	}
	in := PlanInput{
		HandlerP50: st.HandlerP50, HandlerP99: st.HandlerP99, HandlerMean: st.HandlerMean,
		HoldP99:            st.P99,
		RenewalsPerMessage: st.RenewalsPerMessage,
		Concurrency:        st.Concurrency,
	}
	if in.HandlerP50 <= 0 || in.HandlerP99 <= 0 {
		in.HandlerP50, in.HandlerP99, in.HandlerMean = st.P50, st.P99, st.Mean
	}
	n := st.Calls
	if full := n.Receive - n.EmptyReceive; full > 0 && st.Received > 0 {
		in.BatchFill = min(max(float64(st.Received)/float64(full), 1), float64(DefaultPlanBatchSize))
		in.BatchFillSource = fmt.Sprintf("measured by the Consumer's Stats: %s over %s",
			count(st.Received, "message"), count(full, "non-empty receive"))
	}
	if calls := n.Delete + n.DeleteBatch; calls > 0 && st.Deleted > 0 {
		in.DeleteFill = min(max(float64(st.Deleted)/float64(calls), 1), 10)
		in.DeleteFillSource = fmt.Sprintf("measured by the Consumer's Stats: %s over %s",
			count(st.Deleted, "delete"), count(calls, "delete call"))
	}
	return in, nil
}

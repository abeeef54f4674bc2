package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// constWork is a PlanInput for constant 100 ms handlers (σ = 0, SCV 0)
// on 10 slots: 100 msg/s per replica.
func constWork() PlanInput {
	return PlanInput{
		HandlerP50: 100 * time.Millisecond, HandlerP99: 100 * time.Millisecond,
		ArrivalAvg: 50, ArrivalPeak: 150, Target: time.Minute, Concurrency: 10,
	}
}

func TestPlanReplicas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		rate, u   float64
		want      int
		wantFewer int // fewest replicas meeting the target
	}{
		// 100 msg/s per replica × 0.9 = 90: 900 / 90 = 10 exactly.
		{"exact quotient", 900, 0, 10, 10},
		{"just above", 901, 0, 11, 10},
		{"idle queue", 0, 0, 1, 1},
		// 0.5 utilization: 50 msg/s planned per replica.
		{"half utilization", 150, 0.5, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := constWork()
			in.ArrivalAvg, in.ArrivalPeak, in.Utilization = tc.rate, tc.rate, tc.u
			p, err := Plan(in)
			require.NoError(t, err)
			require.Equal(t, tc.want, p.Average.Replicas, "replicas")
			require.Equal(t, tc.want, p.Peak.Replicas, "replicas at peak = average")
			require.InDelta(t, 100, p.CapacityPerReplica, 1e-9)
			require.Equal(t, tc.wantFewer, p.Average.FewestReplicas, "fewest meeting the target")
			require.True(t, p.Average.MeetsTarget)
		})
	}
}

func TestPlanMeanEstimate(t *testing.T) {
	t.Parallel()
	in := constWork()
	// σ = ln(10) / 2.3263 = 0.98979; mean = 1s × exp(σ²/2) = e^0.489836 = 1.63205 s.
	in.HandlerP50, in.HandlerP99 = time.Second, 10*time.Second
	p, err := Plan(in)
	require.NoError(t, err)
	require.True(t, p.MeanEstimated)
	require.InDelta(t, 0.989786, p.Sigma, 1e-6)
	require.InDelta(t, 1.63205, p.Input.HandlerMean.Seconds(), 1e-5)
	// SCV = e^σ² − 1 = e^0.979676 − 1 = 1.66360.
	require.InDelta(t, 1.66360, p.ServiceSCV, 1e-4)
	require.Contains(t, p.String(), "estimated: a lognormal")

	in.HandlerMean = 2 * time.Second
	p, err = Plan(in)
	require.NoError(t, err)
	require.False(t, p.MeanEstimated)
	require.Equal(t, 2*time.Second, p.Input.HandlerMean, "a given mean is used")
	require.InDelta(t, 5, p.CapacityPerReplica, 1e-9, "10 slots / 2 s")
}

func TestErlangC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    int
		a    float64
		want float64
	}{
		{1, 0.5, 0.5},       // M/M/1: P(wait) = ρ
		{2, 1, 1.0 / 3},     // B(2,1) = 0.2; C = 0.2 / (1 − 0.5 × 0.8)
		{10, 5, 0.03610536}, // tables: c = 10, a = 5
	} {
		require.InDelta(t, tc.want, erlangC(tc.c, tc.a), 1e-6, "C(%d, %v)", tc.c, tc.a)
	}
}

func TestPlanSteadyWait(t *testing.T) {
	t.Parallel()
	// One replica, one slot, constant 1 s work, 0.5 msg/s: P(wait) = 0.5,
	// conditional wait mean (1 + 0)/2 / (1 − 0.5) = 1 s (M/D/1's mean wait
	// is 0.5 s, exact), p99 = 1 s × ln(0.5 / 0.01) = 3.912 s, + 10 ms hand-off.
	in := PlanInput{HandlerP50: time.Second, HandlerP99: time.Second, ArrivalAvg: 0.5, ArrivalPeak: 0.5,
		Target: 10 * time.Second, Concurrency: 1, HandOff: 10 * time.Millisecond}
	p, err := Plan(in)
	require.NoError(t, err)
	require.Equal(t, 1, p.Average.Replicas)
	require.InDelta(t, 0.5, p.Average.WaitProbability, 1e-12)
	require.InDelta(t, 3.922023, p.Average.P99Wait.Seconds(), 1e-5)
	require.InDelta(t, 0.5, p.Average.Busy, 1e-12)

	// A target below that p99 is not met at 1 replica; 2 replicas
	// (c = 2, a = 0.5: C = 0.1, below 1 % no longer... C(2,0.5) = 0.1,
	// wait p99 = 0.5/1.5 × ln(10) = 0.768 s) meet a 1 s target.
	in.Target = time.Second
	p, err = Plan(in)
	require.NoError(t, err)
	require.False(t, p.Average.MeetsTarget)
	require.Equal(t, 2, p.Average.FewestReplicas)
	require.NotEmpty(t, p.Notes)
	require.Contains(t, p.Notes[0], "2 replicas meet it")

	// A target below the hand-off cannot be met.
	in.Target = 5 * time.Millisecond
	p, err = Plan(in)
	require.NoError(t, err)
	require.Zero(t, p.Average.FewestReplicas)
	require.Contains(t, p.Notes[0], "the hand-off alone")
}

func TestPlanStep(t *testing.T) {
	t.Parallel()
	// 100 msg/s per replica, planned at 50: 1 replica at 50 msg/s, 3 at
	// 150. Step to 150 at 0: the backlog grows at 50/s. The first decision
	// (60 s) sees 3000 messages: ceil((150 + 3000/60) / 50) = 4 replicas,
	// serving at 90 s with 4500 messages waiting, drained at 400 − 150 =
	// 250/s in 18 s (108 s). A message sent at t ≤ 60 s waits 0.5 t (its
	// backlog 50 t is served at 100/s... reaching 150 t at 1.5 t); one sent
	// later waits 67.5 − 0.625 t: longest 30 s at 60 s. Over the 108 s
	// window the wait exceeds w for 108 − 3.6 w seconds: 1 % (1.08 s) at
	// w = 29.7 s. The hold (5 min from the 60 s decision) and the cooldown
	// let it fall to 3 at 360 s: 1 replica-minute + 300 s × 4 = 21.
	in := constWork()
	in.Utilization = 0.5
	in.DecisionLag, in.StartDelay = time.Minute, 30*time.Second
	in.HandOff = 10 * time.Millisecond
	p, err := Plan(in)
	require.NoError(t, err)
	s := p.Step
	require.Equal(t, 1, p.Average.Replicas)
	require.Equal(t, 3, p.Peak.Replicas)
	require.Equal(t, time.Minute, s.FirstDecision)
	require.Equal(t, 90*time.Second, s.FirstServing)
	require.Equal(t, 4, s.MaxReplicas)
	require.InDelta(t, 4500, s.PeakBacklog, 20)
	require.InDelta(t, 108, s.Drained.Seconds(), 0.5)
	require.InDelta(t, 30.01, s.MaxWait.Seconds(), 0.2)
	require.InDelta(t, 29.71, s.P99Wait.Seconds(), 0.2)
	require.InDelta(t, 108, s.Window.Seconds(), 0.5)
	require.InDelta(t, 360, s.Settled.Seconds(), 0.5)
	require.InDelta(t, 21, s.ReplicaMinutes, 0.1)

	// With a cooldown shorter than the hold, the replicas come back as
	// soon as the backlog is drained (108 s) and the cooldown from the
	// 60 s decision has passed (120 s): the signal holds the arrivals'
	// figure (3), not the backlog's share (the 4th).
	short := in
	short.ScaleInCooldown = time.Minute
	ps, err := Plan(short)
	require.NoError(t, err)
	require.InDelta(t, 120, ps.Step.Settled.Seconds(), 0.5)

	// A window of its own: the first 60 s only, waits 0.5 t: p99 at
	// 0.5 × 59.4 = 29.7 s as well; a window covering 20 min adds 20 min −
	// 108 s of steady waits (3 replicas, 150 msg/s: C(30, 15) small), so
	// the p99 falls to the share of the fluid waits above 1 %.
	in.StepWindow = time.Minute
	p, err = Plan(in)
	require.NoError(t, err)
	require.InDelta(t, 29.71, p.Step.P99Wait.Seconds(), 0.2)
	in.StepWindow = 20 * time.Minute
	p, err = Plan(in)
	require.NoError(t, err)
	// 1 % of 1200 s = 12 s of waits above w: 108 − 3.6 w = 12 → w = 26.67 s.
	require.InDelta(t, 26.68, p.Step.P99Wait.Seconds(), 0.2)
}

func TestPlanStepNoBacklog(t *testing.T) {
	t.Parallel()
	// Peak within the average replicas' capacity: nothing waits, the
	// step's p99 is the steady one's at 1 replica (C(10, 9) = 0.6687;
	// θ = 0.5 / (100 − 90) = 0.05 s: p99 = 0.05 × ln(66.87) = 0.2102 s).
	in := constWork()
	in.ArrivalAvg, in.ArrivalPeak = 10, 90
	in.Utilization = 1
	in.HandOff = time.Nanosecond
	p, err := Plan(in)
	require.NoError(t, err)
	require.Zero(t, p.Step.PeakBacklog)
	require.Equal(t, 1, p.Step.MaxReplicas)
	require.InDelta(t, 0.2102, p.Step.P99Wait.Seconds(), 0.002)
	require.InDelta(t, p.Peak.P99Wait.Seconds(), p.Step.P99Wait.Seconds(), 0.002)
}

func TestPlanCost(t *testing.T) {
	t.Parallel()
	perMonth := func(messages float64) float64 { return messages / PlanMonth.Seconds() }
	t.Run("a million messages, batches of 2", func(t *testing.T) {
		t.Parallel()
		in := constWork()
		in.ArrivalAvg, in.ArrivalPeak = perMonth(1e6), perMonth(1e6)
		in.BatchFill, in.DeleteFill = 2, 2
		p, err := Plan(in)
		require.NoError(t, err)
		c := p.Requests
		require.InDelta(t, 1e6, c.Messages, 1e-6)
		got := map[string]float64{}
		for _, l := range c.Lines {
			got[l.Action] = l.Requests
		}
		// 1e6 / 2 receives; 1e6 / 2 delete calls; 2,628,000 s / 30 s = 87,600
		// GetQueueAttributes; empty receives: λ = 0.38052 msg/s, λW = 7.6104:
		// 500,000 × e^(−λ × 20 ms) / (e^7.6104 − 1) = 500,000 × 0.992418 / 2017.6 = 245.9.
		require.InDelta(t, 500_000, got["ReceiveMessage"], 1e-6)
		require.InDelta(t, 500_000, got["DeleteMessageBatch"], 1e-6)
		require.InDelta(t, 87_600, got["GetQueueAttributes"], 1e-6)
		require.InDelta(t, 245.9, got["ReceiveMessage (empty)"], 0.2)
		require.Less(t, got["ChangeMessageVisibilityBatch"], 1e-3, "100 ms work is never renewed")
		// 1,087,846 requests × $0.40 / million = $0.4351; the free tier
		// would take $0.40 off.
		require.InDelta(t, 1_087_846, c.Requests, 1)
		require.InDelta(t, 0.43514, c.Dollars, 1e-4)
		require.InDelta(t, 0.40, c.FreeTier, 1e-12)
		require.InDelta(t, 0.43514, c.PerMillionMessages, 1e-4)
		require.Equal(t, []string{"RenewalsPerMessage"}, c.Estimated)
	})
	t.Run("idle queue", func(t *testing.T) {
		t.Parallel()
		in := constWork()
		in.ArrivalAvg, in.ArrivalPeak = 0, 0
		p, err := Plan(in)
		require.NoError(t, err)
		c := p.Requests
		// One replica's long poll every 20 s: 3 a minute × 60 × 730 = 131,400.
		require.InDelta(t, 131_400, c.Lines[1].Requests, 1e-6)
		require.InDelta(t, 131_400+87_600, c.Requests, 1e-6)
		require.InDelta(t, 0.0876, c.Dollars, 1e-9)
		require.InDelta(t, 0.0876, c.FreeTier, 1e-9, "the free tier covers it all")
		require.Zero(t, c.PerMillionMessages)
	})
	t.Run("FIFO list price and 64 KiB chunks", func(t *testing.T) {
		t.Parallel()
		in := constWork()
		in.FIFO = true
		in.ArrivalAvg, in.ArrivalPeak = perMonth(1e6), perMonth(1e6)
		in.BatchFill, in.DeleteFill = 10, 10
		in.MessageSize = 10 * 1024 // 10 messages × 10 KiB = 100 KiB: 2 chunks
		p, err := Plan(in)
		require.NoError(t, err)
		require.Equal(t, ListPriceFIFO, p.Input.PricePerMillion)
		c := p.Requests
		require.Equal(t, 2, c.ReceiveChunks)
		require.InDelta(t, 100_000, c.Lines[0].Calls, 1e-6)
		require.InDelta(t, 200_000, c.Lines[0].Requests, 1e-6)
		require.InDelta(t, 200_000*0.5/1e6, c.Lines[0].Dollars, 1e-12)
	})
	t.Run("renewals of long work", func(t *testing.T) {
		t.Parallel()
		// Constant 25 s work: lease 50 s, heartbeat 16.67 s: one renewal
		// each (at 16.67 s; the next, at 33.3 s, comes after the end).
		in := constWork()
		in.HandlerP50, in.HandlerP99 = 25*time.Second, 25*time.Second
		in.ArrivalAvg, in.ArrivalPeak = perMonth(1e6), perMonth(1e6)
		p, err := Plan(in)
		require.NoError(t, err)
		require.Equal(t, 50*time.Second, p.Lease.VisibilityTimeout)
		require.InDelta(t, 1, p.Requests.RenewalsPerMessage, 1e-12)
		// 10 slots / 25 s × 0.9 = 0.36 msg/s per replica: 2 replicas for
		// 0.38 msg/s, 0.19 each; renewals coalesced 1 + 0.19 × 25 ms = 1.00476 a call.
		require.Equal(t, 2, p.Average.Replicas)
		require.InDelta(t, 1e6/1.00476, p.Requests.Lines[3].Calls, 20)
	})
}

func TestPoissonFill(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 1, poissonFill(0, 1, 10), 1e-12)
	require.InDelta(t, 1, poissonFill(0, 0, 10), 1e-12)
	require.InDelta(t, 10, poissonFill(1000, 1, 10), 1e-9)
	// E[max(N, 1)] = E[N] + P(N = 0) = 1 + e^−1 (the cap at 10 costs ~1e-7).
	require.InDelta(t, 1+math.Exp(-1), poissonFill(1, 0, 10), 1e-6)
	// E[min(1 + N, 10)] = 1 + E[N] = 2.
	require.InDelta(t, 2, poissonFill(1, 1, 10), 1e-6)
}

func TestPlanLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		p99           time.Duration
		maxReceive    int
		retention     time.Duration
		wantLease     time.Duration
		wantRetention time.Duration
		wantWorst     Severity
		wantNote      bool
	}{
		{"fast work: the 10 s floor", 400 * time.Millisecond, 0, 0, 10 * time.Second, RecommendedRetention, SeverityInfo, false},
		{"10 min work", 10 * time.Minute, 0, 0, 20 * time.Minute, RecommendedRetention, SeverityInfo, false},
		// 5 × 12 h = 60 h: a quarter of 10 days is 60 h, not above it: 11 days.
		{"6 h work: longer retention", 6 * time.Hour, 0, 0, 12 * time.Hour, 11 * 24 * time.Hour, SeverityInfo, false},
		{"too many receives", 6 * time.Hour, 100, 0, 12 * time.Hour, PlanMaxRetention, SeverityError, true},
		{"short retention given", time.Second, 0, 12 * time.Hour, 10 * time.Second, 12 * time.Hour, SeverityError, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := constWork()
			in.HandlerP50, in.HandlerP99 = tc.p99/2, tc.p99
			in.MaxReceiveCount, in.Retention = tc.maxReceive, tc.retention
			p, err := Plan(in)
			require.NoError(t, err)
			l := p.Lease
			require.Equal(t, tc.wantLease, l.VisibilityTimeout)
			require.Equal(t, tc.wantLease/3, l.Heartbeat)
			require.Equal(t, mulDur(l.VisibilityTimeout, l.MaxReceiveCount), l.TimeToDLQ)
			require.Equal(t, tc.wantRetention, l.Retention)
			require.Equal(t, PlanDLQRetention, l.DLQRetention)
			require.Equal(t, tc.wantWorst, worst(p.Findings), "findings: %v", p.Findings)
			hasNote := false
			for _, n := range p.Notes {
				hasNote = hasNote || strings.Contains(n, "lower MaxReceiveCount")
			}
			require.Equal(t, tc.wantNote, hasNote, "notes: %v", p.Notes)
		})
	}
}

func TestPlanBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*PlanInput)
		field string
	}{
		{"no p50", func(in *PlanInput) { in.HandlerP50 = 0 }, "HandlerP50"},
		{"p99 below p50", func(in *PlanInput) { in.HandlerP99 = 50 * time.Millisecond }, "HandlerP99"},
		{"negative mean", func(in *PlanInput) { in.HandlerMean = -time.Second }, "HandlerMean"},
		{"negative rate", func(in *PlanInput) { in.ArrivalAvg = -1 }, "ArrivalAvg"},
		{"NaN rate", func(in *PlanInput) { in.ArrivalPeak = math.NaN() }, "ArrivalPeak"},
		{"peak below average", func(in *PlanInput) { in.ArrivalPeak = 10 }, "ArrivalPeak"},
		{"no target", func(in *PlanInput) { in.Target = 0 }, "Target"},
		{"zero concurrency", func(in *PlanInput) { in.Concurrency = 0 }, "Concurrency"},
		{"batch of 11", func(in *PlanInput) { in.BatchSize = 11 }, "BatchSize"},
		{"short polling", func(in *PlanInput) { in.WaitTime = 500 * time.Millisecond }, "WaitTime"},
		{"utilization above 1", func(in *PlanInput) { in.Utilization = 1.2 }, "Utilization"},
		{"negative price", func(in *PlanInput) { in.PricePerMillion = -0.4 }, "PricePerMillion"},
		{"fill above batch", func(in *PlanInput) { in.BatchSize, in.BatchFill = 5, 6 }, "BatchFill"},
		{"fill below 1", func(in *PlanInput) { in.DeleteFill = 0.5 }, "DeleteFill"},
		{"retention above 14 days", func(in *PlanInput) { in.Retention = 15 * 24 * time.Hour }, "Retention"},
		{"negative start delay", func(in *PlanInput) { in.StartDelay = -time.Second }, "StartDelay"},
		{"huge message", func(in *PlanInput) { in.MessageSize = 2 << 20 }, "MessageSize"},
		{"too many slots", func(in *PlanInput) { in.ArrivalPeak = 1e12 }, "ArrivalPeak"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := constWork()
			tc.edit(&in)
			p, err := Plan(in)
			require.Nil(t, p)
			require.Error(t, err)
			var ie *InputError
			require.True(t, errors.As(err, &ie), "%v", err)
			fields := []string{}
			for _, e := range InputErrors(err) {
				fields = append(fields, e.Field)
			}
			require.Equal(t, []string{tc.field}, fields, "%v", err)
			require.Contains(t, err.Error(), "doctor: plan: "+tc.field+" ")
		})
	}
	// Several problems are all named.
	_, err := Plan(PlanInput{})
	require.Len(t, InputErrors(err), 3, "%v", err) // HandlerP50, Target, Concurrency
}

func TestPlanTextAndJSON(t *testing.T) {
	t.Parallel()
	in := PlanInput{HandlerP50: 80 * time.Millisecond, HandlerP99: 400 * time.Millisecond, ArrivalAvg: 20, ArrivalPeak: 2000,
		Target: 30 * time.Second, Concurrency: 10}
	p, err := Plan(in)
	require.NoError(t, err)
	text := p.String()
	for _, want := range []string{
		"peak     2000 msg/s: 23 (slots 88% busy)",
		"visibility timeout 10s, heartbeat every 3.33s",
		"ReceiveMessage (empty)",
		"GetQueueAttributes                     87,600  $0.04",
		"free tier: the first 1,000,000 requests a month are free per account",
		"INFO   retention",
	} {
		require.Contains(t, text, want)
	}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	var v struct {
		Peak struct {
			Replicas int     `json:"replicas"`
			P99      float64 `json:"p99_wait_seconds"`
		} `json:"peak"`
		Lease struct {
			Vis float64 `json:"visibility_timeout_seconds"`
		} `json:"lease"`
		Requests struct {
			Lines []struct {
				Action   string  `json:"action"`
				Requests float64 `json:"requests"`
			} `json:"lines"`
			FreeTier float64 `json:"free_tier_dollars"`
		} `json:"requests"`
		Step struct {
			P99 float64 `json:"p99_wait_seconds"`
		} `json:"step"`
		Notes []string `json:"notes"`
	}
	require.NoError(t, json.Unmarshal(b, &v))
	require.Equal(t, 23, v.Peak.Replicas)
	require.Equal(t, p.Peak.P99Wait.Seconds(), v.Peak.P99)
	require.Equal(t, 10.0, v.Lease.Vis)
	require.Len(t, v.Requests.Lines, 5)
	require.Equal(t, "GetQueueAttributes", v.Requests.Lines[4].Action)
	require.InDelta(t, 0.40, v.Requests.FreeTier, 1e-12)
	require.Equal(t, p.Step.P99Wait.Seconds(), v.Step.P99)
	require.Len(t, v.Notes, 1, "the step's wait is above the target")
}

// Estimates print with three significant digits and no zeros standing in
// for digits they do not have; exact counts print in full.
func TestNumberFormats(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{0: "0", 0.0001: "<0.001", 0.00123: "0.00123", 1.4: "1.4", 1.4203: "1.42", 980: "980",
		999.6: "1.00 thousand", 1000: "1.00 thousand", 87600: "87.6 thousand", 85130272.5: "85.1 million", 1e6: "1.00 million",
		5_256_000_000: "5.26 billion", 3.2e13: "32.0 trillion", 4e16: "4.00e+16"} {
		require.Equal(t, want, sig3(in), "sig3(%v)", in)
	}
	for in, want := range map[float64]string{0: "0", 999.6: "1,000", 87600: "87,600", 3_241_200: "3,241,200", 5_256_000_000: "5,256,000,000"} {
		require.Equal(t, want, whole(in), "whole(%v)", in)
	}
	for in, want := range map[float64]string{0: "0.00", 0.001: "<0.01", 0.4351: "0.44", 89.414: "89.41", 894.12: "894", 999.7: "1.00k",
		2376.11: "2.38k", 14_230: "14.2k", 1_054_000: "1.05M"} {
		require.Equal(t, want, money(in), "money(%v)", in)
	}
}

// The plan, 2000 msg/s: its bill rests on estimated fills (1.42
// messages a receive, 2.35 deletes a call), which the plan explains, and it
// prints the bill's range: full batches (every receive 10, every delete 10)
// to single messages, checked by hand.
func TestPlanBillRange(t *testing.T) {
	t.Parallel()
	in := PlanInput{HandlerP50: 100 * time.Millisecond, HandlerP99: time.Second, ArrivalAvg: 2000, ArrivalPeak: 2000,
		Target: time.Second, Concurrency: 10}
	p, err := Plan(in)
	require.NoError(t, err)
	c := p.Requests
	require.Equal(t, 5_256_000_000.0, c.Messages, "2000 msg/s × 730 h × 3600 s")
	empty, attrs := c.Lines[1].Requests, c.Lines[4].Requests
	require.Equal(t, 37.0*2_628_000/30, attrs, "37 replicas, every 30 s")
	// Full: 5,256,000,000 / 10 receives + / 10 deletes = 1,051,200,000, plus
	// the renewals / 10, the empty receives and GetQueueAttributes.
	renew := c.Messages * c.RenewalsPerMessage
	full := 2*c.Messages/10 + renew/10 + empty + attrs
	single := 2*c.Messages + renew + empty + attrs
	require.InDelta(t, full, c.FullBatches.Requests, 1)
	require.InDelta(t, single, c.SingleMessages.Requests, 1)
	require.InDelta(t, 421.8, c.FullBatches.Dollars, 0.1)
	require.InDelta(t, 4206.5, c.SingleMessages.Dollars, 0.1)
	require.Less(t, c.FullBatches.Dollars, c.Dollars)
	require.Less(t, c.Dollars, c.SingleMessages.Dollars)
	require.InDelta(t, 1.42, c.BatchFill, 0.005)
	require.InDelta(t, 2.35, c.DeleteFill, 0.005)

	text := p.String()
	for _, want := range []string{
		"requests a month (730h, 5,256,000,000 messages, 37 replicas",
		"ReceiveMessage                   3.70 billion  $1.48k",
		"GetQueueAttributes                  3,241,200  $1.30",
		"total                            5.94 billion  $2.38k",
		"range: $422 with full batches (10 messages per receive, 10 per delete and renewal call) to $4.21k with one message per call",
		"batch fill: 1.42 messages per receive, estimated from the rate, the receive round trip and the batch size: " +
			"a long poll answers as soon as a message waits, with the others that arrived during the 20ms round trip at 54.1 msg/s per replica",
		"2.35 deletes per delete call, estimated from the rate: the Consumer coalesces deletes for 25ms",
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "5,260,000,000", "a rounded figure printed with all its digits")

	// Given fills are said to be given, with their source.
	in.BatchFill, in.DeleteFill, in.BatchFillSource = 5, 4, "measured in production"
	p, err = Plan(in)
	require.NoError(t, err)
	require.Equal(t, "measured in production", p.Requests.BatchFillBasis)
	require.Equal(t, "given (DeleteFill)", p.Requests.DeleteFillBasis)
	require.Contains(t, p.String(), "batch fill: 5 messages per receive, measured in production")
	b, err := json.Marshal(p)
	require.NoError(t, err)
	var v struct {
		Requests struct {
			Basis  string             `json:"batch_fill_basis"`
			Full   map[string]float64 `json:"full_batches"`
			Single map[string]float64 `json:"single_messages"`
			Lines  []struct {
				Exact bool `json:"exact"`
			} `json:"lines"`
		} `json:"requests"`
	}
	require.NoError(t, json.Unmarshal(b, &v))
	require.Equal(t, "measured in production", v.Requests.Basis)
	require.InDelta(t, 421.8, v.Requests.Full["dollars"], 0.1)
	require.InDelta(t, 4206.5, v.Requests.Single["dollars"], 0.1)
	require.True(t, v.Requests.Lines[4].Exact)
	require.False(t, v.Requests.Lines[0].Exact)
}

// A Consumer's Stats gives the plan its handler times (not the longer
// receive-to-settle ones), its concurrency and its measured batch fills.
func TestInputFromMeasuredStats(t *testing.T) {
	t.Parallel()
	st := measure(t, spread(40, 500*time.Millisecond, 1500*time.Millisecond))
	in, err := InputFromStats(st)
	require.NoError(t, err)
	require.Equal(t, 40, in.Concurrency)
	require.Equal(t, st.HandlerP50, in.HandlerP50)
	require.InEpsilon(t, time.Second, in.HandlerP50, 0.05)
	require.InEpsilon(t, time.Second, in.HandlerMean, 0.05)
	require.Less(t, in.HandlerP99, st.P99, "the handler alone, without the delete's round trip")
	require.GreaterOrEqual(t, in.BatchFill, 1.0)
	require.LessOrEqual(t, in.BatchFill, 10.0)
	require.InDelta(t, float64(st.Received)/float64(st.Calls.Receive-st.Calls.EmptyReceive), in.BatchFill, 1e-9)
	require.InDelta(t, float64(st.Deleted)/float64(st.Calls.DeleteBatch), in.DeleteFill, 1e-9)
	require.Equal(t, fmt.Sprintf("measured by the Consumer's Stats: %d messages over %d non-empty receives",
		st.Received, st.Calls.Receive-st.Calls.EmptyReceive), in.BatchFillSource)
	require.Contains(t, in.DeleteFillSource, "measured by the Consumer's Stats: ")
	_, err = Plan(PlanInput{HandlerP50: in.HandlerP50, HandlerP99: in.HandlerP99, HandlerMean: in.HandlerMean,
		Concurrency: in.Concurrency, ArrivalAvg: 10, ArrivalPeak: 10, Target: time.Minute, BatchFill: in.BatchFill, DeleteFill: in.DeleteFill})
	require.NoError(t, err)
}

// At utilization 1 and an exact quotient the slots are 100 % busy: the
// wait is unbounded, and said so rather than as 2,562,047 hours.
func TestPlanUnstable(t *testing.T) {
	t.Parallel()
	in := constWork()
	in.ArrivalAvg, in.ArrivalPeak, in.Utilization = 100, 100, 1
	p, err := Plan(in)
	require.NoError(t, err)
	require.Equal(t, time.Duration(math.MaxInt64), p.Average.P99Wait)
	require.False(t, p.Average.MeetsTarget)
	require.Contains(t, p.String(), "p99 wait unbounded (the slots cannot keep up)")
}

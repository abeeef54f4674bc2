package doctor

import (
	"fmt"
	"math"
	"time"
)

// Cost is a month's SQS requests by action and what they cost, for
// ArrivalAvg over PlanMonth (730 hours) at Average.Replicas. Counts are
// means, not rounded.
//
// How each action is counted, per replica receiving λ = ArrivalAvg /
// Average.Replicas msg/s with one receive waiting in a long poll at a
// time (a Consumer's idle state), r = HandOff and W = WaitTime:
//   - ReceiveMessage: messages / BatchFill. Unless measured, BatchFill is
//     E[min(max(N, 1), BatchSize)] with N ~ Poisson(λr): a long poll
//     answers as soon as a message is there, and the next receive finds
//     what arrived during the round trip. A Consumer with several
//     receives in flight fills them less: measure it (InputFromStats).
//   - Empty receives: a receive that starts with nothing waiting ends
//     empty with probability e^(−λW), so each such receive is followed by
//     1 / (e^(λW) − 1) empty ones: an idle replica makes 60 s / W a
//     minute (3 at 20 s).
//   - DeleteMessageBatch: messages / DeleteFill. Unless measured,
//     DeleteFill is E[min(1 + N, 10)] with N ~ Poisson(λ × 25 ms): the
//     Consumer coalesces deletes for 25 ms.
//   - ChangeMessageVisibilityBatch: renewals (messages ×
//     RenewalsPerMessage) coalesced the same way. Unless measured,
//     RenewalsPerMessage is Σₖ P(handler time > k × Heartbeat), k ≥ 1,
//     from the lognormal handler times: one renewal each time a third of
//     the lease passes.
//   - GetQueueAttributes: Average.Replicas × PlanMonth / ScalingInterval,
//     for the scaling signal.
//
// SQS bills each 64 KiB of a call's payload as one request: a receive
// carrying BatchFill × MessageSize bytes is billed
// ceil(BatchFill × MessageSize / 64 KiB) requests (at least 1); the other
// calls carry no message body and are billed one each. Sends by
// producers are not counted.
//
// The fills decide most of the bill, so Cost bounds it too: FullBatches
// is the month were every receive to carry BatchSize messages and every
// delete and renewal call 10, SingleMessages were every call to carry
// one; both count the empty receives and GetQueueAttributes as estimated.
type Cost struct {
	// Messages is the month's messages received and deleted.
	Messages float64
	// BatchFill, DeleteFill and RenewalsPerMessage are the figures used,
	// and Estimated which of them were estimated rather than given.
	BatchFill, DeleteFill, RenewalsPerMessage float64
	Estimated                                 []string
	// BatchFillBasis and DeleteFillBasis say, in words, where BatchFill
	// and DeleteFill come from: the estimate's reasoning with its figures,
	// or the source of a given figure (Input.BatchFillSource, ...).
	BatchFillBasis, DeleteFillBasis string
	// ReceiveChunks is the billed requests per non-empty receive.
	ReceiveChunks int
	// Lines are the actions, in the order above.
	Lines []CostLine
	// Requests and Dollars are the totals: billed requests and their cost
	// at Input.PricePerMillion, free tier not deducted.
	Requests, Dollars float64
	// FreeTier is what AWS's free tier (FreeTierRequests a month per
	// account, shared by all its queues) would take off at most, US dollars.
	FreeTier float64
	// PerMillionMessages is Dollars per million messages (0 without any).
	PerMillionMessages float64
	// FullBatches and SingleMessages bound the bill: its requests and
	// dollars with every call full, and with one message per call.
	FullBatches, SingleMessages CostBound
}

// CostBound is a month's billed requests and their cost under one
// assumption about batch fills (see Cost).
type CostBound struct {
	Requests, Dollars float64
}

// CostLine is one action's month.
type CostLine struct {
	Action   string  // the SQS action, "ReceiveMessage (empty)" for empty receives
	Calls    float64 // calls a month
	Requests float64 // billed requests: calls × chunks
	Dollars  float64 // at Input.PricePerMillion
	// Exact is true when Calls follows from the inputs alone, with no
	// estimate (GetQueueAttributes; empty receives on an idle queue).
	Exact bool
}

// cost counts the month's requests (see Cost).
func (p *CapacityPlan) cost() Cost {
	in := &p.Input
	month := PlanMonth.Seconds()
	n := float64(p.Average.Replicas)
	lam := in.ArrivalAvg / n // per replica, msg/s
	c := Cost{Messages: in.ArrivalAvg * month}
	c.BatchFill, c.BatchFillBasis = in.BatchFill, given(in.BatchFillSource, "BatchFill")
	if c.BatchFill == 0 {
		c.BatchFill = poissonFill(lam*in.HandOff.Seconds(), 0, in.BatchSize)
		c.Estimated = append(c.Estimated, "BatchFill")
		c.BatchFillBasis = fmt.Sprintf("estimated from the rate, the receive round trip and the batch size: a long poll answers as soon as "+
			"a message waits, with the others that arrived during the %s round trip at %s msg/s per replica (Poisson, at most %d); "+
			"a Consumer with several receives in flight fills them less: measure it (InputFromStats, sqsdoctor plan -stats)",
			fmtDur(in.HandOff), fmtRate(lam), in.BatchSize)
	}
	c.DeleteFill, c.DeleteFillBasis = in.DeleteFill, given(in.DeleteFillSource, "DeleteFill")
	if c.DeleteFill == 0 {
		c.DeleteFill = poissonFill(lam*coalesceWindow.Seconds(), 1, 10)
		c.Estimated = append(c.Estimated, "DeleteFill")
		c.DeleteFillBasis = fmt.Sprintf("estimated from the rate: the Consumer coalesces deletes for %s, and %s msg/s per replica "+
			"settle about %s more in that time (Poisson, at most 10 a call)",
			fmtDur(coalesceWindow), fmtRate(lam), sig3(lam*coalesceWindow.Seconds()))
	}
	c.RenewalsPerMessage = in.RenewalsPerMessage
	if c.RenewalsPerMessage == 0 {
		c.RenewalsPerMessage = p.renewals(p.Lease.Heartbeat)
		c.Estimated = append(c.Estimated, "RenewalsPerMessage")
	}
	chunks := func(fill float64) int {
		return max(1, int(math.Ceil(fill*float64(in.MessageSize)/BillingChunk-1e-9)))
	}
	c.ReceiveChunks = chunks(c.BatchFill)

	receives := c.Messages / c.BatchFill
	var empty float64
	w := in.WaitTime.Seconds()
	idle := lam*w < 1e-9
	if idle {
		empty = n * month / w
	} else {
		empty = receives * math.Exp(-lam*in.HandOff.Seconds()) / math.Expm1(lam*w)
	}
	renewals := c.Messages * c.RenewalsPerMessage
	renewFill := poissonFill(lam*c.RenewalsPerMessage*coalesceWindow.Seconds(), 1, 10)
	attrs := n * month / in.ScalingInterval.Seconds()
	c.Lines = []CostLine{
		{Action: "ReceiveMessage", Calls: receives, Requests: receives * float64(c.ReceiveChunks)},
		{Action: "ReceiveMessage (empty)", Calls: empty, Requests: empty, Exact: idle},
		{Action: "DeleteMessageBatch", Calls: c.Messages / c.DeleteFill, Requests: c.Messages / c.DeleteFill},
		{Action: "ChangeMessageVisibilityBatch", Calls: renewals / renewFill, Requests: renewals / renewFill},
		{Action: "GetQueueAttributes", Calls: attrs, Requests: attrs, Exact: true},
	}
	price := in.PricePerMillion / 1e6
	for i := range c.Lines {
		c.Lines[i].Dollars = c.Lines[i].Requests * price
		c.Requests += c.Lines[i].Requests
	}
	c.Dollars = c.Requests * price
	c.FreeTier = min(c.Requests, FreeTierRequests) * price
	if c.Messages > 0 {
		c.PerMillionMessages = c.Dollars / (c.Messages / 1e6)
	}
	bound := func(receiveFill, fill float64) CostBound {
		r := c.Messages/receiveFill*float64(chunks(receiveFill)) + empty + c.Messages/fill + renewals/fill + attrs
		return CostBound{Requests: r, Dollars: r * price}
	}
	c.FullBatches = bound(float64(in.BatchSize), 10)
	c.SingleMessages = bound(1, 1)
	return c
}

// given is the basis of a fill that was given: its source, else "given"
// and the field's name.
func given(source, field string) string {
	if source != "" {
		return source
	}
	return "given (" + field + ")"
}

// poissonFill is E[min(max(lo + N, 1), hi)] for N ~ Poisson(m): the mean
// fill of a batch that holds at most hi entries and at least one.
func poissonFill(m float64, lo, hi int) float64 {
	pk := math.Exp(-m) // P(N = k), from k = 0
	var sum, cum float64
	for k := 0; lo+k < hi; k++ {
		sum += float64(max(lo+k, 1)) * pk
		cum += pk
		pk *= m / float64(k+1)
	}
	return sum + float64(hi)*max(0, 1-cum)
}

// renewals is the mean number of renewals of a message renewed every
// heartbeat while its handler runs: Σₖ P(T > k × heartbeat), k ≥ 1, T
// lognormal through HandlerP50 (and σ). Terms stop below 1e-12.
func (p *CapacityPlan) renewals(heartbeat time.Duration) float64 {
	if heartbeat <= 0 {
		return 0
	}
	mu := math.Log(p.Input.HandlerP50.Seconds())
	h := heartbeat.Seconds()
	var sum float64
	for k := 1; k < 1_000_000; k++ {
		x := float64(k) * h
		var s float64
		if p.Sigma == 0 {
			if p.Input.HandlerP50.Seconds() > x {
				s = 1
			}
		} else {
			s = 0.5 * math.Erfc((math.Log(x)-mu)/(p.Sigma*math.Sqrt2))
		}
		if s < 1e-12 {
			break
		}
		sum += s
	}
	return sum
}

package doctor

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sqskit/sqsconsumer"
)

// Analyze runs every check on src and, when src has a redrive policy, its
// dead-letter queue dlq (nil if unknown: the retention check is skipped).
// The work is known by opts.P99 alone. It calls nothing and is safe for
// concurrent use. Every check that runs reports, so a clean queue gets
// info findings saying what was checked.
func Analyze(src Queue, dlq *Queue, opts Options) []Finding {
	var w *work
	if opts.P99 > 0 {
		p := figure(opts.P99)
		w = &work{p99: p}
	}
	j := judge{opts: opts}
	j.run(src, dlq, w)
	return j.fs
}

// Advice is the result of Advise.
type Advice struct {
	// VisibilityTimeout is the recommended lease, whole seconds (0 when
	// nothing has been processed yet): p99 × 2, or p90 × 1.25 when the
	// tail is long (Heartbeat), rounded up to a figure a person would
	// configure (whole seconds up to a minute, 10 s steps up to 15
	// minutes, whole minutes up to two hours, 5-minute steps above), never
	// below sqsconsumer.MinAdaptiveVisibility nor above
	// sqsconsumer.MaxVisibilityTimeout.
	VisibilityTimeout time.Duration
	// Heartbeat is true when the tail calls for a lease near p90 with
	// renewals (which a Consumer always makes) rather than a constant
	// covering the tail.
	Heartbeat bool
	// TimeToDLQ is maxReceiveCount × VisibilityTimeout: how long a message
	// whose consumer crashes or times out on every attempt takes to reach
	// the dead-letter queue at the recommended lease (0 without a redrive
	// policy or a recommended lease).
	TimeToDLQ time.Duration
	// Findings, most severe first, then in the order of the checks.
	Findings []Finding
}

// Worst returns the highest severity among the findings (SeverityInfo
// when there are none).
func (a Advice) Worst() Severity { return worst(a.Findings) }

// String formats the advice one finding per line.
func (a Advice) String() string {
	var b strings.Builder
	for _, f := range a.Findings {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Advise judges what a Consumer measured (Consumer.Stats) against its
// queue q, with the same checks as Analyze: the queue's own (skipped when
// q.RetentionPeriod is 0: unknown), and the work's, read from st's
// percentiles, ShareAbove and receive counts rather than a lone p99. The
// consumers are taken to renew their leases, as a Consumer does
// (opts.Heartbeat and opts.P99 are ignored); opts.ShutdownTimeout (the
// Consumer's WithShutdownTimeout) enables the shutdown check. On top of
// Analyze's findings it reports how far the figures can be trusted
// (CheckData), a long tail (CheckHeartbeat), redeliveries
// (CheckRedelivery) and ceiling hits (CheckCeiling).
//
// The percentiles are first rounded up to the precision the findings show
// them with (about three significant digits; whole seconds above a
// minute), and every decision and every figure in the text is worked out
// from those, so the arithmetic and comparisons a finding states hold for
// the numbers it prints. A Stats built by hand (without the Consumer's
// histogram) has no distribution: shares of messages are then bounds read
// from the percentiles ("at least 1%").
//
// Advise is pure: it reads st, q and opts only, and is safe for
// concurrent use.
func Advise(st sqsconsumer.Stats, q Queue, opts Options) Advice {
	opts.Heartbeat, opts.P99 = true, 0
	j := judge{opts: opts, stats: &st}
	var w *work
	if st.Processed > 0 {
		w = &work{p50: figure(st.P50), p90: figure(st.P90), p99: figure(st.P99), p999: figure(st.P999), max: figure(st.Max), st: &st}
	}
	j.run(q, nil, w)
	slices.SortStableFunc(j.fs, func(x, y Finding) int { return int(y.Severity - x.Severity) })
	return Advice{VisibilityTimeout: j.lease.lease, Heartbeat: j.lease.heartbeat, TimeToDLQ: j.timeToDLQ, Findings: j.fs}
}

// work is what is known of the consumers' work: a p99 alone (Options.P99)
// or what a Consumer measured. Its durations are figures: rounded up to
// the precision they are shown with (figure).
type work struct {
	p50, p90, p99, p999, max time.Duration // 0: unknown
	st                       *sqsconsumer.Stats
}

// longer returns the share (0 to 1) of messages held longer than d and
// how to say it. From a measured distribution it is an estimate ("about
// 8.2%"); from percentiles alone, a lower bound ("at least 1%") or 0 and
// "" when none is known. measured reports which.
func (w *work) longer(d time.Duration) (share float64, text string, measured bool) {
	if w.st != nil && w.st.Quantile(1) > 0 {
		f := w.st.ShareAbove(d)
		return f, about(f), true
	}
	switch {
	case w.max > 0 && w.max <= d:
		return 0, "", true // the longest measured was not longer
	case w.p50 > d:
		return 0.5, "at least half", false
	case w.p90 > d:
		return 0.1, "at least 10%", false
	case w.p99 > d:
		return 0.01, "at least 1%", false
	case w.p999 > d:
		return 0.001, "at least 0.1%", false
	}
	return 0, "", false
}

// recommendation is the lease recommended for the work, and why.
type recommendation struct {
	lease     time.Duration // 0 without work
	basis     string        // how it was derived: "p99 8s × 2 = 16s"
	heartbeat bool          // a lease near p90, renewals carrying the tail
	// The constant lease p99 × 2 and its basis, when heartbeat replaced it.
	constant      time.Duration
	constantBasis string
}

// recommend derives the lease for w: p99 × 2, or, when the tail is long
// (over TailSamples messages measured, p99.9 ≥ TailRatio × p99), p90 ×
// 1.25 if that is shorter.
func recommend(w *work) recommendation {
	if w == nil {
		return recommendation{}
	}
	constant, constBasis := derive("p99", w.p99, "2", double(w.p99))
	r := recommendation{lease: constant, basis: constBasis}
	tail := w.st != nil && w.st.Processed >= TailSamples && w.p99 > 0 && float64(w.p999) >= TailRatio*float64(w.p99)
	if near90, basis := derive("p90", w.p90, "1.25", w.p90+w.p90/4); tail && near90 < constant {
		r = recommendation{lease: near90, basis: basis, heartbeat: true, constant: constant, constantBasis: constBasis}
	}
	return r
}

// derive turns raw, a figure of the work (name fig × factor), into a lease
// a person would configure, and explains how: "p99 8.5s × 2 = 17s",
// "p99 3ms × 2 = 6ms, raised to the 10s floor", "p90 95s × 1.25 =
// 118.75s, rounded up to 120s", "p99 7h × 2 = 14h, capped at the 12h
// maximum".
func derive(name string, fig time.Duration, factor string, raw time.Duration) (time.Duration, string) {
	rounded := roundLease(raw)
	lease := min(max(rounded, sqsconsumer.MinAdaptiveVisibility), sqsconsumer.MaxVisibilityTimeout)
	text := fmt.Sprintf("%s %s × %s = %s", name, fmtDur(fig), factor, fmtDur(raw))
	switch {
	case lease > rounded:
		text += ", raised to the " + fmtDur(lease) + " floor"
	case lease < rounded:
		text += ", capped at the " + fmtDur(lease) + " maximum"
	case rounded != raw:
		text += ", rounded up to " + fmtDur(lease)
	}
	return lease, text
}

// double returns 2d, saturating instead of overflowing.
func double(d time.Duration) time.Duration {
	if d > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * d
}

// judge runs the checks and collects their findings.
type judge struct {
	opts      Options
	stats     *sqsconsumer.Stats // Advise's, nil for Analyze
	fs        []Finding
	lease     recommendation
	timeToDLQ time.Duration // at the recommended lease
}

func (j *judge) add(c CheckName, s Severity, v values, format string, args ...any) {
	if len(v) == 0 {
		v = nil
	}
	j.fs = append(j.fs, Finding{c, s, fmt.Sprintf(format, args...), v})
}

// run runs every check that applies, in the order of the CheckName
// constants.
func (j *judge) run(src Queue, dlq *Queue, w *work) {
	j.lease = recommend(w)
	if src.RetentionPeriod > 0 { // the queue's attributes are known
		j.deadLetter(src, dlq)
		j.retention(src.RetentionPeriod)
		j.polling(src.ReceiveWaitTime)
	}
	if src.Counts != nil {
		j.inFlight(*src.Counts)
	}
	if j.stats != nil {
		j.data()
	}
	if w != nil {
		j.visibility(src.VisibilityTimeout, w)
	}
	j.lambda(src.VisibilityTimeout)
	j.shutdown(src.VisibilityTimeout, w)
	if j.stats != nil {
		j.redelivery()
		if n := j.stats.CeilingHits; n > 0 {
			j.add(CheckCeiling, SeverityWarn, values{"ceiling_hits": float64(n)}.secs("max_visibility_seconds", sqsconsumer.MaxVisibilityTimeout),
				"%s reached the maximum lease duration (%s): work that long cannot be held by an SQS lease; record the job durably, delete the message, and track the work elsewhere",
				count(n, "message"), fmtDur(sqsconsumer.MaxVisibilityTimeout))
		}
	}
}

// deadLetter checks the redrive policy, maxReceiveCount, time to DLQ and
// the DLQ's retention.
func (j *judge) deadLetter(src Queue, dlq *Queue) {
	ret := src.RetentionPeriod
	rp := src.Redrive
	if rp == nil {
		v := values{}.secs("retention_seconds", ret)
		if src.FIFO {
			j.add(CheckRedrivePolicy, SeverityWarn, v, "no redrive policy: a message that always fails blocks its message group until retention (%s) deletes it; add a FIFO dead-letter queue unless keeping the group's order matters more than moving on",
				fmtDur(ret))
		} else {
			j.add(CheckRedrivePolicy, SeverityError, v, "no redrive policy: a message that always fails is received again and again until retention (%s) deletes it, with nothing left to investigate; add a dead-letter queue",
				fmtDur(ret))
		}
		return
	}
	n := float64(rp.MaxReceiveCount)
	j.add(CheckRedrivePolicy, SeverityInfo, values{"max_receive_count": n}, "dead-letter queue %s after %d receives", arnName(rp.DeadLetterTargetARN), rp.MaxReceiveCount)
	if rp.MaxReceiveCount == 1 {
		j.add(CheckMaxReceiveCount, SeverityWarn, values{"max_receive_count": n}, "maxReceiveCount 1: SQS may count a receive that never reached a consumer, so a message can land in the DLQ without one real attempt, and one crash or timeout is enough; use 3 or more")
	}
	j.timeToDLQCheck(src)
	if dlq == nil {
		return
	}
	dret := dlq.RetentionPeriod
	switch {
	case src.FIFO:
		j.add(CheckDLQRetention, SeverityInfo, values{}.secs("dlq_retention_seconds", dret),
			"FIFO queues reset the enqueue time when a message moves, so the DLQ keeps it %s from the move", fmtDur(dret))
	case dret <= ret:
		j.add(CheckDLQRetention, SeverityError, values{}.secs("dlq_retention_seconds", dret).secs("retention_seconds", ret).ratio(dret, ret),
			"the DLQ keeps messages %s, %s: a moved message keeps its original enqueue time, so one that spent %s in the source expires from the DLQ as soon as it moves; set the DLQ's MessageRetentionPeriod to 14 days (1209600)",
			fmtDur(dret), compare(dret, ret, "the source's "+fmtDur(ret)), fmtDur(dret))
	default:
		j.add(CheckDLQRetention, SeverityInfo, values{}.secs("dlq_retention_seconds", dret).secs("retention_seconds", ret).ratio(dret, ret),
			"the DLQ keeps messages %s, %s: a moved message has at least %s there to be noticed",
			fmtDur(dret), compare(dret, ret, "the source's "+fmtDur(ret)), fmtDur(dret-ret))
	}
}

// timeToDLQCheck judges maxReceiveCount × the lease in force against
// retention: an error when not below it, a warning unless under a
// quarter of it. With a recommended lease it also states the time to DLQ
// at that lease; a lease in force of 0 in Advise is unknown, and the
// recommended lease is judged instead.
func (j *judge) timeToDLQCheck(src Queue) {
	rp, ret := src.Redrive, src.RetentionPeriod
	rec := j.lease.lease
	if rec > 0 {
		j.timeToDLQ = mulDur(rec, rp.MaxReceiveCount)
	}
	lease, name := src.VisibilityTimeout, "VisibilityTimeout "+fmtDur(src.VisibilityTimeout)
	if j.stats != nil {
		name = "the lease " + fmtDur(lease)
		if lease == 0 {
			if rec == 0 {
				return // neither the lease in force nor a recommended one is known
			}
			lease, name = rec, "the recommended lease "+fmtDur(rec)
		}
	}
	ttd := mulDur(lease, rp.MaxReceiveCount)
	v := values{"max_receive_count": float64(rp.MaxReceiveCount)}.secs("visibility_timeout_seconds", lease).secs("time_to_dlq_seconds", ttd).
		secs("retention_seconds", ret).ratio(ttd, ret)
	what := fmt.Sprintf("maxReceiveCount %d × %s = %s to the DLQ", rp.MaxReceiveCount, name, fmtDur(ttd))
	if rec > 0 && rec != lease {
		v = v.secs("recommended_visibility_seconds", rec).secs("recommended_time_to_dlq_seconds", j.timeToDLQ)
		what += fmt.Sprintf(", %s at the recommended lease %s", fmtDur(j.timeToDLQ), fmtDur(rec))
	}
	lower := ""
	if !src.FIFO {
		lower = " (a lower bound: a message received three times may be moved to the back of the queue)"
	}
	hang := ""
	if j.opts.Heartbeat {
		hang = "; a handler that hangs is renewed on every attempt up to the maximum lease duration, so bound handlers with WithHandlerTimeout"
	}
	vsRet := compare(ttd, ret, "MessageRetentionPeriod "+fmtDur(ret))
	switch {
	case ttd >= ret:
		j.add(CheckTimeToDLQ, SeverityError, v, "%s is %s: messages expire before they reach the DLQ, taking the evidence with them; shorten the lease (heartbeat instead) or lower maxReceiveCount%s", what, vsRet, hang)
	case !farBelow(ttd, ret):
		j.add(CheckTimeToDLQ, SeverityWarn, v, "%s is %s, not under a quarter of it: a message that fails for a while expires before it reaches the DLQ, and a poison message holds a worker on every attempt; shorten the lease (heartbeat instead) or lower maxReceiveCount%s", what+lower, vsRet, hang)
	default:
		j.add(CheckTimeToDLQ, SeverityInfo, v, "%s, %s%s", what+lower, vsRet, hang)
	}
}

// retention checks that MessageRetentionPeriod outlasts an outage.
func (j *judge) retention(ret time.Duration) {
	v := values{}.secs("retention_seconds", ret).secs("min_retention_seconds", MinRetention).secs("recommended_retention_seconds", RecommendedRetention)
	switch {
	case ret < MinRetention:
		j.add(CheckRetention, SeverityError, v, "MessageRetentionPeriod %s is below %s: a message sent when the consumers stop at the end of a working day expires before they are fixed the next day; raise it to at least %s (%d), better 4 days or more",
			fmtDur(ret), fmtDur(MinRetention), fmtDur(MinRetention), int64(MinRetention/time.Second))
	case ret < RecommendedRetention:
		j.add(CheckRetention, SeverityWarn, v, "MessageRetentionPeriod %s is below %s: an outage from Friday evening to Monday morning (63h) %s; raise it to %s (%d) or more",
			fmtDur(ret), fmtDur(RecommendedRetention), weekendLoss(ret), fmtDur(RecommendedRetention), int64(RecommendedRetention/time.Second))
	default:
		j.add(CheckRetention, SeverityInfo, v, "MessageRetentionPeriod %s outlasts an outage from Friday evening to Monday morning (63h)", fmtDur(ret))
	}
}

// polling checks ReceiveMessageWaitTimeSeconds.
func (j *judge) polling(wait time.Duration) {
	if wait == 0 {
		j.add(CheckLongPolling, SeverityWarn, values{"receive_wait_seconds": 0}, "ReceiveMessageWaitTimeSeconds is 0 (short polling): a receive without its own WaitTimeSeconds answers at once from a subset of servers, so consumers get empty and false-empty answers and pay for more requests; set it to 20 (sqsconsumer sends WaitTimeSeconds 20 itself)")
		return
	}
	j.add(CheckLongPolling, SeverityInfo, values{}.secs("receive_wait_seconds", wait), "long polling: receives wait up to %s for messages", fmtDur(wait))
}

// inFlight judges the messages in flight against SQS's in-flight quota.
func (j *judge) inFlight(c QueueCounts) {
	v := values{"in_flight": float64(c.InFlight), "visible": float64(c.Visible), "in_flight_quota": sqsconsumer.InFlightQuota,
		"ratio": float64(c.InFlight) / sqsconsumer.InFlightQuota}
	const ways = "the ways out: find what holds messages without deleting them (handlers that never delete or fail their deletes; failed messages waiting out long retry visibilities, up to 12h with RetryAfter or a backoff, which a dead-letter queue or shorter backoffs end; many replicas reading ahead, which a lower WithMaxReadAhead bounds), spread the work over more queues, or ask AWS Support to raise the quota"
	switch {
	case c.InFlight >= sqsconsumer.InFlightQuota && c.Visible > 0:
		j.add(CheckInFlight, SeverityError, v, "%d messages in flight, at SQS's in-flight quota of about %d per queue, with %d visible: SQS answers long polls with nothing and no error (short polls with OverLimit), so consumers idle while the visible messages age toward retention; %s",
			c.InFlight, sqsconsumer.InFlightQuota, c.Visible, ways)
	case c.InFlight >= sqsconsumer.InFlightNearQuota:
		j.add(CheckInFlight, SeverityWarn, v, "%d messages in flight, near SQS's in-flight quota of about %d per queue (%d visible): at the quota SQS answers long polls with nothing and no error (short polls with OverLimit), and consumers idle while messages wait; %s",
			c.InFlight, sqsconsumer.InFlightQuota, c.Visible, ways)
	default:
		j.add(CheckInFlight, SeverityInfo, v, "%d messages in flight, %d visible: below SQS's in-flight quota of about %d per queue",
			c.InFlight, c.Visible, sqsconsumer.InFlightQuota)
	}
}

// data says how far Advise's figures can be trusted.
func (j *judge) data() {
	n := j.stats.Processed
	switch {
	case n == 0:
		j.add(CheckData, SeverityInfo, values{"processed": 0}, "no message has been processed yet: no figures to size the lease from")
	case n < MinSamples:
		j.add(CheckData, SeverityWarn, values{"processed": float64(n)}, "only %s processed: percentiles are rough until %d (p99) and %d (p99.9)",
			count(n, "message"), MinSamples, TailSamples)
	}
}

// visibility checks the lease in force (vis, 0 when unknown) against the
// work, and work beyond the 12-hour ceiling.
func (j *judge) visibility(vis time.Duration, w *work) {
	p := w.p99
	if raw := double(p); raw > sqsconsumer.MaxVisibilityTimeout {
		defer j.add(CheckCeiling, SeverityWarn, values{}.secs("p99_seconds", p).secs("max_visibility_seconds", sqsconsumer.MaxVisibilityTimeout),
			"p99 × 2 (%s) exceeds the %s limit of a lease: the slowest work cannot be held by one message; record it as a job and delete the message early",
			fmtDur(raw), fmtDur(sqsconsumer.MaxVisibilityTimeout))
	}
	if !j.opts.Heartbeat {
		rec := double(p)
		v := values{}.secs("visibility_timeout_seconds", vis).secs("p99_seconds", p).secs("recommended_visibility_seconds", rec).ratio(vis, rec)
		switch {
		case vis < p:
			j.add(CheckVisibilityP99, SeverityError, v, "VisibilityTimeout %s is below p99 %s: at least 1%% of messages outlive their lease and are delivered to a second consumer while the first still works; use at least p99 × 2 = %s, or renew leases while working",
				fmtDur(vis), fmtFig(p), fmtDur(rec))
		case vis < rec:
			j.add(CheckVisibilityP99, SeverityWarn, v, "VisibilityTimeout %s is %s: a slow day pushes the tail past the lease and into duplicates; raise it, or renew leases while working",
				fmtDur(vis), compare(vis, rec, "p99 × 2 = "+fmtDur(rec)))
		default:
			j.add(CheckVisibilityP99, SeverityInfo, v, "VisibilityTimeout %s covers p99 × 2 = %s", fmtDur(vis), fmtDur(rec))
		}
		return
	}

	r := j.lease
	lease := r.lease
	if r.heartbeat {
		share, _, _ := w.longer(lease)
		j.add(CheckHeartbeat, SeverityInfo, values{}.secs("p90_seconds", w.p90).secs("p99_seconds", w.p99).secs("p999_seconds", w.p999).
			secs("recommended_visibility_seconds", lease).ratio(w.p999, w.p99).with("share_above", share),
			"p99.9 (%s) is %s p99 (%s), a long tail: rather than a constant lease of %s (%s), which leaves a crashed consumer's messages invisible that long, lease %s (%s) and let renewals every third of the lease carry the tail; %s of messages outlive the first lease",
			fmtFig(w.p999), fmtRatio(w.p999, w.p99), fmtFig(w.p99), fmtDur(r.constant), r.constantBasis, fmtDur(lease), r.basis, about(share))
	}
	basis := r.basis
	if r.heartbeat {
		basis += "; renewals carry the tail"
	}
	rec := fmtDur(lease)
	v := values{}.secs("p99_seconds", p).secs("recommended_visibility_seconds", lease)
	if vis == 0 {
		j.add(CheckVisibilityP99, SeverityInfo, v, "lease %s (%s); a crashed consumer's messages come back after at most that long", rec, basis)
		return
	}
	v = v.secs("visibility_timeout_seconds", vis).ratio(vis, lease)
	share, shareText, measured := w.longer(vis)
	v = v.with("share_above", share)
	ratio := fmtRatio(vis, lease)
	floor := sqsconsumer.MinAdaptiveVisibility
	switch {
	case vis > 2*lease:
		j.add(CheckVisibilityP99, SeverityWarn, v, "lease %s is %s the %s the work needs (%s): a crashed consumer's messages stay invisible up to %s instead of %s, and time to DLQ grows with it; use %s",
			fmtDur(vis), ratio, rec, basis, fmtDur(vis), rec, rec)
	case vis < lease/2 && share > 0.10:
		renewals := ""
		if j.stats != nil && j.stats.RenewalsPerMessage > 0 {
			renewals = fmt.Sprintf(" (%s renewals per message measured)", sig2(j.stats.RenewalsPerMessage))
		}
		j.add(CheckVisibilityP99, SeverityWarn, v, "lease %s is %s of the %s recommended (%s), and %s of messages take longer than it: those live on renewals%s, each one a chance to lose the lease; use %s",
			fmtDur(vis), ratio, rec, basis, shareText, renewals, rec)
	case vis < floor:
		j.add(CheckVisibilityP99, SeverityWarn, v.secs("min_visibility_seconds", floor), "lease %s is below %s: renewals at a third of the lease leave too little time for a renewal to land; use %s (%s)",
			fmtDur(vis), fmtDur(floor), rec, basis)
	case vis == lease:
		j.add(CheckVisibilityP99, SeverityInfo, v, "lease %s is the one recommended (%s)", rec, basis)
	case vis > lease:
		j.add(CheckVisibilityP99, SeverityInfo, v, "lease %s is %s the %s recommended (%s): a crashed consumer's messages stay invisible up to %s instead of %s",
			fmtDur(vis), ratio, rec, basis, fmtDur(vis), rec)
	case shareText == "" && measured:
		j.add(CheckVisibilityP99, SeverityInfo, v, "lease %s is %s of the %s recommended (%s); no message measured took longer than it, but on a slower day some would live on renewals",
			fmtDur(vis), ratio, rec, basis)
	case shareText == "":
		j.add(CheckVisibilityP99, SeverityInfo, v, "lease %s is %s of the %s recommended (%s); messages that take longer than it live on renewals",
			fmtDur(vis), ratio, rec, basis)
	default:
		j.add(CheckVisibilityP99, SeverityInfo, v, "lease %s is %s of the %s recommended (%s); %s of messages take longer than it and live on renewals",
			fmtDur(vis), ratio, rec, basis, shareText)
	}
}

// lambda checks the visibility timeout against a Lambda function's.
func (j *judge) lambda(vis time.Duration) {
	t := j.opts.LambdaTimeout
	if t <= 0 {
		return
	}
	win := j.opts.BatchingWindow
	need := 6*t + win
	v := values{}.secs("visibility_timeout_seconds", vis).secs("lambda_timeout_seconds", t).secs("batching_window_seconds", win).
		secs("required_visibility_seconds", need).ratio(vis, need)
	if vis < need {
		j.add(CheckLambda, SeverityError, v, "VisibilityTimeout %s is %s: Lambda retries a throttled batch within the lease and a slow invocation's batch is delivered again; set it to at least %d seconds",
			fmtDur(vis), compare(vis, need, fmt.Sprintf("6 × the function timeout %s + the batching window %s = %s", fmtDur(t), fmtDur(win), fmtDur(need))),
			int64(ceilTo(need, time.Second)/time.Second))
		return
	}
	j.add(CheckLambda, SeverityInfo, v, "VisibilityTimeout %s covers 6 × the function timeout %s + the batching window %s = %s",
		fmtDur(vis), fmtDur(t), fmtDur(win), fmtDur(need))
}

// shutdown checks the shutdown budget against the lease and the work.
func (j *judge) shutdown(vis time.Duration, w *work) {
	s := j.opts.ShutdownTimeout
	if s <= 0 {
		return
	}
	v := values{}.secs("shutdown_seconds", s)
	if vis > 0 {
		v = v.secs("visibility_timeout_seconds", vis)
	}
	reported := false
	if !j.opts.Heartbeat && s > vis {
		j.add(CheckShutdown, SeverityWarn, v, "the shutdown budget %s is longer than VisibilityTimeout %s: without renewals the lease of a message still being drained runs out and SQS hands it to another consumer, so draining that long only duplicates work; renew leases while draining (sqsconsumer does: -heartbeat) or keep the budget below the lease",
			fmtDur(s), fmtDur(vis))
		reported = true
	}
	if w != nil {
		share, shareText, _ := w.longer(s)
		v := v.clone().secs("p99_seconds", w.p99).with("share_above", share)
		switch {
		case s < w.p90:
			j.add(CheckShutdown, SeverityWarn, v.secs("p90_seconds", w.p90), "shutdown budget %s is below p90 (%s): %s of messages take longer than the budget, and a deploy cancels those in flight (ErrShutdown) for SQS to deliver again; raise the budget toward p99 (%s) and the orchestrator's kill timeout with it, or make the work resumable",
				fmtDur(s), fmtFig(w.p90), shareText, fmtFig(w.p99))
			return
		case s < w.p99:
			j.add(CheckShutdown, SeverityWarn, v, "shutdown budget %s is below p99 (%s): %s of messages take longer than the budget, and a deploy cuts those in flight short for SQS to deliver again; raise the budget (and the orchestrator's kill timeout) toward p99, or make the work resumable",
				fmtDur(s), fmtFig(w.p99), shareText)
			return
		case !reported && j.opts.Heartbeat:
			j.add(CheckShutdown, SeverityInfo, v, "shutdown budget %s covers p99 (%s); leases stay renewed while handlers drain, so a budget longer than the lease fits, but the orchestrator must wait longer than the budget before it kills the process",
				fmtDur(s), fmtFig(w.p99))
			return
		case !reported:
			j.add(CheckShutdown, SeverityInfo, v, "shutdown budget %s covers p99 (%s) and fits the lease", fmtDur(s), fmtFig(w.p99))
			return
		}
	}
	if !reported {
		j.add(CheckShutdown, SeverityInfo, v, "shutdown budget %s fits the lease and the work", fmtDur(s))
	}
}

// redelivery reports the receive-count distribution of Advise's Stats.
func (j *judge) redelivery() {
	s := j.stats
	var total int64
	for _, n := range s.ReceiveCounts {
		total += n
	}
	total += s.Adopted
	if total == 0 {
		return
	}
	redelivered := s.Redeliveries()
	lapsed := s.Adopted + s.LeasesLost + s.LeasesExpired
	dist := fmtCounts(s.ReceiveCounts)
	v := values{"receives": float64(total), "redeliveries": float64(redelivered), "releases": float64(s.Released), "lapsed": float64(lapsed)}
	share := pct(float64(redelivered) / float64(total))
	switch {
	case lapsed > 0:
		j.add(CheckRedelivery, SeverityWarn, v, "%s lapsed (%s adopted while still being handled, %d lost, %d expired): work outran its lease or renewals failed; receive counts %s",
			count(lapsed, "lease"), count(s.Adopted, "redelivery"), s.LeasesLost, s.LeasesExpired, dist)
	case redelivered > s.Released:
		j.add(CheckRedelivery, SeverityWarn, v, "%s of receives were redeliveries (receive counts %s), more than the %s after failures explain: leases ran out before settlement (overrun, a crashed or killed consumer); this is the earliest sign of overrun",
			share, dist, count(s.Released, "release"))
	case redelivered > 0:
		j.add(CheckRedelivery, SeverityInfo, v, "%s of receives were redeliveries (receive counts %s), no more than handler failures and releases explain",
			share, dist)
	default:
		j.add(CheckRedelivery, SeverityInfo, v, "every receive was a first delivery (receive counts %s): no sign of overrun", dist)
	}
}

// weekendOutage is an outage from Friday 18:00 to Monday 09:00.
const weekendOutage = 63 * time.Hour

// weekendLoss says what a weekend's outage does to messages kept ret.
func weekendLoss(ret time.Duration) string {
	if ret <= weekendOutage {
		return "expires every message sent as it begins"
	}
	return "leaves " + fmtDur(ret-weekendOutage) + " to fix the consumers before messages sent as it began expire"
}

// values holds a Finding's figures; its methods return it for chaining.
type values map[string]float64

// clone returns a copy of v, so that one finding's additions do not leak
// into another's.
func (v values) clone() values {
	c := make(values, len(v)+4)
	for k, x := range v {
		c[k] = x
	}
	return c
}

// secs records d in seconds under key.
func (v values) secs(key string, d time.Duration) values {
	v[key] = d.Seconds()
	return v
}

// with records x under key.
func (v values) with(key string, x float64) values {
	v[key] = x
	return v
}

// ratio records x / y under "ratio" when y is above zero.
func (v values) ratio(x, y time.Duration) values {
	if y > 0 {
		v["ratio"] = float64(x) / float64(y)
	}
	return v
}

package sqsconsumer

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Thresholds of Stats.Advise.
const (
	// AdviceMinSamples is how many settled messages Stats.Advise wants
	// before it trusts a p99; below it, advice carries a warning that the
	// figures are rough.
	AdviceMinSamples = 100
	// AdviceTailSamples is how many settled messages a p99.9 needs before
	// Stats.Advise judges the tail by it.
	AdviceTailSamples = 1000
	// AdviceTailRatio is how far p99.9 must be above p99 to count as a long
	// tail: at 1.5 the slowest 0.1 % take half as long again as the p99, so
	// a constant sized for them freezes every crashed message far longer
	// than typical work needs. A long tail calls for a lease near p90 with
	// heartbeating, not a bigger constant.
	AdviceTailRatio = 1.5
)

// Severity ranks a Recommendation. The zero value is SeverityInfo.
type Severity int

// The severities, least severe first.
const (
	// SeverityInfo is a figure worth knowing; nothing needs to change.
	SeverityInfo Severity = iota
	// SeverityWarn is a setting that costs duplicates, latency or money.
	SeverityWarn
	// SeverityError is a setting that loses messages or processes many of
	// them twice.
	SeverityError
)

var severityNames = [...]string{SeverityInfo: "info", SeverityWarn: "warn", SeverityError: "error"}

// String returns "info", "warn" or "error".
func (s Severity) String() string {
	if s >= 0 && int(s) < len(severityNames) {
		return severityNames[s]
	}
	return "severity(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText encodes the severity as its String, for JSON and logs.
func (s Severity) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(severityNames) {
		return nil, fmt.Errorf("sqsconsumer: unknown severity %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes "info", "warn" (or "warning") and "error".
func (s *Severity) UnmarshalText(b []byte) error {
	switch string(b) {
	case "info":
		*s = SeverityInfo
	case "warn", "warning":
		*s = SeverityWarn
	case "error":
		*s = SeverityError
	default:
		return fmt.Errorf("sqsconsumer: unknown severity %q", b)
	}
	return nil
}

// Level maps the severity to a slog level: Info, Warn, Error.
func (s Severity) Level() slog.Level {
	switch s {
	case SeverityWarn:
		return slog.LevelWarn
	case SeverityError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// LogValue makes a Recommendation log as a group: topic, severity, the
// value as a duration string (as in Stats.LogValue; omitted when 0) and
// the message.
func (r Recommendation) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("topic", string(r.Topic)), slog.String("severity", r.Severity.String())}
	if r.Value != 0 {
		attrs = append(attrs, logDur("value", r.Value))
	}
	return slog.GroupValue(append(attrs, slog.String("message", r.Message))...)
}

// QueueSettings describes what Stats.Advise checks the figures against.
// A zero field is unknown and the checks that need it are skipped; the
// zero QueueSettings knows nothing of the queue.
type QueueSettings struct {
	// VisibilityTimeout is the lease the consumer asks for now
	// (WithVisibilityTimeout, or the queue's VisibilityTimeout).
	VisibilityTimeout time.Duration
	// MaxReceiveCount is the redrive policy's maxReceiveCount. 0 means the
	// queue has no dead-letter queue when RetentionPeriod is known (the
	// attributes were read), unknown otherwise.
	MaxReceiveCount int
	// RetentionPeriod is the queue's MessageRetentionPeriod.
	RetentionPeriod time.Duration
	// ShutdownTimeout is WithShutdownTimeout: how long running handlers may
	// finish when the consumer stops.
	ShutdownTimeout time.Duration
}

// QueueSettingsFromAttributes reads VisibilityTimeout,
// MessageRetentionPeriod and RedrivePolicy's maxReceiveCount from a
// GetQueueAttributes answer; attributes that are missing or malformed stay
// zero. ShutdownTimeout is left for the caller.
func QueueSettingsFromAttributes(attrs map[string]string) QueueSettings {
	secs := func(name string) time.Duration {
		n, err := strconv.ParseInt(attrs[name], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	q := QueueSettings{
		VisibilityTimeout: secs("VisibilityTimeout"),
		RetentionPeriod:   secs("MessageRetentionPeriod"),
	}
	if rp := attrs["RedrivePolicy"]; rp != "" {
		var p struct {
			MaxReceiveCount json.RawMessage `json:"maxReceiveCount"`
		}
		if json.Unmarshal([]byte(rp), &p) == nil {
			// SQS accepts the count as a number or a string.
			n, err := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
			if err == nil && n > 0 {
				q.MaxReceiveCount = n
			}
		}
	}
	return q
}

// Topic names what a Recommendation is about.
type Topic string

// The topics of Stats.Advise, in the order it reports them.
const (
	TopicData       Topic = "data"               // how much the figures can be trusted
	TopicVisibility Topic = "visibility_timeout" // the lease to ask for
	TopicHeartbeat  Topic = "heartbeat"          // whether the tail calls for renewals rather than a bigger lease
	TopicTimeToDLQ  Topic = "time_to_dlq"        // maxReceiveCount × lease, against retention
	TopicShutdown   Topic = "shutdown"           // the shutdown budget against the work's duration
	TopicRedelivery Topic = "redelivery"         // the receive-count distribution and lapsed leases
	TopicCeiling    Topic = "ceiling"            // work that nears the 12-hour limit
)

// Recommendation is one finding of Stats.Advise.
type Recommendation struct {
	Topic    Topic
	Severity Severity
	// Value is the duration the recommendation is about (the suggested
	// lease, the time to DLQ, ...), 0 when it has none.
	Value time.Duration
	// Message says what to do and why, with the figures, in one sentence
	// or two.
	Message string
}

// String formats the recommendation as "warn visibility_timeout: ...".
func (r Recommendation) String() string {
	return r.Severity.String() + " " + string(r.Topic) + ": " + r.Message
}

// Advice is the result of Stats.Advise.
type Advice struct {
	// VisibilityTimeout is the recommended lease, whole seconds (0 when
	// nothing has been processed yet).
	VisibilityTimeout time.Duration
	// Heartbeat is true when the tail calls for a lease near p90 with
	// renewals (which a Consumer always makes) rather than a constant
	// covering the tail.
	Heartbeat bool
	// TimeToDLQ is MaxReceiveCount × VisibilityTimeout: how long a message
	// whose consumer crashes or times out on every attempt takes to reach
	// the dead-letter queue at the recommended lease (0 without one).
	TimeToDLQ time.Duration
	// Recommendations, most severe first, then by topic order.
	Recommendations []Recommendation
}

// Worst returns the highest severity among the recommendations
// (SeverityInfo when there are none).
func (a Advice) Worst() Severity {
	w := SeverityInfo
	for _, r := range a.Recommendations {
		w = max(w, r.Severity)
	}
	return w
}

// String formats the advice one recommendation per line.
func (a Advice) String() string {
	var b strings.Builder
	for _, r := range a.Recommendations {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Advise turns the figures into recommendations, checked against q:
//
//   - visibility timeout: p99 × 2, rounded up to a figure a person would
//     configure (whole seconds up to a minute, 10 s steps up to 15
//     minutes, whole minutes up to two hours, 5-minute steps above),
//     never below MinAdaptiveVisibility nor above MaxVisibilityTimeout;
//   - heartbeat: when p99.9 is at least AdviceTailRatio × p99 (a long
//     tail), a lease near p90 (p90 × 1.25, rounded the same way) with
//     renewals instead, so most messages settle inside the first lease,
//     crashed work is retried soon, and only the tail pays for renewals;
//   - time to DLQ: maxReceiveCount × lease, against the retention period
//     (an error when messages would expire first, a warning above a
//     quarter of it, a warning when the queue has no redrive policy);
//   - shutdown: the share of work longer than the shutdown budget, which
//     a deploy cancels and SQS delivers again;
//   - redelivery: the receive-count distribution, adoptions and lapsed
//     leases, the earliest sign that work outruns its lease;
//   - ceiling: work reaching the 12-hour limit.
//
// The percentiles are first rounded up to the precision the messages show
// them with (about three significant digits; whole seconds above a
// minute), and every decision and every figure in the text is worked out
// from those, so the arithmetic and comparisons a message states hold for
// the numbers it prints. Comparisons are worded from the actual ratio
// ("3× the 10s", "21% of the 24s"), and a lease set by the floor or the
// ceiling says so.
//
// Advise is pure: it reads s and q only.
func (s Stats) Advise(q QueueSettings) Advice {
	s.P50, s.P90, s.P99, s.P999, s.Max = figure(s.P50), figure(s.P90), figure(s.P99), figure(s.P999), figure(s.Max)
	var a Advice
	add := func(t Topic, sev Severity, v time.Duration, format string, args ...any) {
		a.Recommendations = append(a.Recommendations, Recommendation{Topic: t, Severity: sev, Value: v, Message: fmt.Sprintf(format, args...)})
	}

	lease := q.VisibilityTimeout // what the time-to-DLQ check falls back on
	switch {
	case s.Processed == 0:
		add(TopicData, SeverityInfo, 0, "no message has been processed yet: no figures to size the lease from")
	default:
		if s.Processed < AdviceMinSamples {
			add(TopicData, SeverityWarn, 0, "only %s processed: percentiles are rough until %d (p99) and %d (p99.9)",
				count(s.Processed, "message"), AdviceMinSamples, AdviceTailSamples)
		}
		lease = s.adviseLease(q, &a, add)
	}

	// Time to DLQ.
	switch {
	case q.MaxReceiveCount == 0 && q.RetentionPeriod > 0:
		add(TopicTimeToDLQ, SeverityWarn, 0, "no redrive policy: a message that always fails is retried until retention (%s) deletes it, with no trace left",
			fmtDur(q.RetentionPeriod))
	case q.MaxReceiveCount == 0:
		// The queue's attributes are unknown.
	case lease > 0:
		n := time.Duration(q.MaxReceiveCount)
		ttd := n * lease
		if s.Processed > 0 {
			a.TimeToDLQ = ttd
		}
		// Judge the setting in force when it is known.
		judged := ttd
		text := fmt.Sprintf("maxReceiveCount %d × lease %s = %s", q.MaxReceiveCount, exactDur(lease), exactDur(ttd))
		if cur := q.VisibilityTimeout; cur > 0 && cur != lease {
			judged = n * cur
			text = fmt.Sprintf("maxReceiveCount %d × the current %s lease = %s (at the recommended %s lease: %s)",
				q.MaxReceiveCount, exactDur(cur), exactDur(judged), exactDur(lease), exactDur(ttd))
		}
		sev, why := SeverityInfo, ""
		switch r := q.RetentionPeriod; {
		case r > 0 && judged == r:
			sev, why = SeverityError, fmt.Sprintf("; that equals retention (%s): messages expire before they reach the DLQ", fmtDur(r))
		case r > 0 && judged > r:
			sev, why = SeverityError, fmt.Sprintf("; that is %s retention (%s): messages expire before they reach the DLQ", timesOver(judged, r), fmtDur(r))
		case r > 0 && judged > r/4:
			sev, why = SeverityWarn, fmt.Sprintf("; that is %s of retention (%s), over the quarter it should stay under: keep it far below", pct(ratio(judged, r)), fmtDur(r))
		case r > 0:
			why = fmt.Sprintf(", %s of retention (%s)", pct(ratio(judged, r)), fmtDur(r))
		}
		add(TopicTimeToDLQ, sev, ttd, "a message whose consumer crashes or times out on every attempt reaches the DLQ after %s%s; a handler that hangs is renewed up to the maximum lease duration on each attempt, so bound handlers with WithHandlerTimeout",
			text, why)
	}

	if s.Processed > 0 && q.ShutdownTimeout > 0 {
		budget := exactDur(q.ShutdownTimeout)
		share := about(s.ShareAbove(q.ShutdownTimeout))
		switch {
		case q.ShutdownTimeout < s.P90:
			add(TopicShutdown, SeverityWarn, q.ShutdownTimeout, "shutdown budget %s is below p90 (%s): %s of messages take longer than the budget, and a deploy cancels those in flight (ErrShutdown) for SQS to deliver again; raise the budget toward p99 (%s) and the orchestrator's kill timeout with it, or make the work resumable",
				budget, fmtDur(s.P90), share, fmtDur(s.P99))
		case q.ShutdownTimeout < s.P99:
			add(TopicShutdown, SeverityInfo, q.ShutdownTimeout, "shutdown budget %s is below p99 (%s): %s of messages take longer than the budget, and a deploy cuts those in flight short for SQS to deliver again",
				budget, fmtDur(s.P99), share)
		default:
			add(TopicShutdown, SeverityInfo, q.ShutdownTimeout, "shutdown budget %s covers p99 (%s); leases stay renewed while handlers drain, so a budget longer than the lease is fine, but the orchestrator must wait longer than the budget before it kills the process",
				budget, fmtDur(s.P99))
		}
	}

	s.adviseRedelivery(add)

	if s.CeilingHits > 0 {
		add(TopicCeiling, SeverityWarn, MaxVisibilityTimeout, "%s reached the maximum lease duration (%s): work that long cannot be held by an SQS lease; record the job durably, delete the message, and track the work elsewhere",
			count(s.CeilingHits, "message"), fmtDur(MaxVisibilityTimeout))
	}

	slices.SortStableFunc(a.Recommendations, func(x, y Recommendation) int { return int(y.Severity - x.Severity) })
	return a
}

// adviseLease adds the visibility and heartbeat recommendations and
// returns the recommended lease. The percentiles in s are figures (see
// Advise).
func (s Stats) adviseLease(q QueueSettings, a *Advice, add func(Topic, Severity, time.Duration, string, ...any)) time.Duration {
	constant, constBasis := derive("p99", s.P99, "2", double(s.P99))
	lease := constant
	tail := s.Processed >= AdviceTailSamples && s.P99 > 0 && float64(s.P999) >= AdviceTailRatio*float64(s.P99)
	near90, near90Basis := derive("p90", s.P90, "1.25", s.P90+s.P90/4)
	if tail && near90 < constant {
		lease = near90
		a.Heartbeat = true
		add(TopicHeartbeat, SeverityInfo, lease, "p99.9 (%s) is %s p99 (%s), a long tail: rather than a constant lease of %s (%s), which leaves a crashed consumer's messages invisible that long, lease %s (%s) and let renewals every third of the lease carry the tail; %s of messages outlive the first lease",
			fmtDur(s.P999), times(ratio(s.P999, s.P99)), fmtDur(s.P99), exactDur(constant), constBasis, exactDur(lease), near90Basis, about(s.ShareAbove(lease)))
	}
	a.VisibilityTimeout = lease

	basis := constBasis
	if a.Heartbeat {
		basis = near90Basis + "; renewals carry the tail"
	}
	rec := exactDur(lease)
	cur := q.VisibilityTimeout
	r := ratio(cur, lease)
	longer := s.ShareAbove(cur)
	switch {
	case cur == 0:
		add(TopicVisibility, SeverityInfo, lease, "lease %s (%s); a crashed consumer's messages come back after at most that long", rec, basis)
	case cur > 2*lease:
		add(TopicVisibility, SeverityWarn, lease, "lease %s is %s the %s the work needs (%s): a crashed consumer's messages stay invisible up to %s instead of %s, and time to DLQ grows with it; use %s",
			exactDur(cur), times(r), rec, basis, exactDur(cur), rec, rec)
	case cur < lease/2 && longer > 0.10:
		measured := ""
		if s.RenewalsPerMessage > 0 {
			measured = fmt.Sprintf(" (%s renewals per message measured)", sig2(s.RenewalsPerMessage))
		}
		add(TopicVisibility, SeverityWarn, lease, "lease %s is %s of the %s recommended (%s), and %s of messages take longer than it: those live on renewals%s, each one a chance to lose the lease; use %s",
			exactDur(cur), pct(r), rec, basis, about(longer), measured, rec)
	case cur == lease:
		add(TopicVisibility, SeverityInfo, lease, "lease %s is the one recommended (%s)", rec, basis)
	case r >= 0.8 && r <= 1.25:
		add(TopicVisibility, SeverityInfo, lease, "lease %s is close to the %s recommended (%s)", exactDur(cur), rec, basis)
	case cur > lease:
		add(TopicVisibility, SeverityInfo, lease, "lease %s is %s the %s recommended (%s): it works, but a crashed consumer's messages stay invisible up to %s instead of %s",
			exactDur(cur), times(r), rec, basis, exactDur(cur), rec)
	case longer == 0:
		add(TopicVisibility, SeverityInfo, lease, "lease %s is %s of the %s recommended (%s); no message measured took longer than it, but on a slower day some would live on renewals",
			exactDur(cur), pct(r), rec, basis)
	default:
		add(TopicVisibility, SeverityInfo, lease, "lease %s is %s of the %s recommended (%s); %s of messages take longer than it and live on renewals",
			exactDur(cur), pct(r), rec, basis, about(longer))
	}
	if raw := double(s.P99); raw > MaxVisibilityTimeout {
		add(TopicCeiling, SeverityWarn, MaxVisibilityTimeout, "p99 × 2 (%s) exceeds the %s limit of a lease: the slowest work cannot be held by one message; record it as a job and delete the message early",
			exactDur(raw), fmtDur(MaxVisibilityTimeout))
	}
	return lease
}

// derive turns raw, a figure of the work (name fig × factor), into a lease
// a person would configure, and explains how: "p99 8.5s × 2 = 17s",
// "p99 3ms × 2 = 6ms, raised to the 10s floor", "p90 95s × 1.25 =
// 118.75s, rounded up to 120s", "p99 7h × 2 = 14h, capped at the 12h
// maximum".
func derive(name string, fig time.Duration, factor string, raw time.Duration) (time.Duration, string) {
	rounded := roundLease(raw)
	lease := min(max(rounded, MinAdaptiveVisibility), MaxVisibilityTimeout)
	text := fmt.Sprintf("%s %s × %s = %s", name, exactDur(fig), factor, exactDur(raw))
	switch {
	case lease > rounded:
		text += ", raised to the " + exactDur(lease) + " floor"
	case lease < rounded:
		text += ", capped at the " + exactDur(lease) + " maximum"
	case rounded != raw:
		text += ", rounded up to " + exactDur(lease)
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

// adviseRedelivery reports the receive-count distribution.
func (s Stats) adviseRedelivery(add func(Topic, Severity, time.Duration, string, ...any)) {
	var total int64
	for _, v := range s.ReceiveCounts {
		total += v
	}
	total += s.Adopted
	if total == 0 {
		return
	}
	redelivered := s.Redeliveries()
	lapsed := s.Adopted + s.LeasesLost + s.LeasesExpired
	dist := fmtCounts(s.ReceiveCounts)
	switch {
	case lapsed > 0:
		add(TopicRedelivery, SeverityWarn, 0, "%s lapsed (%s adopted while still being handled, %d lost, %d expired): work outran its lease or renewals failed; receive counts %s",
			count(lapsed, "lease"), count(s.Adopted, "redelivery"), s.LeasesLost, s.LeasesExpired, dist)
	case redelivered > s.Released:
		add(TopicRedelivery, SeverityWarn, 0, "%s of receives were redeliveries (receive counts %s), more than the %s after failures explain: leases ran out before settlement (overrun, a crashed or killed consumer); this is the earliest sign of overrun",
			pct(float64(redelivered)/float64(total)), dist, count(s.Released, "release"))
	case redelivered > 0:
		add(TopicRedelivery, SeverityInfo, 0, "%s of receives were redeliveries (receive counts %s), no more than handler failures and releases explain",
			pct(float64(redelivered)/float64(total)), dist)
	default:
		add(TopicRedelivery, SeverityInfo, 0, "every receive was a first delivery (receive counts %s): no sign of overrun", dist)
	}
}

// roundLease rounds d up to a figure a person would configure: whole
// seconds up to a minute, 10 s steps up to 15 minutes, whole minutes up to
// two hours, 5-minute steps above.
func roundLease(d time.Duration) time.Duration {
	step := time.Second
	switch {
	case d > 2*time.Hour:
		step = 5 * time.Minute
	case d > 15*time.Minute:
		step = time.Minute
	case d > time.Minute:
		step = 10 * time.Second
	}
	if t := d.Truncate(step); t != d {
		if t > math.MaxInt64-step {
			return t
		}
		return t + step
	}
	return d
}

// figureStep is the precision the advice shows a measured duration with,
// about three significant digits: 1 µs below 1 ms, then a hundredth of
// the decade (10 µs from 1 ms, 100 µs from 10 ms, ... 100 ms from 10 s)
// up to a minute, 1 s above.
func figureStep(d time.Duration) time.Duration {
	if d >= time.Minute {
		return time.Second
	}
	step := time.Microsecond
	for decade := time.Millisecond; d >= decade; decade *= 10 {
		step *= 10
	}
	return step
}

// figure rounds a measured duration up to figureStep. Rounding up keeps
// what the advice says true of the number it prints ("budget 10s is below
// p99 (10.1s)", never "(10s)"), and keeps the lease what it would be from
// the exact figure: twice a figure is a multiple of twice its step (2 µs
// to 200 ms below a minute, 2 s above), which divides the step roundLease
// rounds twice that figure to (1 s, and 10 s or more above a minute), so
// rounding up first changes nothing.
func figure(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	step := figureStep(d)
	if t := d.Truncate(step); t != d {
		if t > math.MaxInt64-step {
			return t
		}
		return t + step
	}
	return d
}

// fmtDur formats d compactly at the advice's precision (figureStep,
// rounded to nearest): 250ms, 8.5s, 95s, 620s, 2m, 1h30m, 96h.
func fmtDur(d time.Duration) string {
	return exactDur(d.Round(figureStep(d)))
}

// exactDur formats d compactly without rounding: "6ms", "8.5s",
// "118.75s", "620s", "2m", "1h2m3s", "96h"; seconds up to 20 minutes
// (unless a whole number of minutes), h/m/s above.
func exactDur(d time.Duration) string {
	if d < time.Second {
		return d.String() // "6ms", "250µs", "1.25ms", "0s"
	}
	if d%time.Minute != 0 && d < 20*time.Minute {
		sec := strconv.FormatInt(int64(d/time.Second), 10)
		if frac := d % time.Second; frac != 0 {
			sec += strings.TrimRight(fmt.Sprintf(".%09d", int64(frac)), "0")
		}
		return sec + "s"
	}
	s := d.String() // "10m0s", "1h0m0s", "1h30m0s", "1h2m3s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ratio returns a/b as a float (0 when b is 0).
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// times formats a ratio above 1 as a factor: "1.9×", "3×", "25×" (one
// decimal below 10, whole above).
func times(r float64) string {
	if r >= 9.95 {
		return strconv.FormatFloat(math.Round(r), 'f', -1, 64) + "×"
	}
	return strconv.FormatFloat(math.Round(r*10)/10, 'f', -1, 64) + "×"
}

// timesOver formats how far a exceeds b, which it does: "1.3×", or "just
// over" when the factor would print as 1×.
func timesOver(a, b time.Duration) string {
	r := ratio(a, b)
	if math.Round(r*10) <= 10 {
		return "just over"
	}
	return times(r)
}

// sig2 formats f with two significant digits (whole above 10): "0.043",
// "1.5", "12".
func sig2(f float64) string {
	if f >= 9.95 {
		return strconv.FormatFloat(math.Round(f), 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', 2, 64)
}

// count formats n with noun, plural when n is not 1: "1 message", "3
// leases", "0 redeliveries".
func count(n int64, noun string) string {
	if n != 1 {
		switch {
		case strings.HasSuffix(noun, "y"):
			noun = strings.TrimSuffix(noun, "y") + "ies"
		default:
			noun += "s"
		}
	}
	return strconv.FormatInt(n, 10) + " " + noun
}

// pct formats a fraction as a percentage with sensible precision.
func pct(f float64) string {
	p := 100 * f
	switch {
	case p == 0:
		return "0%"
	case p < 0.1:
		return "<0.1%"
	case p < 10:
		return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(math.Round(p), 'f', -1, 64) + "%"
}

// about formats an estimated share: "about 8.2%", "under 0.1%".
func about(f float64) string {
	if p := 100 * f; p > 0 && p < 0.1 {
		return "under 0.1%"
	}
	return "about " + pct(f)
}

// fmtCounts formats a receive-count distribution as "1:9812 2:31 3:2".
func fmtCounts(m map[int]int64) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = strconv.Itoa(k) + ":" + strconv.FormatInt(m[k], 10)
	}
	return strings.Join(parts, " ")
}

// Package doctor judges an SQS queue's settings, and the figures a
// sqsconsumer.Consumer measured of its work, against the rules that keep
// messages from being lost or processed twice: a dead-letter queue with a
// sensible maxReceiveCount, time to DLQ far below retention, a DLQ that
// keeps messages longer than its source (the retention trap), a retention
// long enough to outlast an outage, long polling, a visibility timeout
// that fits the work (twice its p99, or a lease near p90 with renewals
// when the tail is long), a Lambda function (6 × its timeout plus the
// batching window), the shutdown budget, redeliveries, the 12-hour
// ceiling, and the messages in flight against SQS's in-flight quota. One
// set of rules serves both entry points:
//
//   - Check reads a queue (and its DLQ) through the SQS API and Analyze
//     judges attributes the caller already has; the work is known only by
//     Options.P99. The command cmd/sqsdoctor prints Check's Report.
//   - Advise judges a Consumer's Stats against its queue: the same checks,
//     with the work's whole distribution (percentiles, the share of
//     messages above a duration, redeliveries), and a recommended lease.
//
// For what is already in a dead-letter queue there are three operations,
// which the command sqsdoctor runs as "sqsdoctor dlq inspect|redrive|replay":
//
//   - InspectDLQ counts and peeks: ages, the reasons sqsconsumer recorded
//     (the sqsconsumer.error attribute) and the source queues, and says what
//     peeking cost (one receive per message).
//   - Redrive starts an SQS message move task back to the sources (or to a
//     queue), follows it, and cancels it when its context ends.
//   - Replay sends the messages a Filter selects to their sources itself, at a
//     rate, deleting each from the DLQ only after its send succeeded, with one
//     AuditRecord per message; it also handles messages SQS cannot move back
//     (those sqsconsumer sent to the DLQ, which name their source in
//     sqsconsumer.source).
//
// InspectDLQ and Replay receive, and a receive is never free: it raises the
// message's receive count, which a RedrivePolicy counts. So they receive only
// from a dead-letter queue (one a RedrivePolicy names) without a
// RedrivePolicy of its own, and refuse any other queue with a [PeekRefusal]
// before the first receive, unless their options' Force is set; BeforePeek
// says what the receives will do before they start.
//
// Comparative words in findings follow the figures they describe: "far
// below" means under a quarter, "far above" over four times, and every
// comparison of two durations prints their ratio. Each [Finding] also
// carries its figures in Values, for machines.
//
// Teams can call Check from a Go test, so CI fails when a queue's settings
// drift:
//
//	func TestOrdersQueueSettings(t *testing.T) {
//		client := sqs.NewFromConfig(cfg)
//		rep, err := doctor.Check(ctx, client, ordersURL, doctor.Options{P99: 40 * time.Second})
//		require.NoError(t, err)
//		require.NoError(t, rep.Err()) // fails on any error finding
//	}
//
// and a service can log advice when its Consumer stops:
//
//	rep, err := doctor.Check(ctx, client, queueURL, doctor.Options{})
//	// ... after Run returns:
//	adv := doctor.Advise(c.Stats(), rep.Queue, doctor.Options{ShutdownTimeout: 20 * time.Second})
//	for _, f := range adv.Findings {
//		logger.Log(ctx, f.Severity.Level(), "queue advice", "finding", f)
//	}
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Client is the part of the SQS API Check calls. *sqs.Client satisfies it.
type Client interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

var _ Client = (*sqs.Client)(nil)

// Severity ranks a Finding. The zero value is SeverityInfo.
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

// String returns "info", "warn" or "error" ("severity(N)" for an unknown
// value).
func (s Severity) String() string {
	if s >= 0 && int(s) < len(severityNames) {
		return severityNames[s]
	}
	return "severity(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText encodes the severity as its String, for JSON and logs; an
// unknown severity is an error.
func (s Severity) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(severityNames) {
		return nil, fmt.Errorf("doctor: unknown severity %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes "info", "warn" (or "warning") and "error"; any
// other text is an error naming it.
func (s *Severity) UnmarshalText(b []byte) error {
	switch string(b) {
	case "info":
		*s = SeverityInfo
	case "warn", "warning":
		*s = SeverityWarn
	case "error":
		*s = SeverityError
	default:
		return fmt.Errorf("doctor: unknown severity %q (want info, warn or error)", b)
	}
	return nil
}

// Level maps the severity to a slog level: Info, Warn, Error (Info for
// an unknown value).
func (s Severity) Level() slog.Level {
	switch s {
	case SeverityWarn:
		return slog.LevelWarn
	case SeverityError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// CheckName names one rule. Every Finding carries the check that made it.
type CheckName string

// The checks, in the order Analyze runs them.
const (
	// CheckRedrivePolicy: the queue has a dead-letter queue, and it exists.
	// Error when a standard queue has none (a message that always fails is
	// retried until retention deletes it); warn for FIFO, where blocking a
	// group may be preferred to reordering.
	CheckRedrivePolicy CheckName = "redrive_policy"
	// CheckMaxReceiveCount: maxReceiveCount is not 1. SQS may count a
	// receive the consumer never got, so 1 can move a message to the DLQ
	// without one real attempt (warn).
	CheckMaxReceiveCount CheckName = "max_receive_count"
	// CheckTimeToDLQ: maxReceiveCount × VisibilityTimeout, the time a
	// message whose consumer crashes on every attempt takes to reach the
	// DLQ, is far below (under a quarter of) MessageRetentionPeriod. Error
	// when not below it (messages expire first), warn at a quarter of it
	// or more.
	CheckTimeToDLQ CheckName = "time_to_dlq"
	// CheckDLQRetention: on a standard queue a message keeps its original
	// enqueue time when moved, so a DLQ whose retention is not longer than
	// the source's deletes a message at once if it spent that long in the
	// source (error). FIFO queues reset the time on the move (info).
	CheckDLQRetention CheckName = "dlq_retention"
	// CheckRetention: MessageRetentionPeriod outlasts an outage of the
	// consumers. Error below [MinRetention] (messages sent when an outage
	// begins expire before a working day's fix), warn below
	// [RecommendedRetention] (a weekend's outage loses them).
	CheckRetention CheckName = "retention"
	// CheckLongPolling: ReceiveMessageWaitTimeSeconds is above 0. Short
	// polling answers from a subset of servers: empty and false-empty
	// responses and more billed requests (warn).
	CheckLongPolling CheckName = "long_polling"
	// CheckData (Advise only): how far the figures can be trusted: info
	// when nothing was processed, warn below [MinSamples] messages.
	CheckData CheckName = "data"
	// CheckVisibilityP99 (with Options.P99, or Advise's Stats): the
	// visibility timeout fits the work. Without heartbeating it must cover
	// p99 × 2: below p99 is an error (at least 1 % of messages are
	// processed twice), below p99 × 2 a warning. With heartbeating (always
	// in Advise) the finding recommends a lease: p99 × 2 rounded up to a
	// figure a person would configure (see Advice.VisibilityTimeout),
	// never below sqsconsumer.MinAdaptiveVisibility nor above
	// sqsconsumer.MaxVisibilityTimeout; a lease more than twice it is a
	// warning (crashed work waits that long), as is one below half of it
	// that over 10 % of messages outlive, and one below
	// sqsconsumer.MinAdaptiveVisibility (too little time for a renewal to
	// land).
	CheckVisibilityP99 CheckName = "visibility_p99"
	// CheckHeartbeat (Advise only, info): the tail is long (p99.9 at least
	// [TailRatio] × p99 over [TailSamples] messages or more), so a lease
	// near p90 (p90 × 1.25) with renewals beats a constant sized for the
	// tail.
	CheckHeartbeat CheckName = "heartbeat"
	// CheckCeiling: work reaches the 12-hour limit of a lease
	// (sqsconsumer.MaxVisibilityTimeout): p99 × 2 above it, or, in Advise,
	// messages that reached it (warn).
	CheckCeiling CheckName = "ceiling"
	// CheckLambda (with Options.LambdaTimeout): VisibilityTimeout is at
	// least 6 × the function timeout + the batching window, AWS's rule for
	// an event source mapping (error below it).
	CheckLambda CheckName = "lambda_visibility"
	// CheckShutdown (with Options.ShutdownTimeout): without heartbeating, a
	// shutdown budget longer than VisibilityTimeout is pointless (warn):
	// the message is delivered again while the old consumer drains. With
	// the work's figures, a budget below p99 (or p90) cuts work short at
	// every deploy (warn).
	CheckShutdown CheckName = "shutdown"
	// CheckRedelivery (Advise only): the receive-count distribution. Warn
	// when leases lapsed (adopted, lost or expired) or when redeliveries
	// outnumber the releases after failures that explain them: the
	// earliest sign that work outruns its lease.
	CheckRedelivery CheckName = "redelivery"
	// CheckInFlight (Check, or a Queue with Counts): the messages in
	// flight (received, not yet deleted) against SQS's in-flight quota,
	// about 120,000 per queue (sqsconsumer.InFlightQuota), at which SQS
	// answers long polls with nothing and no error while messages wait
	// visible. Warn from nine tenths of it (sqsconsumer.InFlightNearQuota),
	// error at it with messages visible.
	CheckInFlight CheckName = "in_flight_quota"
)

// Thresholds of Advise.
const (
	// MinSamples is how many settled messages Advise wants before it
	// trusts a p99; below it, a CheckData warning says the figures are
	// rough.
	MinSamples = 100
	// TailSamples is how many settled messages a p99.9 needs before
	// Advise judges the tail by it.
	TailSamples = 1000
	// TailRatio is how far p99.9 must be above p99 to count as a long
	// tail: at 1.5 the slowest 0.1 % take half as long again as the p99,
	// so a constant sized for them freezes every crashed message far
	// longer than typical work needs. A long tail calls for a lease near
	// p90 with heartbeating, not a bigger constant.
	TailRatio = 1.5
)

// Retention thresholds of [CheckRetention].
const (
	// MinRetention is the shortest MessageRetentionPeriod that is not an
	// error finding: 24 hours. A consumer outage that begins when the team
	// leaves (18:00) is noticed the next morning (09:00, 15 hours later)
	// and fixed within that working day (8 hours more): 23 hours, rounded
	// up to a day. A message sent as the outage begins must still be in the
	// queue when consumers return.
	MinRetention = 24 * time.Hour
	// RecommendedRetention is the shortest MessageRetentionPeriod that is
	// not a warning: 4 days, SQS's default. It carries a message through an
	// outage from Friday evening to Monday morning (63 hours) with a
	// working day to spare.
	RecommendedRetention = 4 * 24 * time.Hour
)

// Options tells Check, Analyze and Advise about the consumers of the
// queue. Zero fields skip the checks that need them.
type Options struct {
	// P99 is the p99 of the consumers' receive-to-settle time, in-process
	// queueing included (sqsconsumer's Stats.P99). Advise ignores it and
	// reads the Stats.
	P99 time.Duration
	// LambdaTimeout is the timeout of a Lambda function that consumes the
	// queue through an event source mapping.
	LambdaTimeout time.Duration
	// BatchingWindow is the mapping's MaximumBatchingWindowInSeconds.
	BatchingWindow time.Duration
	// ShutdownTimeout is how long a consumer lets running handlers finish
	// when it stops (sqsconsumer's WithShutdownTimeout).
	ShutdownTimeout time.Duration
	// Heartbeat says the consumers renew visibility while they work, as
	// sqsconsumer does: the visibility timeout then bounds crash recovery
	// rather than the work. Advise always assumes it.
	Heartbeat bool
}

// Queue is what the checks read of a queue (ParseAttributes, Check). For
// Advise, VisibilityTimeout is the lease the consumers ask for
// (sqsconsumer's WithVisibilityTimeout, else the queue's), 0 when unknown;
// and a RetentionPeriod of 0 (which SQS never reports: its minimum is 60
// s) means the queue's attributes are unknown, so the checks that read
// them (redrive policy, time to DLQ, retention, long polling) are skipped.
type Queue struct {
	URL               string
	ARN               string
	FIFO              bool
	VisibilityTimeout time.Duration
	RetentionPeriod   time.Duration
	ReceiveWaitTime   time.Duration
	// Redrive is the RedrivePolicy, nil when the queue has none.
	Redrive *RedrivePolicy
	// Counts are the queue's message counts when they were read (Check),
	// nil when unknown.
	Counts *QueueCounts
}

// QueueCounts are a queue's approximate message counts, as SQS reported
// them: ApproximateNumberOfMessages (Visible) and
// ApproximateNumberOfMessagesNotVisible (InFlight: received, not yet
// deleted).
type QueueCounts struct {
	Visible  int64 `json:"visible"`
	InFlight int64 `json:"in_flight"`
}

// RedrivePolicy is a queue's dead-letter configuration.
type RedrivePolicy struct {
	DeadLetterTargetARN string `json:"dead_letter_target_arn"`
	MaxReceiveCount     int    `json:"max_receive_count"`
}

// String describes the queue in one line: its URL, type, visibility
// timeout, retention, long-poll wait and dead-letter queue.
func (q Queue) String() string {
	kind := "standard"
	if q.FIFO {
		kind = "FIFO"
	}
	dlq := "no DLQ"
	if q.Redrive != nil {
		dlq = fmt.Sprintf("DLQ %s after %d receives", arnName(q.Redrive.DeadLetterTargetARN), q.Redrive.MaxReceiveCount)
	}
	return fmt.Sprintf("%s (%s; visibility %s, retention %s, wait %s, %s)", q.URL, kind,
		fmtDur(q.VisibilityTimeout), fmtDur(q.RetentionPeriod), fmtDur(q.ReceiveWaitTime), dlq)
}

// queueJSON is Queue as the command's JSON prints it: durations in whole
// seconds, as SQS states them.
type queueJSON struct {
	URL               string         `json:"url"`
	ARN               string         `json:"arn,omitempty"`
	FIFO              bool           `json:"fifo"`
	VisibilityTimeout int64          `json:"visibility_timeout_seconds"`
	RetentionPeriod   int64          `json:"message_retention_period_seconds"`
	ReceiveWaitTime   int64          `json:"receive_message_wait_time_seconds"`
	Redrive           *RedrivePolicy `json:"redrive_policy,omitempty"`
	Counts            *QueueCounts   `json:"counts,omitempty"`
}

// MarshalJSON encodes the queue with durations in whole seconds (fields
// url, arn, fifo, visibility_timeout_seconds,
// message_retention_period_seconds, receive_message_wait_time_seconds,
// redrive_policy, counts).
func (q Queue) MarshalJSON() ([]byte, error) {
	return json.Marshal(queueJSON{
		URL: q.URL, ARN: q.ARN, FIFO: q.FIFO,
		VisibilityTimeout: int64(q.VisibilityTimeout / time.Second),
		RetentionPeriod:   int64(q.RetentionPeriod / time.Second),
		ReceiveWaitTime:   int64(q.ReceiveWaitTime / time.Second),
		Redrive:           q.Redrive,
		Counts:            q.Counts,
	})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (q *Queue) UnmarshalJSON(b []byte) error {
	var j queueJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*q = Queue{
		URL: j.URL, ARN: j.ARN, FIFO: j.FIFO,
		VisibilityTimeout: time.Duration(j.VisibilityTimeout) * time.Second,
		RetentionPeriod:   time.Duration(j.RetentionPeriod) * time.Second,
		ReceiveWaitTime:   time.Duration(j.ReceiveWaitTime) * time.Second,
		Redrive:           j.Redrive,
		Counts:            j.Counts,
	}
	return nil
}

// SQS's defaults for attributes a queue does not report.
const (
	defaultVisibility = 30 * time.Second
	defaultRetention  = 4 * 24 * time.Hour
)

// ParseAttributes reads a GetQueueAttributes answer (attribute names to
// SQS's string values). Missing attributes take SQS's defaults (visibility
// 30 s, retention 4 days, wait 0); a malformed value or RedrivePolicy is an
// error naming every attribute at fault.
func ParseAttributes(url string, attrs map[string]string) (Queue, error) {
	q, err := parseAttributes(url, attrs)
	if err != nil {
		return q, fmt.Errorf("doctor: %w", err)
	}
	return q, nil
}

// parseAttributes is ParseAttributes without the package's prefix on the
// error, for callers that add their own context.
func parseAttributes(url string, attrs map[string]string) (Queue, error) {
	q := Queue{URL: url, ARN: attrs["QueueArn"], FIFO: attrs["FifoQueue"] == "true",
		VisibilityTimeout: defaultVisibility, RetentionPeriod: defaultRetention}
	var errs []error
	secs := func(name string, dst *time.Duration) {
		v, ok := attrs[name]
		if !ok {
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > int64(maxDuration/time.Second) {
			errs = append(errs, fmt.Errorf("attribute %s: %q is not a number of seconds", name, v))
			return
		}
		*dst = time.Duration(n) * time.Second
	}
	secs("VisibilityTimeout", &q.VisibilityTimeout)
	secs("MessageRetentionPeriod", &q.RetentionPeriod)
	secs("ReceiveMessageWaitTimeSeconds", &q.ReceiveWaitTime)
	if _, ok := attrs["ApproximateNumberOfMessagesNotVisible"]; ok {
		q.Counts = &QueueCounts{}
		for name, dst := range map[string]*int64{"ApproximateNumberOfMessages": &q.Counts.Visible, "ApproximateNumberOfMessagesNotVisible": &q.Counts.InFlight} {
			v := attrs[name]
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				errs = append(errs, fmt.Errorf("attribute %s: %q is not a count", name, v))
				continue
			}
			*dst = n
		}
	}
	if v := attrs["RedrivePolicy"]; v != "" {
		p, err := parseRedrivePolicy(v)
		if err != nil {
			errs = append(errs, err)
		}
		q.Redrive = p
	}
	if !q.FIFO && strings.HasSuffix(url, ".fifo") {
		q.FIFO = true // older answers without FifoQueue
	}
	return q, joinErrors(errs)
}

// maxDuration is the longest time.Duration.
const maxDuration = time.Duration(1<<63 - 1)

// joinErrors joins errs on one line, separated by "; ", keeping each for
// errors.Is and errors.As; nil when errs is empty.
func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	args := make([]any, len(errs))
	for i, e := range errs {
		args[i] = e
	}
	return fmt.Errorf(strings.TrimSuffix(strings.Repeat("%w; ", len(errs)), "; "), args...)
}

func parseRedrivePolicy(v string) (*RedrivePolicy, error) {
	var raw struct {
		ARN   string          `json:"deadLetterTargetArn"`
		Count json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("RedrivePolicy %q is not JSON: %w", v, err)
	}
	// SQS accepts maxReceiveCount as a number or a string.
	n, err := strconv.Atoi(strings.Trim(string(raw.Count), `"`))
	if err != nil || n < 0 || raw.ARN == "" {
		return nil, fmt.Errorf("RedrivePolicy %q lacks deadLetterTargetArn or a numeric maxReceiveCount", v)
	}
	return &RedrivePolicy{DeadLetterTargetARN: raw.ARN, MaxReceiveCount: n}, nil
}

// Finding is one result of a check.
type Finding struct {
	Check    CheckName `json:"check"`
	Severity Severity  `json:"severity"`
	// Message says what was found, why it matters and what to change.
	Message string `json:"message"`
	// Values are the figures behind the finding, for machines; nil when
	// it has none. Durations are in seconds under keys ending in
	// "_seconds" (retention_seconds, dlq_retention_seconds,
	// visibility_timeout_seconds, time_to_dlq_seconds, p90_seconds,
	// p99_seconds, p999_seconds, receive_wait_seconds,
	// lambda_timeout_seconds, batching_window_seconds, shutdown_seconds,
	// and the bounds min_retention_seconds, recommended_retention_seconds,
	// min_visibility_seconds, max_visibility_seconds,
	// recommended_visibility_seconds, recommended_time_to_dlq_seconds,
	// required_visibility_seconds); max_receive_count, processed,
	// receives, redeliveries, releases, lapsed, ceiling_hits, visible,
	// in_flight and in_flight_quota are counts; share_above is the fraction (0 to 1) of messages held longer
	// than the duration judged; ratio is the figure the finding judges
	// over the bound it is compared with (time to DLQ over retention, DLQ
	// retention over the source's, visibility over the recommended or
	// required lease, p99.9 over p99, messages in flight over the
	// in-flight quota), present only when the bound is above zero.
	Values map[string]float64 `json:"values,omitempty"`
}

// String formats the finding as "error redrive_policy: ...".
func (f Finding) String() string {
	return f.Severity.String() + " " + string(f.Check) + ": " + f.Message
}

// LogValue makes a Finding log as a group: check, severity, message, and
// its values (a group of numbers) when it has any.
func (f Finding) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("check", string(f.Check)), slog.String("severity", f.Severity.String()), slog.String("message", f.Message)}
	if len(f.Values) > 0 {
		keys := slices.Sorted(maps.Keys(f.Values))
		vals := make([]slog.Attr, len(keys))
		for i, k := range keys {
			vals[i] = slog.Float64(k, f.Values[k])
		}
		attrs = append(attrs, slog.Attr{Key: "values", Value: slog.GroupValue(vals...)})
	}
	return slog.GroupValue(attrs...)
}

// worst returns the highest severity in fs (SeverityInfo when none).
func worst(fs []Finding) Severity {
	w := SeverityInfo
	for _, f := range fs {
		w = max(w, f.Severity)
	}
	return w
}

// Report is the result of Check.
type Report struct {
	Queue Queue `json:"queue"`
	// DLQ is the dead-letter queue, nil when there is none or it could not
	// be read.
	DLQ      *Queue    `json:"dlq,omitempty"`
	Findings []Finding `json:"findings"`
}

// Count returns how many findings have severity s.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Worst returns the highest severity found (SeverityInfo when none).
func (r *Report) Worst() Severity { return worst(r.Findings) }

// Err returns an error listing the error findings, nil when there are
// none: require.NoError(t, report.Err()) is a CI guard.
func (r *Report) Err() error {
	var msgs []string
	for _, f := range r.Findings {
		if f.Severity == SeverityError {
			msgs = append(msgs, f.String())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("doctor: %s: %d error findings:\n%s", r.Queue.URL, len(msgs), strings.Join(msgs, "\n"))
}

// Check reads the queue's attributes and its dead-letter queue's (found
// through RedrivePolicy's deadLetterTargetArn and GetQueueUrl), runs
// Analyze, and returns the report. It returns an error only when the
// queue itself cannot be read; a DLQ that does not exist or cannot be read
// is a finding. Check makes at most three SQS calls and is safe for
// concurrent use if c is.
func Check(ctx context.Context, c Client, queueURL string, opts Options) (*Report, error) {
	src, err := readQueue(ctx, c, queueURL)
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	rep := &Report{Queue: src}
	var dlqFinding *Finding
	if src.Redrive != nil {
		dlq, err := readDLQ(ctx, c, src.Redrive.DeadLetterTargetARN)
		values := map[string]float64{"max_receive_count": float64(src.Redrive.MaxReceiveCount)}
		switch {
		case err == nil:
			rep.DLQ = &dlq
		case isNotExist(err):
			dlqFinding = &Finding{CheckRedrivePolicy, SeverityError, fmt.Sprintf(
				"RedrivePolicy names %s, which does not exist: messages that exhaust maxReceiveCount have nowhere to go; create it or fix the policy",
				src.Redrive.DeadLetterTargetARN), values}
		default:
			dlqFinding = &Finding{CheckRedrivePolicy, SeverityWarn, fmt.Sprintf(
				"could not read the dead-letter queue (%v): its retention was not checked", err), values}
		}
	}
	rep.Findings = Analyze(src, rep.DLQ, opts)
	if dlqFinding != nil {
		for i, f := range rep.Findings { // replace the redrive policy's info line
			if f.Check == CheckRedrivePolicy {
				rep.Findings[i] = *dlqFinding
			}
		}
	}
	return rep, nil
}

// readQueue reads and parses the attributes of the queue at url. Its
// errors name the queue and carry no package prefix.
func readQueue(ctx context.Context, c Client, url string) (Queue, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return Queue{}, fmt.Errorf("reading the attributes of %s: %w", url, err)
	}
	q, err := parseAttributes(url, out.Attributes)
	if err != nil {
		return q, fmt.Errorf("the attributes of %s: %w", url, err)
	}
	return q, nil
}

// readDLQ finds the URL of the queue with the given ARN and reads it. Its
// errors name the ARN or URL and carry no package prefix.
func readDLQ(ctx context.Context, c Client, arn string) (Queue, error) {
	// arn:PARTITION:sqs:REGION:ACCOUNT:NAME
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
		return Queue{}, fmt.Errorf("%q is not an SQS queue ARN", arn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := c.GetQueueUrl(ctx, in)
	if err != nil {
		return Queue{}, fmt.Errorf("finding the URL of %s: %w", arn, err)
	}
	return readQueue(ctx, c, aws.ToString(out.QueueUrl))
}

func isNotExist(err error) bool {
	var nx *types.QueueDoesNotExist
	return errors.As(err, &nx)
}

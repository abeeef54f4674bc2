// Package doctor checks an SQS queue's settings against the rules that keep
// messages from being lost or processed twice: a dead-letter queue with a
// sensible maxReceiveCount, time to DLQ far below retention, a DLQ that
// keeps messages longer than its source (the retention trap), long polling,
// and a visibility timeout that fits the work (its p99), a Lambda function
// (6 × its timeout plus the batching window) and the shutdown budget.
//
// The command cmd/sqsdoctor prints a Report; teams can also call Check from
// a Go test, so CI fails when a queue's settings drift:
//
//	func TestOrdersQueueSettings(t *testing.T) {
//		client := sqs.NewFromConfig(cfg)
//		rep, err := doctor.Check(ctx, client, ordersURL, doctor.Options{P99: 40 * time.Second})
//		require.NoError(t, err)
//		require.NoError(t, rep.Err()) // fails on any error finding
//	}
//
// Analyze runs the same checks on attributes the caller already has (from
// infrastructure code, say) without calling SQS.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer"
)

// Client is the part of the SQS API Check calls. *sqs.Client satisfies it.
type Client interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

var _ Client = (*sqs.Client)(nil)

// Severity ranks a Finding: info (a figure worth knowing), warn (costs
// duplicates, latency or money), error (loses messages or processes many
// twice). It is the root package's Severity.
type Severity = sqsconsumer.Severity

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
	// DLQ, is far below MessageRetentionPeriod. Error when not below it
	// (messages expire first), warn above a quarter of it.
	CheckTimeToDLQ CheckName = "time_to_dlq"
	// CheckDLQRetention: on a standard queue a message keeps its original
	// enqueue time when moved, so a DLQ whose retention is not longer than
	// the source's can delete it almost at once (error). FIFO queues reset
	// the time on the move (info).
	CheckDLQRetention CheckName = "dlq_retention"
	// CheckLongPolling: ReceiveMessageWaitTimeSeconds is above 0. Short
	// polling answers from a subset of servers: empty and false-empty
	// responses and more billed requests (warn).
	CheckLongPolling CheckName = "long_polling"
	// CheckVisibilityP99 (with Options.P99): VisibilityTimeout is at least
	// p99 × 2. Without heartbeating, below p99 is an error (over 1 % of
	// messages are processed twice), below p99 × 2 a warning. With
	// heartbeating, a lease shorter than sqsconsumer.MinAdaptiveVisibility
	// or more than twice the recommended one is a warning.
	CheckVisibilityP99 CheckName = "visibility_p99"
	// CheckLambda (with Options.LambdaTimeout): VisibilityTimeout is at
	// least 6 × the function timeout + the batching window, AWS's rule for
	// an event source mapping (error below it).
	CheckLambda CheckName = "lambda_visibility"
	// CheckShutdown (with Options.ShutdownTimeout): without heartbeating, a
	// shutdown budget longer than VisibilityTimeout is pointless (warn):
	// the message is delivered again while the old consumer drains. With
	// Options.P99, a budget below p99 cuts work short at every deploy
	// (warn).
	CheckShutdown CheckName = "shutdown"
)

// Options tells Check about the consumers of the queue. Zero fields skip
// the checks that need them.
type Options struct {
	// P99 is the p99 of the consumers' receive-to-settle time, in-process
	// queueing included (sqsconsumer's Stats.P99).
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
	// rather than the work.
	Heartbeat bool
}

// Queue is what the checks read of a queue.
type Queue struct {
	URL               string
	ARN               string
	FIFO              bool
	VisibilityTimeout time.Duration
	RetentionPeriod   time.Duration
	ReceiveWaitTime   time.Duration
	// Redrive is the RedrivePolicy, nil when the queue has none.
	Redrive *RedrivePolicy
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
}

// MarshalJSON encodes the queue with durations in whole seconds (fields
// url, arn, fifo, visibility_timeout_seconds,
// message_retention_period_seconds, receive_message_wait_time_seconds,
// redrive_policy).
func (q Queue) MarshalJSON() ([]byte, error) {
	return json.Marshal(queueJSON{
		URL: q.URL, ARN: q.ARN, FIFO: q.FIFO,
		VisibilityTimeout: int64(q.VisibilityTimeout / time.Second),
		RetentionPeriod:   int64(q.RetentionPeriod / time.Second),
		ReceiveWaitTime:   int64(q.ReceiveWaitTime / time.Second),
		Redrive:           q.Redrive,
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
// error.
func ParseAttributes(url string, attrs map[string]string) (Queue, error) {
	q := Queue{URL: url, ARN: attrs["QueueArn"], FIFO: attrs["FifoQueue"] == "true",
		VisibilityTimeout: defaultVisibility, RetentionPeriod: defaultRetention}
	var errs []error
	secs := func(name string, dst *time.Duration) {
		v, ok := attrs[name]
		if !ok {
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("doctor: attribute %s: %q is not a number of seconds", name, v))
			return
		}
		*dst = time.Duration(n) * time.Second
	}
	secs("VisibilityTimeout", &q.VisibilityTimeout)
	secs("MessageRetentionPeriod", &q.RetentionPeriod)
	secs("ReceiveMessageWaitTimeSeconds", &q.ReceiveWaitTime)
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
	return q, errors.Join(errs...)
}

func parseRedrivePolicy(v string) (*RedrivePolicy, error) {
	var raw struct {
		ARN   string          `json:"deadLetterTargetArn"`
		Count json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("doctor: RedrivePolicy %q is not JSON: %w", v, err)
	}
	// SQS accepts maxReceiveCount as a number or a string.
	n, err := strconv.Atoi(strings.Trim(string(raw.Count), `"`))
	if err != nil || raw.ARN == "" {
		return nil, fmt.Errorf("doctor: RedrivePolicy %q lacks deadLetterTargetArn or a numeric maxReceiveCount", v)
	}
	return &RedrivePolicy{DeadLetterTargetARN: raw.ARN, MaxReceiveCount: n}, nil
}

// Finding is one result of a check.
type Finding struct {
	Check    CheckName `json:"check"`
	Severity Severity  `json:"severity"`
	// Message says what was found, why it matters and what to change.
	Message string `json:"message"`
}

// String formats the finding as "error redrive_policy: ...".
func (f Finding) String() string {
	return f.Severity.String() + " " + string(f.Check) + ": " + f.Message
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
func (r *Report) Worst() Severity {
	w := sqsconsumer.SeverityInfo
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w
}

// Err returns an error listing the error findings, nil when there are
// none: require.NoError(t, report.Err()) is a CI guard.
func (r *Report) Err() error {
	var msgs []string
	for _, f := range r.Findings {
		if f.Severity == sqsconsumer.SeverityError {
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
		return nil, err
	}
	rep := &Report{Queue: src}
	var dlqFinding *Finding
	if src.Redrive != nil {
		dlq, err := readDLQ(ctx, c, src.Redrive.DeadLetterTargetARN)
		switch {
		case err == nil:
			rep.DLQ = &dlq
		case isNotExist(err):
			dlqFinding = &Finding{CheckRedrivePolicy, sqsconsumer.SeverityError, fmt.Sprintf(
				"RedrivePolicy names %s, which does not exist: messages that exhaust maxReceiveCount have nowhere to go; create it or fix the policy",
				src.Redrive.DeadLetterTargetARN)}
		default:
			dlqFinding = &Finding{CheckRedrivePolicy, sqsconsumer.SeverityWarn, fmt.Sprintf(
				"could not read the dead-letter queue %s (%v): its retention was not checked",
				src.Redrive.DeadLetterTargetARN, err)}
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

func readQueue(ctx context.Context, c Client, url string) (Queue, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return Queue{}, fmt.Errorf("doctor: reading the attributes of %s: %w", url, err)
	}
	return ParseAttributes(url, out.Attributes)
}

func readDLQ(ctx context.Context, c Client, arn string) (Queue, error) {
	// arn:PARTITION:sqs:REGION:ACCOUNT:NAME
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
		return Queue{}, fmt.Errorf("doctor: %q is not an SQS queue ARN", arn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := c.GetQueueUrl(ctx, in)
	if err != nil {
		return Queue{}, fmt.Errorf("doctor: finding the URL of %s: %w", arn, err)
	}
	return readQueue(ctx, c, aws.ToString(out.QueueUrl))
}

func isNotExist(err error) bool {
	var nx *types.QueueDoesNotExist
	return errors.As(err, &nx)
}

// Analyze runs every check on src and, when src has a redrive policy, its
// dead-letter queue dlq (nil if unknown: the retention check is skipped).
// It calls nothing and is safe for concurrent use. Every check that runs
// reports, so a clean queue gets info findings saying what was checked.
func Analyze(src Queue, dlq *Queue, opts Options) []Finding {
	var fs []Finding
	add := func(c CheckName, s Severity, format string, args ...any) {
		fs = append(fs, Finding{c, s, fmt.Sprintf(format, args...)})
	}
	info, warn, fail := sqsconsumer.SeverityInfo, sqsconsumer.SeverityWarn, sqsconsumer.SeverityError
	vis := src.VisibilityTimeout

	// Dead-letter queue.
	if rp := src.Redrive; rp == nil {
		if src.FIFO {
			add(CheckRedrivePolicy, warn, "no redrive policy: a message that always fails blocks its message group until retention (%s) deletes it; add a FIFO dead-letter queue unless keeping the group's order matters more than moving on",
				fmtDur(src.RetentionPeriod))
		} else {
			add(CheckRedrivePolicy, fail, "no redrive policy: a message that always fails is received again and again until retention (%s) deletes it, with nothing left to investigate; add a dead-letter queue",
				fmtDur(src.RetentionPeriod))
		}
	} else {
		add(CheckRedrivePolicy, info, "dead-letter queue %s after %d receives", arnName(rp.DeadLetterTargetARN), rp.MaxReceiveCount)
		if rp.MaxReceiveCount == 1 {
			add(CheckMaxReceiveCount, warn, "maxReceiveCount 1: SQS may count a receive that never reached a consumer, so a message can land in the DLQ without one real attempt, and one crash or timeout is enough; use 3 or more")
		}
		ttd := time.Duration(rp.MaxReceiveCount) * vis
		what := fmt.Sprintf("maxReceiveCount %d × VisibilityTimeout %s = %s", rp.MaxReceiveCount, fmtDur(vis), fmtDur(ttd))
		lower := ""
		if !src.FIFO {
			lower = " (a lower bound: a message received three times may be moved to the back of the queue)"
		}
		switch r := src.RetentionPeriod; {
		case ttd >= r:
			add(CheckTimeToDLQ, fail, "%s to the DLQ is not below MessageRetentionPeriod %s: messages expire before they reach the DLQ, taking the evidence with them; shorten the lease (heartbeat instead) or lower maxReceiveCount", what, fmtDur(r))
		case ttd > r/4:
			add(CheckTimeToDLQ, warn, "%s to the DLQ%s is over a quarter of MessageRetentionPeriod %s: keep it far below, and remember a poison message holds a worker on every attempt", what, lower, fmtDur(r))
		default:
			add(CheckTimeToDLQ, info, "%s to the DLQ%s, far below MessageRetentionPeriod %s", what, lower, fmtDur(r))
		}
		if dlq != nil {
			switch {
			case src.FIFO:
				add(CheckDLQRetention, info, "FIFO queues reset the enqueue time when a message moves, so the DLQ keeps it %s from the move", fmtDur(dlq.RetentionPeriod))
			case dlq.RetentionPeriod <= src.RetentionPeriod:
				add(CheckDLQRetention, fail, "the DLQ keeps messages %s, not longer than the source's %s: a moved message keeps its original enqueue time, so one that spent days in the source can expire from the DLQ almost at once; set the DLQ's MessageRetentionPeriod to 14 days (1209600)",
					fmtDur(dlq.RetentionPeriod), fmtDur(src.RetentionPeriod))
			default:
				add(CheckDLQRetention, info, "the DLQ keeps messages %s, longer than the source's %s: a moved message has at least %s there to be noticed",
					fmtDur(dlq.RetentionPeriod), fmtDur(src.RetentionPeriod), fmtDur(dlq.RetentionPeriod-src.RetentionPeriod))
			}
		}
	}

	// Polling.
	if src.ReceiveWaitTime == 0 {
		add(CheckLongPolling, warn, "ReceiveMessageWaitTimeSeconds is 0 (short polling): a receive without its own WaitTimeSeconds answers at once from a subset of servers, so consumers get empty and false-empty answers and pay for more requests; set it to 20 (sqsconsumer sends WaitTimeSeconds 20 itself)")
	} else {
		add(CheckLongPolling, info, "long polling: receives wait up to %s for messages", fmtDur(src.ReceiveWaitTime))
	}

	// Visibility against the work.
	if p := opts.P99; p > 0 {
		rec := 2 * p
		switch {
		case opts.Heartbeat && vis < sqsconsumer.MinAdaptiveVisibility:
			add(CheckVisibilityP99, warn, "VisibilityTimeout %s is below %s: renewals at a third of the lease leave too little time for a renewal to land; use at least %s",
				fmtDur(vis), fmtDur(sqsconsumer.MinAdaptiveVisibility), fmtDur(sqsconsumer.MinAdaptiveVisibility))
		case opts.Heartbeat && vis > 2*sqsconsumer.AdaptiveVisibility(p, 0, sqsconsumer.MaxVisibilityTimeout):
			best := sqsconsumer.AdaptiveVisibility(p, 0, sqsconsumer.MaxVisibilityTimeout)
			add(CheckVisibilityP99, warn, "VisibilityTimeout %s is more than twice p99 %s × 2 = %s while consumers renew their leases: a crashed consumer's messages stay invisible %s for nothing; use %s",
				fmtDur(vis), fmtDur(p), fmtDur(best), fmtDur(vis), fmtDur(best))
		case opts.Heartbeat:
			add(CheckVisibilityP99, info, "VisibilityTimeout %s with renewals: work past it is carried by heartbeats (p99 %s)", fmtDur(vis), fmtDur(p))
		case vis < p:
			add(CheckVisibilityP99, fail, "VisibilityTimeout %s is below p99 %s: over 1%% of messages outlive their lease and are delivered to a second consumer while the first still works; use at least p99 × 2 = %s, or renew leases while working",
				fmtDur(vis), fmtDur(p), fmtDur(rec))
		case vis < rec:
			add(CheckVisibilityP99, warn, "VisibilityTimeout %s is below p99 × 2 = %s: a slow day pushes the tail past the lease and into duplicates; raise it, or renew leases while working",
				fmtDur(vis), fmtDur(rec))
		default:
			add(CheckVisibilityP99, info, "VisibilityTimeout %s covers p99 × 2 = %s", fmtDur(vis), fmtDur(rec))
		}
	}

	// Lambda.
	if t := opts.LambdaTimeout; t > 0 {
		need := 6*t + opts.BatchingWindow
		if vis < need {
			add(CheckLambda, fail, "VisibilityTimeout %s is below 6 × the function timeout %s + the batching window %s = %s: Lambda retries a throttled batch within the lease and a slow invocation's batch is delivered again; set it to at least %d seconds",
				fmtDur(vis), fmtDur(t), fmtDur(opts.BatchingWindow), fmtDur(need), int64(ceilSeconds(need)/time.Second))
		} else {
			add(CheckLambda, info, "VisibilityTimeout %s covers 6 × the function timeout %s + the batching window %s = %s",
				fmtDur(vis), fmtDur(t), fmtDur(opts.BatchingWindow), fmtDur(need))
		}
	}

	// Shutdown.
	if s := opts.ShutdownTimeout; s > 0 {
		reported := false
		if !opts.Heartbeat && s > vis {
			add(CheckShutdown, warn, "the shutdown budget %s is longer than VisibilityTimeout %s: without renewals the lease of a message still being drained runs out and SQS hands it to another consumer, so draining that long only duplicates work; renew leases while draining (sqsconsumer does: -heartbeat) or keep the budget below the lease",
				fmtDur(s), fmtDur(vis))
			reported = true
		}
		if opts.P99 > 0 && s < opts.P99 {
			add(CheckShutdown, warn, "the shutdown budget %s is below p99 %s: work in flight at a deploy is cut short and delivered again; raise the budget (and the orchestrator's kill timeout) toward p99, or make the work resumable",
				fmtDur(s), fmtDur(opts.P99))
			reported = true
		}
		if !reported {
			add(CheckShutdown, info, "shutdown budget %s fits the lease and the work", fmtDur(s))
		}
	}
	return fs
}

// arnName returns the queue name of an SQS ARN (the ARN itself if it has
// no colon).
func arnName(arn string) string {
	return arn[strings.LastIndexByte(arn, ':')+1:]
}

func ceilSeconds(d time.Duration) time.Duration {
	if t := d.Truncate(time.Second); t != d {
		return t + time.Second
	}
	return d
}

// fmtDur formats d for people: 500ms, 30s, 620s, 2m, 4d, 1d12h.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.String()
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d >= 48*time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d%time.Minute != 0 && d < 20*time.Minute:
		return strconv.FormatInt(int64(d.Round(time.Second)/time.Second), 10) + "s"
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

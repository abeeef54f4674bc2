// Package doctor checks an SQS queue's settings against the rules that keep
// messages from being lost or processed twice: a dead-letter queue with a
// sensible maxReceiveCount, time to DLQ far below retention, a DLQ that
// keeps messages longer than its source (the retention trap), a retention
// long enough to outlast an outage, long polling, and a visibility timeout
// that fits the work (its p99), a Lambda function (6 × its timeout plus the
// batching window) and the shutdown budget.
//
// Comparative words in findings follow the figures they describe: "far
// below" means under a quarter, "far above" over four times, and every
// comparison of two durations prints their ratio. Each [Finding] also
// carries its figures in Values, for machines.
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
	"math"
	"math/bits"
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
	// CheckVisibilityP99 (with Options.P99): VisibilityTimeout is at least
	// p99 × 2. Without heartbeating, below p99 is an error (at least 1 %
	// of messages are processed twice), below p99 × 2 a warning. With
	// heartbeating, a lease shorter than sqsconsumer.MinAdaptiveVisibility
	// or more than twice the recommended one
	// (sqsconsumer.AdaptiveVisibility) is a warning.
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
	// visibility_timeout_seconds, time_to_dlq_seconds, p99_seconds,
	// receive_wait_seconds, lambda_timeout_seconds,
	// batching_window_seconds, shutdown_seconds, and the bounds
	// min_retention_seconds, recommended_retention_seconds,
	// min_visibility_seconds, recommended_visibility_seconds,
	// required_visibility_seconds); max_receive_count is a count; ratio is
	// the figure the finding judges over the bound it is compared with
	// (time to DLQ over retention, DLQ retention over the source's,
	// visibility over the recommended or required lease), present only
	// when the bound is above zero.
	Values map[string]float64 `json:"values,omitempty"`
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
			dlqFinding = &Finding{CheckRedrivePolicy, sqsconsumer.SeverityError, fmt.Sprintf(
				"RedrivePolicy names %s, which does not exist: messages that exhaust maxReceiveCount have nowhere to go; create it or fix the policy",
				src.Redrive.DeadLetterTargetARN), values}
		default:
			dlqFinding = &Finding{CheckRedrivePolicy, sqsconsumer.SeverityWarn, fmt.Sprintf(
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

// Analyze runs every check on src and, when src has a redrive policy, its
// dead-letter queue dlq (nil if unknown: the retention check is skipped).
// It calls nothing and is safe for concurrent use. Every check that runs
// reports, so a clean queue gets info findings saying what was checked.
func Analyze(src Queue, dlq *Queue, opts Options) []Finding {
	var fs []Finding
	add := func(c CheckName, s Severity, v values, format string, args ...any) {
		fs = append(fs, Finding{c, s, fmt.Sprintf(format, args...), v})
	}
	info, warn, fail := sqsconsumer.SeverityInfo, sqsconsumer.SeverityWarn, sqsconsumer.SeverityError
	vis, ret := src.VisibilityTimeout, src.RetentionPeriod

	// Dead-letter queue.
	if rp := src.Redrive; rp == nil {
		v := values{}.secs("retention_seconds", ret)
		if src.FIFO {
			add(CheckRedrivePolicy, warn, v, "no redrive policy: a message that always fails blocks its message group until retention (%s) deletes it; add a FIFO dead-letter queue unless keeping the group's order matters more than moving on",
				fmtDur(ret))
		} else {
			add(CheckRedrivePolicy, fail, v, "no redrive policy: a message that always fails is received again and again until retention (%s) deletes it, with nothing left to investigate; add a dead-letter queue",
				fmtDur(ret))
		}
	} else {
		n := float64(rp.MaxReceiveCount)
		add(CheckRedrivePolicy, info, values{"max_receive_count": n}, "dead-letter queue %s after %d receives", arnName(rp.DeadLetterTargetARN), rp.MaxReceiveCount)
		if rp.MaxReceiveCount == 1 {
			add(CheckMaxReceiveCount, warn, values{"max_receive_count": n}, "maxReceiveCount 1: SQS may count a receive that never reached a consumer, so a message can land in the DLQ without one real attempt, and one crash or timeout is enough; use 3 or more")
		}
		ttd := mulDur(vis, rp.MaxReceiveCount)
		v := values{"max_receive_count": n}.secs("visibility_timeout_seconds", vis).secs("time_to_dlq_seconds", ttd).
			secs("retention_seconds", ret).ratio(ttd, ret)
		what := fmt.Sprintf("maxReceiveCount %d × VisibilityTimeout %s = %s to the DLQ", rp.MaxReceiveCount, fmtDur(vis), fmtDur(ttd))
		lower := ""
		if !src.FIFO {
			lower = " (a lower bound: a message received three times may be moved to the back of the queue)"
		}
		vsRet := compare(ttd, ret, "MessageRetentionPeriod "+fmtDur(ret))
		switch {
		case ttd >= ret:
			add(CheckTimeToDLQ, fail, v, "%s is %s: messages expire before they reach the DLQ, taking the evidence with them; shorten the lease (heartbeat instead) or lower maxReceiveCount", what, vsRet)
		case !farBelow(ttd, ret):
			add(CheckTimeToDLQ, warn, v, "%s is %s, not under a quarter of it: a message that fails for a while expires before it reaches the DLQ, and a poison message holds a worker on every attempt; shorten the lease (heartbeat instead) or lower maxReceiveCount", what+lower, vsRet)
		default:
			add(CheckTimeToDLQ, info, v, "%s, %s", what+lower, vsRet)
		}
		if dlq != nil {
			dret := dlq.RetentionPeriod
			switch {
			case src.FIFO:
				add(CheckDLQRetention, info, values{}.secs("dlq_retention_seconds", dret),
					"FIFO queues reset the enqueue time when a message moves, so the DLQ keeps it %s from the move", fmtDur(dret))
			case dret <= ret:
				add(CheckDLQRetention, fail, values{}.secs("dlq_retention_seconds", dret).secs("retention_seconds", ret).ratio(dret, ret),
					"the DLQ keeps messages %s, %s: a moved message keeps its original enqueue time, so one that spent %s in the source expires from the DLQ as soon as it moves; set the DLQ's MessageRetentionPeriod to 14 days (1209600)",
					fmtDur(dret), compare(dret, ret, "the source's "+fmtDur(ret)), fmtDur(dret))
			default:
				add(CheckDLQRetention, info, values{}.secs("dlq_retention_seconds", dret).secs("retention_seconds", ret).ratio(dret, ret),
					"the DLQ keeps messages %s, %s: a moved message has at least %s there to be noticed",
					fmtDur(dret), compare(dret, ret, "the source's "+fmtDur(ret)), fmtDur(dret-ret))
			}
		}
	}

	// Retention against an outage.
	{
		v := values{}.secs("retention_seconds", ret).secs("min_retention_seconds", MinRetention).secs("recommended_retention_seconds", RecommendedRetention)
		switch {
		case ret < MinRetention:
			add(CheckRetention, fail, v, "MessageRetentionPeriod %s is below %s: a message sent when the consumers stop at the end of a working day expires before they are fixed the next day; raise it to at least %s (%d), better 4 days or more",
				fmtDur(ret), fmtDur(MinRetention), fmtDur(MinRetention), int64(MinRetention/time.Second))
		case ret < RecommendedRetention:
			add(CheckRetention, warn, v, "MessageRetentionPeriod %s is below %s: an outage from Friday evening to Monday morning (63h) %s; raise it to %s (%d) or more",
				fmtDur(ret), fmtDur(RecommendedRetention), weekendLoss(ret), fmtDur(RecommendedRetention), int64(RecommendedRetention/time.Second))
		default:
			add(CheckRetention, info, v, "MessageRetentionPeriod %s outlasts an outage from Friday evening to Monday morning (63h)", fmtDur(ret))
		}
	}

	// Polling.
	if src.ReceiveWaitTime == 0 {
		add(CheckLongPolling, warn, values{"receive_wait_seconds": 0}, "ReceiveMessageWaitTimeSeconds is 0 (short polling): a receive without its own WaitTimeSeconds answers at once from a subset of servers, so consumers get empty and false-empty answers and pay for more requests; set it to 20 (sqsconsumer sends WaitTimeSeconds 20 itself)")
	} else {
		add(CheckLongPolling, info, values{}.secs("receive_wait_seconds", src.ReceiveWaitTime), "long polling: receives wait up to %s for messages", fmtDur(src.ReceiveWaitTime))
	}

	// Visibility against the work.
	if p := opts.P99; p > 0 {
		v := values{}.secs("visibility_timeout_seconds", vis).secs("p99_seconds", p)
		rec := 2 * p
		if opts.Heartbeat {
			rec = sqsconsumer.AdaptiveVisibility(p, 0, sqsconsumer.MaxVisibilityTimeout)
		}
		v = v.secs("recommended_visibility_seconds", rec).ratio(vis, rec)
		switch {
		case opts.Heartbeat && vis < sqsconsumer.MinAdaptiveVisibility:
			add(CheckVisibilityP99, warn, v.secs("min_visibility_seconds", sqsconsumer.MinAdaptiveVisibility),
				"VisibilityTimeout %s is below %s: renewals at a third of the lease leave too little time for a renewal to land; use at least %s",
				fmtDur(vis), fmtDur(sqsconsumer.MinAdaptiveVisibility), fmtDur(sqsconsumer.MinAdaptiveVisibility))
		case opts.Heartbeat && vis > 2*rec:
			add(CheckVisibilityP99, warn, v, "VisibilityTimeout %s is %s while consumers renew their leases: a crashed consumer's messages stay invisible %s for nothing; use %s (p99 %s × 2, at least %s)",
				fmtDur(vis), compare(vis, rec, "the recommended lease "+fmtDur(rec)), fmtDur(vis), fmtDur(rec), fmtDur(p), fmtDur(sqsconsumer.MinAdaptiveVisibility))
		case opts.Heartbeat:
			add(CheckVisibilityP99, info, v, "VisibilityTimeout %s with renewals: work past it is carried by heartbeats (p99 %s)", fmtDur(vis), fmtDur(p))
		case vis < p:
			add(CheckVisibilityP99, fail, v, "VisibilityTimeout %s is below p99 %s: at least 1%% of messages outlive their lease and are delivered to a second consumer while the first still works; use at least p99 × 2 = %s, or renew leases while working",
				fmtDur(vis), fmtDur(p), fmtDur(rec))
		case vis < rec:
			add(CheckVisibilityP99, warn, v, "VisibilityTimeout %s is %s: a slow day pushes the tail past the lease and into duplicates; raise it, or renew leases while working",
				fmtDur(vis), compare(vis, rec, "p99 × 2 = "+fmtDur(rec)))
		default:
			add(CheckVisibilityP99, info, v, "VisibilityTimeout %s covers p99 × 2 = %s", fmtDur(vis), fmtDur(rec))
		}
	}

	// Lambda.
	if t := opts.LambdaTimeout; t > 0 {
		need := 6*t + opts.BatchingWindow
		v := values{}.secs("visibility_timeout_seconds", vis).secs("lambda_timeout_seconds", t).secs("batching_window_seconds", opts.BatchingWindow).
			secs("required_visibility_seconds", need).ratio(vis, need)
		if vis < need {
			add(CheckLambda, fail, v, "VisibilityTimeout %s is %s: Lambda retries a throttled batch within the lease and a slow invocation's batch is delivered again; set it to at least %d seconds",
				fmtDur(vis), compare(vis, need, fmt.Sprintf("6 × the function timeout %s + the batching window %s = %s", fmtDur(t), fmtDur(opts.BatchingWindow), fmtDur(need))),
				int64(ceilSeconds(need)/time.Second))
		} else {
			add(CheckLambda, info, v, "VisibilityTimeout %s covers 6 × the function timeout %s + the batching window %s = %s",
				fmtDur(vis), fmtDur(t), fmtDur(opts.BatchingWindow), fmtDur(need))
		}
	}

	// Shutdown.
	if s := opts.ShutdownTimeout; s > 0 {
		v := values{}.secs("shutdown_seconds", s).secs("visibility_timeout_seconds", vis)
		if opts.P99 > 0 {
			v = v.secs("p99_seconds", opts.P99)
		}
		reported := false
		if !opts.Heartbeat && s > vis {
			add(CheckShutdown, warn, v, "the shutdown budget %s is longer than VisibilityTimeout %s: without renewals the lease of a message still being drained runs out and SQS hands it to another consumer, so draining that long only duplicates work; renew leases while draining (sqsconsumer does: -heartbeat) or keep the budget below the lease",
				fmtDur(s), fmtDur(vis))
			reported = true
		}
		if opts.P99 > 0 && s < opts.P99 {
			add(CheckShutdown, warn, v, "the shutdown budget %s is below p99 %s: work in flight at a deploy is cut short and delivered again; raise the budget (and the orchestrator's kill timeout) toward p99, or make the work resumable",
				fmtDur(s), fmtDur(opts.P99))
			reported = true
		}
		if !reported {
			add(CheckShutdown, info, v, "shutdown budget %s fits the lease and the work", fmtDur(s))
		}
	}
	return fs
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

// secs records d in seconds under key.
func (v values) secs(key string, d time.Duration) values {
	v[key] = d.Seconds()
	return v
}

// ratio records x / y under "ratio" when y is above zero.
func (v values) ratio(x, y time.Duration) values {
	if y > 0 {
		v["ratio"] = float64(x) / float64(y)
	}
	return v
}

// mulDur returns d × n, saturating instead of overflowing.
func mulDur(d time.Duration, n int) time.Duration {
	if d <= 0 || n <= 0 {
		return 0
	}
	if d > maxDuration/time.Duration(n) {
		return maxDuration
	}
	return d * time.Duration(n)
}

// farBelow reports whether x is under a quarter of y (exactly, without
// rounding).
func farBelow(x, y time.Duration) bool { return cmpScaled(x, 4, y) < 0 }

// farAbove reports whether x is over four times y (exactly).
func farAbove(x, y time.Duration) bool { return cmpScaled(y, 4, x) < 0 }

// cmpScaled compares a × k with b, for non-negative a and b, without
// overflow: -1, 0 or +1.
func cmpScaled(a time.Duration, k uint64, b time.Duration) int {
	hi, lo := bits.Mul64(uint64(max(a, 0)), k)
	switch bb := uint64(max(b, 0)); {
	case hi > 0 || lo > bb:
		return 1
	case lo < bb:
		return -1
	}
	return 0
}

// relation says in words how x compares with y; the words follow the
// ratio x / y: "far below" under 1/4, "below" under 1, "equal to",
// "above" up to 4, "far above" over 4.
func relation(x, y time.Duration) string {
	switch {
	case x == y:
		return "equal to"
	case x < y && farBelow(x, y):
		return "far below"
	case x < y:
		return "below"
	case farAbove(x, y):
		return "far above"
	}
	return "above"
}

// compare describes x against y, named what: "far below what (0.043%)",
// "below what (80%)", "equal to what", "above what (1.25×)", "far above
// what (90×)".
func compare(x, y time.Duration, what string) string {
	r := relation(x, y)
	if r == "equal to" || y <= 0 {
		return r + " " + what
	}
	return r + " " + what + " (" + fmtRatio(x, y) + ")"
}

// fmtRatio formats x / y (y > 0) so that it never contradicts the
// relation: under 1 as a percentage rounded down, with two significant
// digits below 10% ("99%" for 0.999, "0.043%", "<0.01%" when smaller);
// from 1 as a multiple rounded up ("1.01×" for 1.001, "90×").
func fmtRatio(x, y time.Duration) string {
	x, y = max(x, 0), max(y, 1)
	switch {
	case cmpScaled(y, 10, x) <= 0: // x >= 10y
		return strconv.FormatUint(mulDiv(x, 1, y, true), 10) + "×"
	case x >= y:
		return fixed(mulDiv(x, 100, y, true), 2) + "×"
	case cmpScaled(x, 10, y) >= 0:
		return strconv.FormatUint(mulDiv(x, 100, y, false), 10) + "%"
	}
	for d, scale := 1, uint64(1000); d <= 3; d, scale = d+1, scale*10 {
		if n := mulDiv(x, scale, y, false); n >= 10 {
			return fixed(n, d) + "%"
		}
	}
	return "<0.01%"
}

// mulDiv returns a × k / b (b > 0) rounded down or up, computed in 128
// bits; math.MaxUint64 when the quotient does not fit.
func mulDiv(a time.Duration, k uint64, b time.Duration, up bool) uint64 {
	hi, lo := bits.Mul64(uint64(a), k)
	if hi >= uint64(b) {
		return math.MaxUint64
	}
	q, rem := bits.Div64(hi, lo, uint64(b))
	if up && rem != 0 && q < math.MaxUint64 {
		q++
	}
	return q
}

// fixed formats n / 10^d with d decimals, trailing zeros dropped.
func fixed(n uint64, d int) string {
	s := strconv.FormatUint(n, 10)
	if len(s) <= d {
		s = strings.Repeat("0", d-len(s)+1) + s
	}
	whole, frac := s[:len(s)-d], strings.TrimRight(s[len(s)-d:], "0")
	if frac == "" {
		return whole
	}
	return whole + "." + frac
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

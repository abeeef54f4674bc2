package sqsconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/internal/scaling"
)

// SQS's in-flight quota: messages received and not yet deleted, per
// queue. AWS documents about 120,000 for most standard queues, and that
// at the quota a long poll answers with no message and no error (a short
// poll gets OverLimit)
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html),
// and 120,000 for FIFO queues, where SQS returns no error either
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-fifo.html;
// older pages give 20,000 for FIFO). A Consumer's own holdings are bounded
// by WithConcurrency and WithMaxReadAhead, but a queue gets there with
// many replicas reading ahead, or with failed messages waiting out long
// retry visibilities (RetryAfter and WithBackoff allow up to 12 h) through
// an outage.
const (
	// InFlightQuota is the in-flight quota AWS documents per queue, for
	// standard and FIFO queues alike.
	InFlightQuota = 120_000
	// InFlightNearQuota is what Health and package doctor count as near
	// it: nine tenths (SQS's counts are approximate).
	InFlightNearQuota = InFlightQuota / 10 * 9
)

// quotaEmpties is how many receives in a row that came back with nothing
// make a Consumer without the scaling signal read the queue's counts, at
// most once every quotaCheckEvery: an idle queue then costs one
// GetQueueAttributes call every 5 minutes (8,640 a month, about $0.0035
// at $0.40 per million requests), on top of its long polls. With
// WithScaling the signal's own readings serve, and no call is added.
const (
	quotaEmpties    = 3
	quotaCheckEvery = 5 * time.Minute
)

// quotaWatch notices a queue at its in-flight quota: receives that come
// back with nothing while SQS counts messages visible, and nearly the
// quota in flight. The run's pollers tell it of each receive's answer
// (answered); when that says so, the run reads the counts on a goroutine
// of its own (read); Health asks (warning). Set up by init, before Run's
// receives.
type quotaWatch struct {
	client   Client
	queueURL string
	scaler   *scaler    // WithScaling: its readings serve; nil when off
	ev       *eventSink // for the warning's log line

	empties atomic.Int64 // receives in a row answered with no message

	mu      sync.Mutex      // guards the fields below
	checked time.Time       // when a read was last started
	last    scaling.Reading // the latest counts read, At zero before any
}

// init sets the watch up for the queue at queueURL.
func (q *quotaWatch) init(c Client, queueURL string, sc *scaler, ev *eventSink) {
	q.client, q.queueURL, q.scaler, q.ev = c, queueURL, sc, ev
}

// answered records a receive answered with got messages, and returns
// whether the queue's counts are due to be read (by the caller, with
// read): quotaEmpties empty answers in a row, no read for
// quotaCheckEvery, and no scaling signal to read them instead.
func (q *quotaWatch) answered(got int, now time.Time) bool {
	if got > 0 {
		q.empties.Store(0)
		return false
	}
	if q.empties.Add(1) < quotaEmpties || q.scaler != nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.checked.IsZero() && now.Sub(q.checked) < quotaCheckEvery {
		return false
	}
	q.checked = now
	return true
}

// read reads the queue's counts for the in-flight quota's check, bounded
// by ctx and a call timeout, and logs a warning when the queue is at the
// quota.
func (q *quotaWatch) read(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, scalingCallTimeout)
	out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.queueURL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	cancel()
	var c scaling.Reading
	if err == nil {
		c, err = queueCounts(out)
	}
	if err != nil {
		q.ev.log(slog.LevelDebug, "sqsconsumer: could not read the queue's counts for the in-flight quota's check", "error", err)
		return
	}
	c.At = time.Now()
	q.mu.Lock()
	q.last = c
	q.mu.Unlock()
	if w := q.warning(c.At); w != "" {
		q.ev.log(slog.LevelWarn, "sqsconsumer: "+w, "visible", c.Visible, "in_flight", c.InFlight)
	}
}

// warning is Health's sentence for a queue at its in-flight quota, ""
// when it is not: the latest counts (the scaling signal's, or read's),
// read within two reading periods, show messages visible and at least
// InFlightNearQuota in flight, while the latest receives came back empty.
func (q *quotaWatch) warning(now time.Time) string {
	if q.empties.Load() < quotaEmpties {
		return ""
	}
	var c scaling.Reading
	stale := 2 * quotaCheckEvery
	if q.scaler != nil {
		c, stale = q.scaler.lastCounts(), 2*q.scaler.p.Interval
	} else {
		q.mu.Lock()
		c = q.last
		q.mu.Unlock()
	}
	if c.At.IsZero() || now.Sub(c.At) > stale || c.Visible == 0 || c.InFlight < InFlightNearQuota {
		return ""
	}
	return fmt.Sprintf("the latest %d receives came back empty while SQS counted %d messages visible and %d in flight, near the in-flight quota of about %d per queue, at which SQS answers long polls with nothing and no error: find what holds messages without deleting them (many replicas reading ahead: lower WithMaxReadAhead; failed messages waiting out long retry visibilities: shorter backoffs or a dead-letter queue; handlers that never delete), spread the work over more queues, or ask AWS Support for a higher quota",
		q.empties.Load(), c.Visible, c.InFlight, InFlightQuota)
}

package doctor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Defaults and limits of ReplayOptions.
const (
	// DefaultReplayRate is Replay's default pace, in messages per second.
	DefaultReplayRate = 10.0
	// DefaultReplayLease is how long Replay keeps each message it received
	// hidden by default: long enough for a scan of thousands of messages at the
	// default rate. A message Replay is not done with (not matching, not sent)
	// is released when the run ends; if the process dies, it reappears after
	// the lease.
	DefaultReplayLease = 15 * time.Minute
)

// Audit outcomes: what Replay did with one message that matched the filter.
const (
	// AuditReplayed: sent to the target, then deleted from the DLQ.
	AuditReplayed = "replayed"
	// AuditDryRun: would have been sent (DryRun); left in the DLQ.
	AuditDryRun = "would_replay"
	// AuditSkipped: not sent, left in the DLQ: it has nowhere to go (no source
	// and no Destination), an earlier message of its FIFO group was not
	// replayed, or Max was reached.
	AuditSkipped = "skipped"
	// AuditSendFailed: the send failed; the message stays in the DLQ. After a
	// timeout or a lost connection the send may have reached SQS all the same,
	// so the target may hold a copy too.
	AuditSendFailed = "send_failed"
	// AuditNotDeleted: sent, but the delete from the DLQ failed: the message is
	// in both queues, and replaying it again would send a second copy (which a
	// FIFO target drops within its 5-minute deduplication window).
	AuditNotDeleted = "sent_not_deleted"
)

// AuditRecord is one line of Replay's audit, for a message that matched the
// filter. It encodes as one JSON object with every field, "" when not known or
// not applicable.
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Outcome string    `json:"outcome"`
	// MessageID is the message's id in the DLQ; NewMessageID the id of the
	// copy the target accepted (replayed, sent_not_deleted).
	MessageID    string `json:"message_id"`
	NewMessageID string `json:"new_message_id"`
	DLQ          string `json:"dlq"`
	// Target is the queue URL the message was (or would be) sent to.
	Target          string    `json:"target"`
	Source          string    `json:"source"`
	Reason          string    `json:"reason"`
	GroupID         string    `json:"group_id"`
	DeduplicationID string    `json:"deduplication_id"`
	SentAt          time.Time `json:"sent_at"`
	ReceiveCount    int       `json:"receive_count"`
	// Error says why the message was skipped or what failed.
	Error string `json:"error"`
}

// ReplayOptions tunes Replay.
type ReplayOptions struct {
	// Filter selects the messages to replay; the zero Filter selects all.
	Filter Filter
	// Destination is the URL of the queue to send them to; "" sends each to its
	// source (DeadLetterQueueSourceArn, else the sqsconsumer.source attribute).
	Destination string
	// Rate is the most messages sent per second (> 0); 0 means
	// DefaultReplayRate.
	Rate float64
	// DryRun reports what would be sent, sending and deleting nothing.
	DryRun bool
	// Lease is the visibility timeout of the messages Replay receives, whole
	// seconds from 1 s to 12 h; 0 means DefaultReplayLease.
	Lease time.Duration
	// Max stops after this many messages matched (0: no limit).
	Max int
	// KeepReason keeps the sqsconsumer.error, .receive_count and .source
	// attributes on the replayed copy; by default they are dropped, so the copy
	// carries the attributes it was first sent with.
	KeepReason bool
	// Audit, when set, is called once per matching message, when its outcome is
	// final, on Replay's goroutine.
	Audit func(AuditRecord)
	// Force receives from a queue Replay would otherwise refuse (see
	// PeekRefusal): one that no queue's RedrivePolicy names, or one with a
	// RedrivePolicy of its own, whose maxReceiveCount the receives count toward
	// (a dry run's too).
	Force bool
	// BeforePeek, when set, is called once before the first receive with what
	// the receives will do.
	BeforePeek func(PeekPlan)
}

// ReplayResult counts what Replay did.
type ReplayResult struct {
	Examined    int  `json:"examined"` // distinct messages received from the DLQ
	Matched     int  `json:"matched"`
	Replayed    int  `json:"replayed"`
	WouldReplay int  `json:"would_replay"`
	Skipped     int  `json:"skipped"`
	SendFailed  int  `json:"send_failed"`
	NotDeleted  int  `json:"sent_not_deleted"`
	Released    int  `json:"released"` // messages made visible again at the end
	Interrupted bool `json:"interrupted"`
}

// Complete reports whether every matching message was replayed (or, in a dry run,
// would be) and the run was not interrupted.
func (r ReplayResult) Complete() bool {
	return r.Skipped == 0 && r.SendFailed == 0 && r.NotDeleted == 0 && !r.Interrupted
}

// Replay sends the messages of the dead-letter queue at dlqURL that match
// opts.Filter to their source queue (or opts.Destination), one at a time at most
// opts.Rate per second, and deletes each from the DLQ only after its send
// succeeded: a crash between the two leaves the message in both queues, never in
// neither. The copy keeps the body, message attributes (without sqsconsumer's
// unless KeepReason), AWSTraceHeader, MessageGroupId and MessageDeduplicationId;
// it is a new message to the target (new MessageId, receive count 0).
//
// Replay receives the DLQ's messages with opts.Lease as visibility timeout and
// keeps those it does not replay hidden until it ends, then releases them, so
// that each is examined once; each examined message's ApproximateReceiveCount
// rises by one. On a FIFO DLQ a group's messages are replayed in order: once one
// is not replayed (it does not match, is skipped, or its send fails), the later
// ones of its group are skipped, and SQS returns no more of that group in this run.
//
// Unless opts.Force, Replay receives only from a dead-letter queue (one a
// RedrivePolicy names) without a RedrivePolicy of its own: on any other queue
// its receives, a dry run's too, would hide live work or count toward a
// maxReceiveCount and so move messages. It then returns a *PeekRefusal
// (wrapping ErrUnsafePeek) before any receive.
//
// When ctx ends, Replay finishes the message in hand (its send and delete run on a
// context of their own), sends no more, releases what it holds and returns an
// error wrapping ErrInterrupted. Other errors: bad options, a DLQ that cannot be
// read, a receive that fails. The result counts what was done either way.
func Replay(ctx context.Context, c DLQClient, dlqURL string, opts ReplayOptions) (ReplayResult, error) {
	var res ReplayResult
	if err := opts.fill(); err != nil {
		return res, err
	}
	q, counts, err := readCounters(ctx, c, dlqURL)
	if err != nil {
		return res, fmt.Errorf("doctor: %w", err)
	}
	srcs, err := listSources(ctx, c, dlqURL)
	srcsErr := ""
	if err != nil {
		srcsErr = err.Error()
	}
	plan, err := checkPeek(q, counts[0], srcs, srcsErr, 0, opts.Lease, opts.Force)
	if err != nil {
		return res, err
	}
	if opts.BeforePeek != nil {
		opts.BeforePeek(plan)
	}
	rp := replayer{c: c, dlq: q, opts: opts, res: &res, sources: &sourceResolver{c: c}, failedGroups: map[string]bool{}}
	var hs []held
	seen := map[string]bool{}
	var runErr error
scan:
	for {
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		got, err := receiveDLQ(ctx, c, dlqURL, 10, opts.Lease)
		if err != nil {
			if ctx.Err() != nil {
				res.Interrupted = true
			} else {
				runErr = fmt.Errorf("doctor: %w", err)
			}
			break
		}
		fresh := 0
		for i, m := range got {
			h := held{aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle)}
			if ctx.Err() != nil || rp.full() {
				res.Interrupted = ctx.Err() != nil
				for _, rest := range got[i:] {
					hs = append(hs, held{aws.ToString(rest.MessageId), aws.ToString(rest.ReceiptHandle)})
				}
				break scan
			}
			if seen[h.id] {
				hs = append(hs, h) // its lease ran out during the run
				continue
			}
			seen[h.id] = true
			fresh++
			res.Examined++
			if !rp.handle(ctx, m) {
				hs = append(hs, h)
			}
		}
		if fresh == 0 {
			break
		}
	}
	n, rerr := release(ctx, c, dlqURL, hs)
	res.Released = n
	switch {
	case runErr != nil:
		return res, runErr
	case res.Interrupted:
		return res, fmt.Errorf("%w (%v): %d of %d matching messages replayed", ErrInterrupted, context.Cause(ctx), res.Replayed, res.Matched)
	case rerr != nil:
		return res, fmt.Errorf("doctor: %w (they stay hidden for up to %s)", rerr, fmtDur(opts.Lease))
	}
	return res, nil
}

func (o *ReplayOptions) fill() error {
	if o.Rate == 0 {
		o.Rate = DefaultReplayRate
	}
	if !(o.Rate > 0) || math.IsInf(o.Rate, 0) {
		return fmt.Errorf("doctor: ReplayOptions.Rate %v: must be a positive number of messages per second", o.Rate)
	}
	if o.Lease == 0 {
		o.Lease = DefaultReplayLease
	}
	if err := checkVisibility("ReplayOptions.Lease", o.Lease); err != nil {
		return err
	}
	if o.Max < 0 {
		return fmt.Errorf("doctor: ReplayOptions.Max %d: must not be negative", o.Max)
	}
	return nil
}

// replayer is the state of one Replay run.
type replayer struct {
	c            DLQClient
	dlq          Queue
	opts         ReplayOptions
	res          *ReplayResult
	sources      *sourceResolver
	lastSend     time.Time
	failedGroups map[string]bool // FIFO groups with a message not replayed
}

// handle decides about one received message and reports whether it left the DLQ.
func (rp *replayer) handle(ctx context.Context, m types.Message) (gone bool) {
	d := parseDeadLetter(m)
	now := time.Now()
	if !rp.opts.Filter.Match(d, now) {
		rp.holdGroup(d)
		return false
	}
	rp.res.Matched++
	rec := AuditRecord{MessageID: d.ID, DLQ: rp.dlq.URL, Source: d.Source, Reason: d.Reason, GroupID: d.GroupID,
		DeduplicationID: d.DeduplicationID, SentAt: d.SentAt, ReceiveCount: d.ReceiveCount}
	skip := func(why string) bool {
		rp.res.Skipped++
		rp.holdGroup(d)
		rec.Outcome, rec.Error = AuditSkipped, why
		rp.audit(rec)
		return false
	}
	if rp.dlq.FIFO && rp.failedGroups[d.GroupID] {
		return skip("an earlier message of its group was not replayed")
	}
	target := rp.opts.Destination
	if target == "" {
		u, err := rp.sources.url(ctx, d.Source)
		if err != nil {
			return skip(err.Error())
		}
		target = u
	}
	rec.Target = target
	if rp.opts.DryRun {
		rp.res.WouldReplay++
		rec.Outcome = AuditDryRun
		rp.audit(rec)
		return false
	}
	if err := sleepCtx(ctx, time.Until(nextSend(rp.lastSend, rp.opts.Rate, time.Now()))); err != nil {
		// Interrupted before this message was sent: it stays, untouched.
		rp.res.Matched--
		return false
	}
	rp.lastSend = time.Now()
	// The send and the delete run to the end even when ctx ends meanwhile: an
	// interrupted send leaves its outcome unknown, an interrupted delete a copy.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	out, err := rp.c.SendMessage(wctx, rp.sendInput(d, target))
	if err != nil {
		rp.res.SendFailed++
		rp.holdGroup(d)
		rec.Outcome, rec.Error = AuditSendFailed, err.Error()
		rp.audit(rec)
		return false
	}
	rec.NewMessageID = aws.ToString(out.MessageId)
	if _, err := rp.c.DeleteMessage(wctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(rp.dlq.URL), ReceiptHandle: m.ReceiptHandle}); err != nil {
		rp.res.NotDeleted++
		rec.Outcome, rec.Error = AuditNotDeleted, err.Error()
		rp.audit(rec)
		return false
	}
	rp.res.Replayed++
	rec.Outcome = AuditReplayed
	rp.audit(rec)
	return true
}

// full reports whether Max messages matched already.
func (rp *replayer) full() bool { return rp.opts.Max > 0 && rp.res.Matched >= rp.opts.Max }

// holdGroup notes that a message of d's FIFO group stays in the DLQ, so that the
// later ones of the group are not replayed out of order.
func (rp *replayer) holdGroup(d DeadLetter) {
	if rp.dlq.FIFO {
		rp.failedGroups[d.GroupID] = true
	}
}

func (rp *replayer) audit(r AuditRecord) {
	if rp.opts.Audit != nil {
		r.Time = time.Now()
		rp.opts.Audit(r)
	}
}

// sendInput is the copy of d sent to target.
func (rp *replayer) sendInput(d DeadLetter, target string) *sqs.SendMessageInput {
	attrs := d.Attributes
	if !rp.opts.KeepReason {
		attrs = maps.Clone(attrs)
		for _, k := range []string{AttrReason, AttrReceiveCount, AttrSource} {
			delete(attrs, k)
		}
	}
	if len(attrs) == 0 {
		attrs = nil
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(target), MessageBody: aws.String(d.Body), MessageAttributes: attrs}
	if d.TraceHeader != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(d.TraceHeader)},
		}
	}
	if d.GroupID != "" {
		in.MessageGroupId = aws.String(d.GroupID)
	}
	if rp.dlq.FIFO {
		dedup := d.DeduplicationID
		if dedup == "" {
			dedup = d.ID
		}
		in.MessageDeduplicationId = aws.String(dedup)
	}
	return in
}

// nextSend is when the next send may start, at most rate per second: now, or
// 1/rate after the last one when that is later. A zero last allows it at once.
func nextSend(last time.Time, rate float64, now time.Time) time.Time {
	if last.IsZero() {
		return now
	}
	next := last.Add(time.Duration(float64(time.Second) / rate))
	if next.Before(now) {
		return now
	}
	return next
}

// Filter selects dead-letter messages by reason, source, age, body or message
// attribute. The zero Filter selects every message. Make one with ParseFilter.
type Filter struct {
	terms []filterTerm
}

type filterTerm struct {
	expr  string
	key   string // reason, source, age, body, attr
	attr  string // for key attr
	op    byte   // '=', '~', '>', '<'
	value string
	age   time.Duration
}

// ParseFilter reads filter expressions; a message must match all of them.
// Each is KEY OP VALUE:
//
//	reason~TEXT   sqsconsumer.error contains TEXT (letter case ignored); reason=TEXT: equals
//	source=NAME   the source queue's name, ARN or URL is NAME; source~TEXT: contains TEXT
//	age>DURATION  sent (SentTimestamp) longer ago than DURATION (90s, 30m, 2h, 3d); age<DURATION
//	body~TEXT     the body contains TEXT; body=TEXT: equals
//	attr.NAME=V   message attribute NAME's value is V; attr.NAME~TEXT: contains TEXT
//
// A bad expression is an error naming it.
func ParseFilter(exprs ...string) (Filter, error) {
	var f Filter
	for _, e := range exprs {
		t, err := parseTerm(e)
		if err != nil {
			return Filter{}, fmt.Errorf("doctor: filter %q: %w", e, err)
		}
		f.terms = append(f.terms, t)
	}
	return f, nil
}

func parseTerm(e string) (filterTerm, error) {
	i := strings.IndexAny(e, "=~<>")
	if i <= 0 {
		return filterTerm{}, errors.New("want KEY OP VALUE, with OP one of = ~ > < (e.g. reason~timeout, age>1h, attr.tenant=acme)")
	}
	t := filterTerm{expr: e, key: strings.TrimSpace(e[:i]), op: e[i], value: e[i+1:]}
	if name, ok := strings.CutPrefix(t.key, "attr."); ok {
		if name == "" {
			return t, errors.New("attr. needs an attribute name, as in attr.tenant=acme")
		}
		t.key, t.attr = "attr", name
	}
	switch t.key {
	case "reason", "source", "body", "attr":
		if t.op != '=' && t.op != '~' {
			return t, fmt.Errorf("%s takes = or ~, not %c", t.key, t.op)
		}
	case "age":
		if t.op != '>' && t.op != '<' {
			return t, fmt.Errorf("age takes > or <, not %c", t.op)
		}
		d, err := parseAge(t.value)
		if err != nil {
			return t, err
		}
		t.age = d
	default:
		return t, fmt.Errorf("unknown key %q (want reason, source, age, body or attr.NAME)", t.key)
	}
	return t, nil
}

// parseAge reads a Go duration, or whole days as "3d".
func parseAge(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err == nil && days >= 0 {
			return time.Duration(days) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q is not a duration (such as 90s, 30m, 2h or 3d)", v)
	}
	return d, nil
}

// Match reports whether d matches every expression of the filter at time now.
func (f Filter) Match(d DeadLetter, now time.Time) bool {
	for _, t := range f.terms {
		if !t.match(d, now) {
			return false
		}
	}
	return true
}

// String lists the filter's expressions, joined by " and "; "all messages" for the
// zero Filter.
func (f Filter) String() string {
	if len(f.terms) == 0 {
		return "all messages"
	}
	exprs := make([]string, len(f.terms))
	for i, t := range f.terms {
		exprs[i] = t.expr
	}
	return strings.Join(exprs, " and ")
}

func (t filterTerm) match(d DeadLetter, now time.Time) bool {
	text := func(got string) bool {
		if t.op == '=' {
			return got == t.value
		}
		return strings.Contains(strings.ToLower(got), strings.ToLower(t.value))
	}
	switch t.key {
	case "reason":
		return text(d.Reason)
	case "body":
		return text(d.Body)
	case "source":
		if t.op == '=' {
			return d.Source != "" && (d.Source == t.value || queueName(d.Source) == t.value)
		}
		return text(d.Source)
	case "attr":
		a, ok := d.Attributes[t.attr]
		if !ok {
			return false
		}
		v := aws.ToString(a.StringValue)
		if a.StringValue == nil && a.BinaryValue != nil {
			v = string(a.BinaryValue)
		}
		return text(v)
	case "age":
		if d.SentAt.IsZero() {
			return false
		}
		age := now.Sub(d.SentAt)
		if t.op == '>' {
			return age > t.age
		}
		return age < t.age
	}
	return false
}

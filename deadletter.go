package sqsconsumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// The message attributes a Consumer adds to a message it moves to the
// dead-letter queue, in the order it adds them while there is room (SQS
// allows 10 message attributes; the message's own always come first).
const (
	// dlqAttrError holds the handler's error text, cut to dlqErrorMax bytes.
	dlqAttrError = "sqsconsumer.error"
	// dlqAttrReceiveCount holds the ApproximateReceiveCount of the failed delivery.
	dlqAttrReceiveCount = "sqsconsumer.receive_count"
	// dlqAttrSource holds the source queue's ARN (its URL when the ARN
	// could not be read).
	dlqAttrSource = "sqsconsumer.source"
)

// dlqErrorMax bounds the error text carried in dlqAttrError, in bytes.
const dlqErrorMax = 1024

// maxMessageAttributes is SQS's limit on message attributes per message
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html).
const maxMessageAttributes = 10

// moveCallTimeout bounds one SendMessage to the dead-letter queue (the
// client's own retries included).
const moveCallTimeout = 30 * time.Second

// WithDeadLetterQueue sets the queue, by URL, to which a message whose
// handler returned a Permanent error is moved at once. Default: the
// deadLetterTargetArn of the queue's RedrivePolicy, read at Run (SQS keeps
// a dead-letter queue in the source's account and region, so its URL is
// the source URL's scheme and host with the ARN's account and name). The
// dead-letter queue must be of the source's type: FIFO (a ".fifo" name)
// for a FIFO queue, standard otherwise; Run fails when it is not. It must
// not be the source queue itself, where a moved message would come
// straight back and fail again forever: New refuses a URL equal to the
// queue's (scheme and host compared without case, a default port and a
// trailing slash ignored), and Run a dead-letter queue whose QueueArn is
// the source's, or a RedrivePolicy naming the source itself (which SQS
// accepts) when this option is not given.
//
// The move sends the message to the dead-letter queue with SendMessage
// (the Client must have that method, as *sqs.Client does) and deletes it
// from the source only after SQS accepted the send: a crash between the
// two leaves a copy in both queues, never none. The copy has the body,
// the message attributes and the AWSTraceHeader of the original, and, as
// room under SQS's 10 attributes allows, in this order:
// "sqsconsumer.error" (String: the handler's error, at most 1024 bytes),
// "sqsconsumer.receive_count" (Number) and "sqsconsumer.source" (String:
// the source queue's ARN). The original's attributes are never dropped;
// what does not fit is left out (the reason is logged with the message
// ID). A send SQS refuses for good (such as a copy over the size limit
// with the reason attached) is tried once more without the added
// attributes. On a FIFO dead-letter queue the copy keeps its
// MessageGroupId, and its MessageDeduplicationId is the original's
// MessageId, so a second move within SQS's 5-minute deduplication window
// (after a crash between send and delete) is dropped by SQS. The next
// message of the group starts only after the delete.
//
// When the move cannot be made (no dead-letter queue, a client without
// SendMessage, a failed send) the message is settled as an ordinary
// failure: released for a retry after its backoff, to reach the
// dead-letter queue through the redrive policy, if any. A missing
// dead-letter queue is logged once per Run.
func WithDeadLetterQueue(queueURL string) Option {
	return option(func(s *settings) {
		if err := checkQueueURL(queueURL); err != nil {
			s.errs = append(s.errs, fmt.Errorf("WithDeadLetterQueue: %w", err))
			return
		}
		s.deadLetterURL = queueURL
	})
}

// WithRequireDeadLetterQueue makes Run refuse a queue without a
// dead-letter queue: one whose RedrivePolicy names none (SQS then
// redrives nothing) when WithDeadLetterQueue was not given either (or was
// given with a client that cannot send to it). Without a dead-letter
// queue a message whose handler always fails, Permanent errors included,
// is retried for as long as the queue keeps it (its retention period, up
// to 14 days), at the cost of a receive each time; see
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html.
//
// Run then returns, before receiving anything, an error wrapping
// ErrInvalidOption that names the queue and both ways to fix it: set a
// RedrivePolicy on the queue, or pass WithDeadLetterQueue. A queue whose
// attributes could not be read (GetQueueAttributes denied, when
// WithVisibilityTimeout let Run go on without them) is refused too,
// unless WithDeadLetterQueue names the dead-letter queue; an error that
// can heal (throttling, a 5xx, the network) on that read is retried until
// SQS answers, even with WithVisibilityTimeout, since the requirement
// needs the RedrivePolicy (Health names the error meanwhile). The RedrivePolicy's
// maxReceiveCount is not judged. Default: off (a queue without one runs,
// and the first Permanent error logs one warning). A later option cannot
// turn it off: a platform's bundle (Options) that holds it binds every
// Consumer made with it. Consumer only; Settings reports it as
// require_dead_letter_queue.
func WithRequireDeadLetterQueue() Option {
	return option(func(s *settings) { s.requireDLQ = true })
}

// requireDeadLetter is WithRequireDeadLetterQueue's check at Run's start,
// given the dead-letter queue deadLetterFor worked out and the source
// queue's attributes (attrErr: why they could not be read).
func requireDeadLetter(s *settings, queueURL string, d deadLetter, attrs map[string]string, attrErr error) error {
	if !s.requireDLQ || d.ready() || redriveTarget(attrs) != "" {
		return nil
	}
	const fix = "set a RedrivePolicy on the queue naming its dead-letter queue " +
		`(RedrivePolicy {"deadLetterTargetArn":"arn:aws:sqs:REGION:ACCOUNT:NAME","maxReceiveCount":"5"}: SQS moves a message there after that many receives), ` +
		"or pass WithDeadLetterQueue(dlqURL) (the Consumer moves a Permanent failure there at once)"
	var why string
	switch {
	case s.deadLetterURL != "":
		why = fmt.Sprintf("WithDeadLetterQueue(%s) cannot be used (%s) and the queue has no RedrivePolicy", s.deadLetterURL, d.why)
	case attrErr != nil:
		why = fmt.Sprintf("its RedrivePolicy could not be read (%v; allow sqs:GetQueueAttributes)", attrErr)
	case attrs[string(types.QueueAttributeNameRedrivePolicy)] != "":
		why = "its RedrivePolicy names no deadLetterTargetArn"
	default:
		why = "it has no RedrivePolicy and WithDeadLetterQueue was not given"
	}
	return fmt.Errorf("%w: WithRequireDeadLetterQueue: queue %s has no dead-letter queue: %s; a message that always fails would be retried until the queue's retention ends. Fix it either way: %s",
		ErrInvalidOption, queueURL, why, fix)
}

// redriveTarget is the deadLetterTargetArn of the RedrivePolicy among a
// queue's attributes, "" when there is none.
func redriveTarget(attrs map[string]string) string {
	var p struct {
		Target string `json:"deadLetterTargetArn"`
	}
	if raw := attrs[string(types.QueueAttributeNameRedrivePolicy)]; raw == "" || json.Unmarshal([]byte(raw), &p) != nil {
		return ""
	}
	return p.Target
}

// deadLetter is where a Consumer moves permanently failing messages.
type deadLetter struct {
	url       string // "" when there is none
	fifo      bool
	source    string // the source queue's ARN, or URL
	sourceARN string // the source queue's ARN, "" when it could not be read
	sender    messageSender
	why       string // when url or sender is missing: why, for the warning
}

// deadLetterFor works out the dead-letter queue from the option or the
// source queue's attributes (attrErr: why they could not be read, nil
// when they were). It fails only for a configuration that can never work
// (a FIFO source with a standard dead-letter queue or the other way
// round, an unreadable RedrivePolicy ARN, a RedrivePolicy naming the
// source itself when the Consumer would move messages there).
func deadLetterFor(c Client, queueURL string, fifo bool, given string, attrs map[string]string, attrErr error) (deadLetter, error) {
	d := deadLetter{source: queueURL}
	if arn := attrs[string(types.QueueAttributeNameQueueArn)]; arn != "" {
		d.source, d.sourceARN = arn, arn
	}
	switch {
	case given != "":
		d.url = given
	case attrs[string(types.QueueAttributeNameRedrivePolicy)] != "":
		target := redriveTarget(attrs)
		if target == "" {
			d.why = "the queue's RedrivePolicy names no deadLetterTargetArn"
			break
		}
		if target == d.sourceARN {
			// SQS accepts a RedrivePolicy naming the queue itself.
			return d, fmt.Errorf("%w: the queue's RedrivePolicy names the queue itself (%s) as its deadLetterTargetArn: a message moved there comes straight back and fails again, forever; set a separate dead-letter queue in the RedrivePolicy, or give WithDeadLetterQueue",
				ErrInvalidOption, target)
		}
		u, err := queueURLFromARN(queueURL, target)
		if err != nil {
			return d, err
		}
		d.url = u
	case attrErr != nil:
		d.why = fmt.Sprintf("the queue's RedrivePolicy could not be read (%v) and WithDeadLetterQueue was not given", attrErr)
	default:
		d.why = "the queue has no RedrivePolicy and WithDeadLetterQueue was not given"
	}
	if d.url == "" {
		return d, nil
	}
	d.fifo = strings.HasSuffix(d.url, ".fifo")
	if d.fifo != fifo {
		return d, typeMismatch(d.url, "", d.fifo)
	}
	s, ok := c.(messageSender)
	if !ok || isNil(s) {
		d.why = fmt.Sprintf("the client (%T) has no SendMessage method", userClient(c))
		return d, nil
	}
	d.sender = s
	return d, nil
}

// queueURLFromARN turns a dead-letter queue's ARN
// (arn:PARTITION:sqs:REGION:ACCOUNT:NAME) into its URL, on the source
// URL's scheme and host: SQS keeps a dead-letter queue in its source's
// account and region.
func queueURLFromARN(sourceURL, arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[4] == "" || parts[5] == "" {
		return "", fmt.Errorf("sqsconsumer: the queue's RedrivePolicy names %q, which is not an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)", arn)
	}
	u, err := url.Parse(sourceURL)
	if err != nil {
		return "", fmt.Errorf("sqsconsumer: queue URL %q: %w", sourceURL, err)
	}
	return u.Scheme + "://" + u.Host + "/" + parts[4] + "/" + parts[5], nil
}

// ready reports whether messages can be moved.
func (d *deadLetter) ready() bool { return d.url != "" && d.sender != nil }

// move sends m to the dead-letter queue with reason attached and returns
// the copy's MessageId. It does not delete the original.
func (d *deadLetter) move(ctx context.Context, m *Message, reason error) (id string, dropped []string, err error) {
	attrs := make(map[string]types.MessageAttributeValue, maxMessageAttributes)
	for k, v := range m.MessageAttributes {
		attrs[k] = v
	}
	text := reason.Error()
	if len(text) > dlqErrorMax {
		cut := dlqErrorMax - len("…")
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	if text == "" {
		text = "(empty error text)"
	}
	added := []struct{ name, typ, value string }{
		{dlqAttrError, "String", text},
		{dlqAttrReceiveCount, "Number", strconv.Itoa(m.ReceiveCount)},
		{dlqAttrSource, "String", d.source},
	}
	var ours []string
	for _, a := range added {
		if _, own := m.MessageAttributes[a.name]; !own && len(attrs) >= maxMessageAttributes {
			dropped = append(dropped, a.name)
			continue
		}
		attrs[a.name] = types.MessageAttributeValue{DataType: aws.String(a.typ), StringValue: aws.String(a.value)}
		ours = append(ours, a.name)
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(d.url),
		MessageBody:       aws.String(m.Body),
		MessageAttributes: attrs,
	}
	if th := m.Attributes[string(types.MessageSystemAttributeNameAWSTraceHeader)]; th != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(th)},
		}
	}
	if m.GroupID != "" {
		in.MessageGroupId = aws.String(m.GroupID)
	}
	if d.fifo {
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	cctx, cancel := context.WithTimeout(ctx, moveCallTimeout)
	defer cancel()
	out, err := d.sender.SendMessage(cctx, in, guardOpts...)
	if err != nil && refusedContent(err) && len(ours) > 0 && ctx.Err() == nil {
		// Perhaps the reason made the copy too large: the message
		// matters more than the note.
		plain := *in
		plain.MessageAttributes = m.MessageAttributes
		out, err = d.sender.SendMessage(cctx, &plain, guardOpts...)
		if err == nil {
			dropped = append(dropped, ours...)
		}
	}
	if err != nil {
		return "", nil, err
	}
	return aws.ToString(out.MessageId), dropped, nil
}

// refusedContent reports whether SQS refused a send for what it carried
// (too large, an attribute it does not accept) rather than for where it
// went or who sent it.
func refusedContent(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode() {
	case "InvalidParameterValue", "InvalidParameterValueException", "InvalidMessageContents",
		"InvalidAttributeValue", "InvalidAttributeName":
		return true
	}
	return false
}

// typeMismatch is the error for a dead-letter queue at url (named by
// source, "" when it need not be said) whose type, FIFO or not, is not the
// source queue's.
func typeMismatch(url, source string, dlqFIFO bool) error {
	kind := map[bool]string{true: "FIFO", false: "standard"}
	if source != "" {
		url += " (from " + source + ")"
	}
	return fmt.Errorf("%w: dead-letter queue %s is a %s queue but the source is a %s queue; SQS needs both of one type",
		ErrInvalidOption, url, kind[dlqFIFO], kind[!dlqFIFO])
}

package doctor

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// This file holds what the three dead-letter operations share (InspectDLQ here,
// Redrive in redrive.go, Replay in replay.go): the client they call, how a message
// of a dead-letter queue is read, and how its source queue is found.

// DLQClient is the part of the SQS API the dead-letter operations call.
// *sqs.Client satisfies it.
type DLQClient interface {
	Client
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	ListDeadLetterSourceQueues(ctx context.Context, in *sqs.ListDeadLetterSourceQueuesInput, optFns ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error)
	StartMessageMoveTask(ctx context.Context, in *sqs.StartMessageMoveTaskInput, optFns ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error)
	ListMessageMoveTasks(ctx context.Context, in *sqs.ListMessageMoveTasksInput, optFns ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error)
	CancelMessageMoveTask(ctx context.Context, in *sqs.CancelMessageMoveTaskInput, optFns ...func(*sqs.Options)) (*sqs.CancelMessageMoveTaskOutput, error)
}

var _ DLQClient = (*sqs.Client)(nil)

// The message attributes sqsconsumer adds to a message its Consumer moves to the
// dead-letter queue (sqsconsumer.WithDeadLetterQueue), as room under SQS's 10
// message attributes allows.
const (
	// AttrReason holds the handler's error text, at most 1024 bytes.
	AttrReason = "sqsconsumer.error"
	// AttrReceiveCount holds the ApproximateReceiveCount of the failed delivery.
	AttrReceiveCount = "sqsconsumer.receive_count"
	// AttrSource holds the source queue's ARN (its URL when the ARN was unknown).
	AttrSource = "sqsconsumer.source"
)

// callTimeout bounds a call the dead-letter operations make after their context
// ended (releasing peeked messages, cancelling a move task, finishing a send).
const callTimeout = 30 * time.Second

// DeadLetter is one message of a dead-letter queue as the dead-letter operations
// read it.
type DeadLetter struct {
	ID   string
	Body string
	// Reason is the sqsconsumer.error attribute, "" when the message has none
	// (SQS moved it after maxReceiveCount receives, or something else sent it).
	Reason string
	// Source is the queue the message came from: the DeadLetterQueueSourceArn
	// SQS adds when its redrive policy moves a message, else the
	// sqsconsumer.source attribute (an ARN or a URL); "" when unknown.
	Source string
	// SourceFromSQS says Source came from DeadLetterQueueSourceArn: only such
	// messages can go back to their source through a move task without a
	// destination.
	SourceFromSQS bool
	// SentAt is SentTimestamp: for messages SQS moved, the original send (a
	// standard DLQ counts retention from it); for messages sqsconsumer moved,
	// the move.
	SentAt time.Time
	// ReceiveCount is ApproximateReceiveCount, this receive included.
	ReceiveCount int
	// FailedReceiveCount is the sqsconsumer.receive_count attribute, 0 without.
	FailedReceiveCount int
	GroupID            string
	DeduplicationID    string
	TraceHeader        string
	Attributes         map[string]types.MessageAttributeValue
}

func parseDeadLetter(m types.Message) DeadLetter {
	a := m.Attributes
	d := DeadLetter{
		ID:              aws.ToString(m.MessageId),
		Body:            aws.ToString(m.Body),
		GroupID:         a[string(types.MessageSystemAttributeNameMessageGroupId)],
		DeduplicationID: a[string(types.MessageSystemAttributeNameMessageDeduplicationId)],
		TraceHeader:     a[string(types.MessageSystemAttributeNameAWSTraceHeader)],
		Attributes:      m.MessageAttributes,
	}
	if ms, err := strconv.ParseInt(a[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		d.SentAt = time.UnixMilli(ms)
	}
	d.ReceiveCount, _ = strconv.Atoi(a[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	str := func(name string) string {
		if v, ok := m.MessageAttributes[name]; ok {
			return aws.ToString(v.StringValue)
		}
		return ""
	}
	d.Reason = str(AttrReason)
	d.FailedReceiveCount, _ = strconv.Atoi(str(AttrReceiveCount))
	if arn := a[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)]; arn != "" {
		d.Source, d.SourceFromSQS = arn, true
	} else {
		d.Source = str(AttrSource)
	}
	return d
}

// queueName is the last part of a queue ARN or URL ("orders" for both
// arn:aws:sqs:eu-west-1:1:orders and https://sqs.eu-west-1.amazonaws.com/1/orders).
func queueName(arnOrURL string) string {
	s := strings.TrimRight(arnOrURL, "/")
	return s[strings.LastIndexAny(s, ":/")+1:]
}

// shortReason is a reason as InspectDLQ groups it: its first line, trimmed, at most
// 120 characters.
func shortReason(r string) string {
	if r == "" {
		return ""
	}
	r, _, _ = strings.Cut(strings.TrimSpace(r), "\n")
	r = strings.TrimSpace(r)
	if utf8.RuneCountInString(r) > 120 {
		rs := []rune(r)
		r = string(rs[:119]) + "…"
	}
	return r
}

// sourceResolver finds the URL of a message's source queue: an ARN through
// GetQueueUrl (remembered per ARN), a URL as it is.
type sourceResolver struct {
	c     DLQClient
	known map[string]string
}

func (r *sourceResolver) url(ctx context.Context, source string) (string, error) {
	if source == "" {
		return "", fmt.Errorf("the message names no source queue (no DeadLetterQueueSourceArn, no %s attribute)", AttrSource)
	}
	if u, err := url.Parse(source); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return source, nil
	}
	if u, ok := r.known[source]; ok {
		return u, nil
	}
	parts := strings.Split(source, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
		return "", fmt.Errorf("the message's source %q is neither an SQS queue ARN nor a URL", source)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := r.c.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("finding the URL of the source %s: %w", source, err)
	}
	if r.known == nil {
		r.known = map[string]string{}
	}
	r.known[source] = aws.ToString(out.QueueUrl)
	return r.known[source], nil
}

// held is a received message whose visibility the operation gives back at the end.
type held struct{ id, handle string }

// release makes the messages visible again at once (ChangeMessageVisibilityBatch
// with 0, ten at a time), with a context of its own so that it runs after ctx
// ended too. It returns how many were released and the first error.
func release(ctx context.Context, c DLQClient, queueURL string, hs []held) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	n := 0
	var first error
	for chunk := range slices.Chunk(hs, 10) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, h := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h.handle)}
		}
		out, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
		if err != nil {
			if first == nil {
				first = fmt.Errorf("releasing messages of %s: %w", queueURL, err)
			}
			continue
		}
		n += len(out.Successful)
		if len(out.Failed) > 0 && first == nil {
			f := out.Failed[0]
			first = fmt.Errorf("releasing message %s of %s: %s: %s", chunk[0].id, queueURL, aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	return n, first
}

// receiveDLQ receives up to max messages from the queue with every attribute,
// hidden for visibility, with a 1 s long poll (a long poll asks every SQS server, so
// an empty answer means the queue has nothing visible).
func receiveDLQ(ctx context.Context, c DLQClient, queueURL string, max int, visibility time.Duration) ([]types.Message, error) {
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(queueURL),
		MaxNumberOfMessages:         int32(min(max, 10)),
		VisibilityTimeout:           int32(visibility / time.Second),
		WaitTimeSeconds:             1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return nil, fmt.Errorf("receiving from %s: %w", queueURL, err)
	}
	return out.Messages, nil
}

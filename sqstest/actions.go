package sqstest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"strings"
	"time"
)

type actionFunc func(s *Server, ctx context.Context, body []byte) (any, error)

// actions are the SQS actions the server implements, by X-Amz-Target suffix.
var actions = map[string]actionFunc{
	"CreateQueue":                  (*Server).actCreateQueue,
	"GetQueueUrl":                  (*Server).actGetQueueURL,
	"GetQueueAttributes":           (*Server).actGetQueueAttributes,
	"SetQueueAttributes":           (*Server).actSetQueueAttributes,
	"ListQueues":                   (*Server).actListQueues,
	"DeleteQueue":                  (*Server).actDeleteQueue,
	"PurgeQueue":                   (*Server).actPurgeQueue,
	"TagQueue":                     (*Server).actTagQueue,
	"UntagQueue":                   (*Server).actUntagQueue,
	"ListQueueTags":                (*Server).actListQueueTags,
	"SendMessage":                  (*Server).actSendMessage,
	"SendMessageBatch":             (*Server).actSendMessageBatch,
	"ReceiveMessage":               (*Server).actReceiveMessage,
	"DeleteMessage":                (*Server).actDeleteMessage,
	"DeleteMessageBatch":           (*Server).actDeleteMessageBatch,
	"ChangeMessageVisibility":      (*Server).actChangeMessageVisibility,
	"ChangeMessageVisibilityBatch": (*Server).actChangeMessageVisibilityBatch,
	"ListDeadLetterSourceQueues":   (*Server).actListDeadLetterSourceQueues,
	"StartMessageMoveTask":         (*Server).actStartMessageMoveTask,
	"CancelMessageMoveTask":        (*Server).actCancelMessageMoveTask,
	"ListMessageMoveTasks":         (*Server).actListMessageMoveTasks,
}

// unsupportedActions are SQS actions the server knows but does not implement; they
// answer UnsupportedOperation rather than UnknownOperationException.
var unsupportedActions = map[string]bool{"AddPermission": true, "RemovePermission": true}

func init() {
	for name := range unsupportedActions {
		actions[name] = func(*Server, context.Context, []byte) (any, error) {
			return nil, Fault{Status: 400, Type: "UnsupportedOperation",
				QueryCode: "AWS.SimpleQueueService.UnsupportedOperation",
				Message:   "sqstest does not implement " + name + "."}
		}
	}
}

// decode parses a request body. Anything that is not a JSON object of the expected
// member types is a serialization error (see errSerialization).
func decode[T any](body []byte) (T, error) {
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			where := te.Field
			if where == "" {
				where = "the request"
			}
			return v, errSerialization.withMessage("Cannot read %s: JSON %s is not the expected type.", where, te.Value)
		}
		return v, errSerialization.withMessage("The request body is not valid JSON.")
	}
	return v, nil
}

type empty struct{}

type queueURLIn struct {
	QueueURL string `json:"QueueUrl"`
}

// withQueue runs f with s.mu held, the due steps of move tasks taken and the
// request's queue resolved.
func (s *Server) withQueue(url string, f func(q *queue, now time.Time) (any, error)) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	q, err := s.queueLocked(url)
	if err != nil {
		return nil, err
	}
	s.advanceLocked(q, now)
	return f(q, now)
}

type queueURLOut struct {
	QueueURL string `json:"QueueUrl"`
}

func (s *Server) actCreateQueue(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueName  string            `json:"QueueName"`
		Attributes map[string]string `json:"Attributes"`
		Tags       map[string]string `json:"tags"`
	}](body)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.createQueueLocked(in.QueueName, in.Attributes, in.Tags, false, time.Now())
	if err != nil {
		return nil, err
	}
	return queueURLOut{q.url}, nil
}

func (s *Server) actGetQueueURL(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueName string `json:"QueueName"`
		Owner     string `json:"QueueOwnerAWSAccountId"`
	}](body)
	if err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, missingParam("QueueName")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[in.QueueName]
	if !ok || (in.Owner != "" && in.Owner != s.cfg.accountID) {
		return nil, errQueueDoesNotExist
	}
	return queueURLOut{q.url}, nil
}

func (s *Server) actGetQueueAttributes(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL       string   `json:"QueueUrl"`
		AttributeNames []string `json:"AttributeNames"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		attrs, err := s.getQueueAttributesLocked(q, in.AttributeNames, now)
		if err != nil {
			return nil, err
		}
		return struct {
			Attributes map[string]string `json:"Attributes,omitempty"`
		}{attrs}, nil
	})
}

func (s *Server) actSetQueueAttributes(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL   string            `json:"QueueUrl"`
		Attributes map[string]string `json:"Attributes"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		if in.Attributes == nil {
			return nil, missingParam("Attributes")
		}
		return empty{}, s.setQueueAttributesLocked(q, in.Attributes, now)
	})
}

func (s *Server) actListQueues(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		Prefix     string `json:"QueueNamePrefix"`
		NextToken  string `json:"NextToken"`
		MaxResults *int32 `json:"MaxResults"`
	}](body)
	if err != nil {
		return nil, err
	}
	if in.MaxResults != nil && (*in.MaxResults < 1 || *in.MaxResults > 1000) {
		return nil, invalidValue(*in.MaxResults, "MaxResults", "MaxResults must be an integer between 1 and 1000.")
	}
	after := ""
	if in.NextToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(in.NextToken)
		if err != nil {
			return nil, invalidValue(in.NextToken, "NextToken", "Invalid NextToken value.")
		}
		after = string(b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := sortedKeys(s.queues)
	var out struct {
		QueueUrls []string `json:"QueueUrls,omitempty"`
		NextToken string   `json:"NextToken,omitempty"`
	}
	for _, n := range names {
		if !strings.HasPrefix(n, in.Prefix) || (after != "" && n <= after) {
			continue
		}
		if in.MaxResults != nil && len(out.QueueUrls) == int(*in.MaxResults) {
			last := out.QueueUrls[len(out.QueueUrls)-1]
			out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(last[strings.LastIndex(last, "/")+1:]))
			break
		}
		if in.MaxResults == nil && len(out.QueueUrls) == 1000 {
			break // AWS returns at most 1,000 without MaxResults
		}
		out.QueueUrls = append(out.QueueUrls, s.queues[n].url)
	}
	return out, nil
}

func (s *Server) actDeleteQueue(_ context.Context, body []byte) (any, error) {
	in, err := decode[queueURLIn](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		s.deleteQueueLocked(q, now)
		return empty{}, nil
	})
}

func (s *Server) actPurgeQueue(_ context.Context, body []byte) (any, error) {
	in, err := decode[queueURLIn](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		return empty{}, s.purgeLocked(q, now)
	})
}

func (s *Server) actTagQueue(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL string            `json:"QueueUrl"`
		Tags     map[string]string `json:"Tags"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, _ time.Time) (any, error) {
		if in.Tags == nil {
			return nil, missingParam("Tags")
		}
		for k, v := range in.Tags {
			q.tags[k] = v
		}
		return empty{}, nil
	})
}

func (s *Server) actUntagQueue(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL string   `json:"QueueUrl"`
		TagKeys  []string `json:"TagKeys"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, _ time.Time) (any, error) {
		if in.TagKeys == nil {
			return nil, missingParam("TagKeys")
		}
		for _, k := range in.TagKeys {
			delete(q.tags, k)
		}
		return empty{}, nil
	})
}

func (s *Server) actListQueueTags(_ context.Context, body []byte) (any, error) {
	in, err := decode[queueURLIn](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, _ time.Time) (any, error) {
		out := struct {
			Tags map[string]string `json:"Tags,omitempty"`
		}{}
		if len(q.tags) > 0 {
			out.Tags = maps.Clone(q.tags)
		}
		return out, nil
	})
}

func (s *Server) actSendMessage(ctx context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL string `json:"QueueUrl"`
		sendInput
	}](body)
	if err != nil {
		return nil, err
	}
	in.traceHeader = traceHeader(ctx)
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		return s.sendLocked(q, in.sendInput, false, now)
	})
}

var batchIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatch applies the batch rules shared by the three batch actions.
func checkBatch(ids []*string, entryShape string) error {
	if len(ids) == 0 {
		return errEmptyBatch.withMessage(textEmptyBatch, entryShape)
	}
	if len(ids) > maxBatchEntries {
		return errTooManyEntries.withMessage("Maximum number of entries per request are %d. You have sent %d.", maxBatchEntries, len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == nil || !batchIDRE.MatchString(*id) {
			return errInvalidBatchEntryID
		}
	}
	for _, id := range ids {
		if seen[*id] {
			return errIDsNotDistinct.withMessage(textIDsNotDistinct, *id)
		}
		seen[*id] = true
	}
	return nil
}

// batchResult is the answer of a batch action. An empty Failed list is left out, as
// AWS's answer to a SendMessageBatch with nothing failed leaves it out (LocalStack's
// AWS-validated
// test_send_message_batch_with_oversized_contents_with_updated_maximum_message_size[sqs],
// recorded 2024-04-30; for the other batch actions see unconfirmed.go).
type batchResult[T any] struct {
	Successful []T               `json:"Successful"`
	Failed     []batchEntryFault `json:"Failed,omitempty"`
}

func newBatchResult[T any]() *batchResult[T] {
	return &batchResult[T]{Successful: []T{}}
}

// entryError records err for entry id; it reports whether err was nil.
func (r *batchResult[T]) fail(id string, err error) {
	var f Fault
	if !errors.As(err, &f) {
		f = FaultInternalError.withMessage("%v", err)
	}
	r.Failed = append(r.Failed, entryFault(id, f))
}

func (s *Server) actSendMessageBatch(ctx context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL string `json:"QueueUrl"`
		Entries  []struct {
			ID *string `json:"Id"`
			sendInput
		} `json:"Entries"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		ids := make([]*string, len(in.Entries))
		total := 0
		for i, e := range in.Entries {
			ids[i] = e.ID
			if e.MessageBody != nil {
				total += len(*e.MessageBody)
			}
			if n, err := checkAttributes(e.MessageAttributes); err == nil {
				total += n
			}
		}
		if err := checkBatch(ids, "SendMessageBatchRequestEntry"); err != nil {
			return nil, err
		}
		if total > maxMessageSize {
			return nil, errBatchTooLong.withMessage("Batch requests cannot be longer than %d bytes. You have sent %d bytes.", maxMessageSize, total)
		}
		if q.fifo {
			for _, e := range in.Entries {
				if err := checkFIFOBatchEntry(q, e.sendInput); err != nil {
					return nil, err
				}
			}
		}
		th := traceHeader(ctx)
		type okEntry struct {
			ID string `json:"Id"`
			sendResult
		}
		res := newBatchResult[okEntry]()
		for _, e := range in.Entries {
			if f, ok := s.takeEntryFaultLocked("SendMessageBatch"); ok {
				res.fail(*e.ID, f)
				continue
			}
			e.traceHeader = th
			r, err := s.sendLocked(q, e.sendInput, true, now)
			if err != nil {
				res.fail(*e.ID, err)
				continue
			}
			res.Successful = append(res.Successful, okEntry{*e.ID, r})
		}
		return res, nil
	})
}

// checkFIFOBatchEntry applies the FIFO rules that fail a whole SendMessageBatch
// rather than one entry: an entry without MessageGroupId, or without
// MessageDeduplicationId on a queue without content-based deduplication, makes AWS
// answer the call with 400 InvalidParameterValue (LocalStack's AWS-validated
// test_send_batch_missing_message_group_id_for_fifo_queue[sqs] and
// test_send_batch_missing_deduplication_id_for_fifo_queue[sqs], recorded 2024-04-30).
func checkFIFOBatchEntry(q *queue, e sendInput) error {
	if e.MessageGroupID == nil || *e.MessageGroupID == "" {
		return errInvalidParameter.withMessage("The request must contain the parameter MessageGroupId.")
	}
	if (e.MessageDeduplicationID == nil || *e.MessageDeduplicationID == "") && q.attrs["ContentBasedDeduplication"] != "true" {
		return errInvalidParameter.withMessage(textNoDeduplication)
	}
	return nil
}

type wireMessage struct {
	MessageID              string               `json:"MessageId"`
	ReceiptHandle          string               `json:"ReceiptHandle"`
	MD5OfBody              string               `json:"MD5OfBody"`
	Body                   string               `json:"Body"`
	Attributes             map[string]string    `json:"Attributes,omitempty"`
	MessageAttributes      map[string]attrValue `json:"MessageAttributes,omitempty"`
	MD5OfMessageAttributes string               `json:"MD5OfMessageAttributes,omitempty"`
}

type receiveIn struct {
	QueueURL                    string   `json:"QueueUrl"`
	AttributeNames              []string `json:"AttributeNames"`
	MessageSystemAttributeNames []string `json:"MessageSystemAttributeNames"`
	MessageAttributeNames       []string `json:"MessageAttributeNames"`
	MaxNumberOfMessages         *int32   `json:"MaxNumberOfMessages"`
	VisibilityTimeout           *int32   `json:"VisibilityTimeout"`
	WaitTimeSeconds             *int32   `json:"WaitTimeSeconds"`
	ReceiveRequestAttemptID     *string  `json:"ReceiveRequestAttemptId"`
}

type receiveOut struct {
	Messages []wireMessage `json:"Messages,omitempty"`
}

func (s *Server) actReceiveMessage(ctx context.Context, body []byte) (any, error) {
	in, err := decode[receiveIn](body)
	if err != nil {
		return nil, err
	}
	return s.receive(ctx, in)
}

// receive is ReceiveMessage with long polling: it returns as soon as at least one
// message is available, or when the wait time is over. While it waits it blocks only
// on its own channel, a timer and ctx, so in a synctest bubble it is durably blocked.
func (s *Server) receive(ctx context.Context, in receiveIn) (any, error) {
	max := int32(1)
	if in.MaxNumberOfMessages != nil {
		max = *in.MaxNumberOfMessages
		if max < 1 || max > maxBatchEntries {
			return nil, invalidValue(max, "MaxNumberOfMessages", "Must be between 1 and 10, if provided.")
		}
	}
	if w := in.WaitTimeSeconds; w != nil && (*w < 0 || *w > maxWaitTimeSeconds) {
		return nil, invalidValue(*w, "WaitTimeSeconds", "Must be >= 0 and <= 20, if provided.")
	}
	if v := in.VisibilityTimeout; v != nil && (*v < 0 || *v > maxVisibilityTimeout) {
		return nil, invalidValue(*v, "VisibilityTimeout", textReceiveVisibility)
	}
	if id := in.ReceiveRequestAttemptID; id != nil && len(*id) > 128 {
		return nil, invalidValue(*id, "ReceiveRequestAttemptId", "ReceiveRequestAttemptId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
	}
	want := map[string]bool{}
	for _, n := range append(append([]string(nil), in.AttributeNames...), in.MessageSystemAttributeNames...) {
		want[n] = true
	}

	wake := make(chan struct{}, 1)
	var deadline time.Time
	for first := true; ; first = false {
		s.mu.Lock()
		now := time.Now()
		if s.closed {
			delete(s.waiters, wake)
			s.mu.Unlock()
			return receiveOut{}, nil
		}
		s.advanceTasksLocked(now)
		q, err := s.queueLocked(in.QueueURL)
		if err != nil {
			delete(s.waiters, wake)
			s.mu.Unlock()
			return nil, err
		}
		if first {
			wait := time.Duration(q.intAttr("ReceiveMessageWaitTimeSeconds")) * time.Second
			if in.WaitTimeSeconds != nil {
				wait = time.Duration(*in.WaitTimeSeconds) * time.Second
			}
			deadline = now.Add(wait)
		}
		vt := q.visibilityTimeout()
		if in.VisibilityTimeout != nil {
			vt = time.Duration(*in.VisibilityTimeout) * time.Second
		}
		if ms := s.collectLocked(q, int(max), vt, now); len(ms) > 0 || !now.Before(deadline) {
			delete(s.waiters, wake)
			out := receiveOut{}
			for _, m := range ms {
				out.Messages = append(out.Messages, m.wire(want, in.MessageAttributeNames))
			}
			s.mu.Unlock()
			return out, nil
		}
		until := deadline
		if next := nextEventLocked(q, now); !next.IsZero() && next.Before(until) {
			until = next
		}
		if next := s.nextTaskStepLocked(); !next.IsZero() && next.Before(until) {
			until = next // a move task may bring a message
		}
		s.waiters[wake] = struct{}{}
		s.mu.Unlock()

		t := time.NewTimer(until.Sub(now))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if err := ctx.Err(); err != nil {
			s.mu.Lock()
			delete(s.waiters, wake)
			s.mu.Unlock()
			return nil, err
		}
	}
}

func (m *message) wire(want map[string]bool, attrNames []string) wireMessage {
	r := m.receives[len(m.receives)-1]
	attrs := filterAttributes(m.attrs, attrNames)
	return wireMessage{
		MessageID:              m.id,
		ReceiptHandle:          r.ReceiptHandle,
		MD5OfBody:              md5Hex(m.body),
		Body:                   m.body,
		Attributes:             m.systemAttributes(want),
		MessageAttributes:      attrs,
		MD5OfMessageAttributes: md5OfAttributes(attrs),
	}
}

// deleteLocked applies a DeleteMessage with handle h; the stale-handle cases are
// listed in the package documentation (doc.go).
func (s *Server) deleteLocked(q *queue, h string, batch bool, now time.Time) error {
	if h == "" && !batch {
		return missingParam("ReceiptHandle")
	}
	ref := s.handles[h]
	if ref == nil {
		return errHandleNotValid(h)
	}
	if ref.q != q {
		return foreignHandle(h, batch)
	}
	m := ref.m
	switch ref.state(now) {
	case handleGone: // (d) already deleted, or moved/expired/purged: 200, nothing to do
		return nil
	case handleSuperseded: // (b)
		if q.fifo {
			return fifoStaleHandle(h, batch)
		}
		if supersededDeleteIsNoop {
			return nil
		}
	case handleExpired: // (c)
		if q.fifo {
			return fifoStaleHandle(h, batch)
		}
	}
	s.goneLocked(q, m, goneDeleted, now)
	s.notifyLocked() // a FIFO group may be unlocked
	return nil
}

// changeVisibilityLocked applies a ChangeMessageVisibility with handle h and records
// the attempt on the message when h names one.
func (s *Server) changeVisibilityLocked(q *queue, h string, timeout int64, batch bool, now time.Time) error {
	ref := s.handles[h]
	if ref == nil {
		return errHandleNotValid(h)
	}
	if ref.q != q {
		return foreignHandle(h, batch)
	}
	err := s.applyVisibilityLocked(ref, h, timeout, batch, now)
	rec := VisibilityChange{At: now, ReceiptHandle: h, Timeout: time.Duration(timeout) * time.Second}
	if err != nil {
		var f Fault
		errors.As(err, &f)
		rec.Err = f.Code()
	}
	ref.m.changes = append(ref.m.changes, rec)
	return err
}

func (s *Server) applyVisibilityLocked(ref *handleRef, h string, timeout int64, batch bool, now time.Time) error {
	if timeout < 0 || timeout > maxVisibilityTimeout {
		return invalidValue(timeout, "VisibilityTimeout", textReceiveVisibility)
	}
	m := ref.m
	switch ref.state(now) {
	case handleGone: // (d)
		return errHandleNotAvailable(h)
	case handleSuperseded: // (b)
		if ref.q.fifo {
			return fifoStaleHandle(h, batch)
		}
		return errHandleNotAvailable(h)
	case handleExpired: // (c)
		if ref.q.fifo {
			return fifoStaleHandle(h, batch)
		}
		if !expiredHandleVisibilityChangeRehides {
			return nil
		}
	}
	until := now.Add(time.Duration(timeout) * time.Second)
	if until.After(m.receives[ref.idx].At.Add(ceiling)) {
		return errCeiling(timeout)
	}
	m.visibleAt = until
	s.reindexLocked(m.q, m, now)
	s.notifyLocked()
	return nil
}

func (s *Server) actDeleteMessage(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL      string `json:"QueueUrl"`
		ReceiptHandle string `json:"ReceiptHandle"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		return empty{}, s.deleteLocked(q, in.ReceiptHandle, false, now)
	})
}

type idOnly struct {
	ID string `json:"Id"`
}

func (s *Server) actDeleteMessageBatch(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL string `json:"QueueUrl"`
		Entries  []struct {
			ID            *string `json:"Id"`
			ReceiptHandle string  `json:"ReceiptHandle"`
		} `json:"Entries"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		ids := make([]*string, len(in.Entries))
		for i, e := range in.Entries {
			ids[i] = e.ID
		}
		return s.idBatchLocked("DeleteMessageBatch", ids, func(i int) error {
			return s.deleteLocked(q, in.Entries[i].ReceiptHandle, true, now)
		})
	})
}

// idBatchLocked runs the entries of a batch action whose results carry only
// the entry Id (DeleteMessageBatch, ChangeMessageVisibilityBatch): it applies
// the shared batch rules to ids, then, entry by entry, reports an injected
// entry fault if one is due, else the outcome of apply(i).
func (s *Server) idBatchLocked(action string, ids []*string, apply func(i int) error) (any, error) {
	if err := checkBatch(ids, action+"RequestEntry"); err != nil {
		return nil, err
	}
	res := newBatchResult[idOnly]()
	for i, id := range ids {
		if f, ok := s.takeEntryFaultLocked(action); ok {
			res.fail(*id, f)
			continue
		}
		if err := apply(i); err != nil {
			res.fail(*id, err)
			continue
		}
		res.Successful = append(res.Successful, idOnly{*id})
	}
	return res, nil
}

func (s *Server) actChangeMessageVisibility(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL          string `json:"QueueUrl"`
		ReceiptHandle     string `json:"ReceiptHandle"`
		VisibilityTimeout *int32 `json:"VisibilityTimeout"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		if in.ReceiptHandle == "" {
			return nil, missingParam("ReceiptHandle")
		}
		if in.VisibilityTimeout == nil {
			return nil, missingParam("VisibilityTimeout")
		}
		return empty{}, s.changeVisibilityLocked(q, in.ReceiptHandle, int64(*in.VisibilityTimeout), false, now)
	})
}

func (s *Server) actChangeMessageVisibilityBatch(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL string `json:"QueueUrl"`
		Entries  []struct {
			ID                *string `json:"Id"`
			ReceiptHandle     string  `json:"ReceiptHandle"`
			VisibilityTimeout *int32  `json:"VisibilityTimeout"`
		} `json:"Entries"`
	}](body)
	if err != nil {
		return nil, err
	}
	return s.withQueue(in.QueueURL, func(q *queue, now time.Time) (any, error) {
		ids := make([]*string, len(in.Entries))
		for i, e := range in.Entries {
			ids[i] = e.ID
		}
		return s.idBatchLocked("ChangeMessageVisibilityBatch", ids, func(i int) error {
			e := in.Entries[i]
			switch {
			case e.ReceiptHandle == "":
				return missingParam("ReceiptHandle")
			case e.VisibilityTimeout == nil:
				return missingParam("VisibilityTimeout")
			default:
				return s.changeVisibilityLocked(q, e.ReceiptHandle, int64(*e.VisibilityTimeout), true, now)
			}
		})
	})
}

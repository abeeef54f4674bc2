package sqstest

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"
)

// MessageState is a snapshot of one message as the server sees it: what was sent,
// every delivery and every visibility change. A message moved to a dead-letter queue
// appears in both queues: in the source with MovedToDLQ set, and in the DLQ with
// DeadLetterSourceARN set and the receive history so far.
type MessageState struct {
	ID              string
	Body            string
	GroupID         string // MessageGroupId, "" when none
	DeduplicationID string // FIFO: explicit or content-based
	SequenceNumber  string // FIFO only
	SentAt          time.Time

	// ReceiveCount is ApproximateReceiveCount: deliveries across all queues.
	ReceiveCount int
	// Receives lists every delivery from this queue, in order.
	Receives []Receive
	// VisibilityChanges lists every ChangeMessageVisibility[Batch] attempt whose
	// receipt handle named this message, successful or not. Attempts answered with an
	// injected fault never reach the message and are not listed.
	VisibilityChanges []VisibilityChange

	// InFlight reports whether the message is received and its visibility has not
	// lapsed. VisibleAt is when it becomes (or became) receivable: the end of its
	// lease or of its delay.
	InFlight  bool
	VisibleAt time.Time

	Deleted   bool
	DeletedAt time.Time
	// MovedToDLQ: the message went to the dead-letter queue MovedTo (a URL) at MovedAt.
	MovedToDLQ bool
	MovedTo    string
	MovedAt    time.Time
	// DeadLetterSourceARN is set on the dead-letter queue's copy.
	DeadLetterSourceARN string
	// Expired: the queue's MessageRetentionPeriod ended at ExpiredAt.
	Expired   bool
	ExpiredAt time.Time
	// Purged: removed by PurgeQueue, or its queue was deleted.
	Purged bool
	// Redriven: a message move task (StartMessageMoveTask) moved the message at
	// RedrivenAt to the queue RedrivenTo (a URL), where it is the new message
	// RedrivenAs.
	Redriven   bool
	RedrivenTo string
	RedrivenAt time.Time
	RedrivenAs string
	// RedriveOf is set on a message a move task made: the MessageId, in the
	// task's source queue, of the message it was moved from.
	RedriveOf string
}

// Receive is one delivery of a message.
type Receive struct {
	At                time.Time
	ReceiptHandle     string
	VisibilityTimeout time.Duration
}

// VisibilityChange is one ChangeMessageVisibility attempt on a message.
type VisibilityChange struct {
	At            time.Time
	ReceiptHandle string
	Timeout       time.Duration
	// Err is "" when the change succeeded, else the error code the Go SDK's
	// ErrorCode() reports (e.g. "InvalidParameterValue", "ReceiptHandleIsInvalid").
	Err string
}

func (m *message) state(now time.Time) MessageState {
	st := MessageState{
		ID:                  m.id,
		Body:                m.body,
		GroupID:             m.groupID,
		DeduplicationID:     m.dedupID,
		SequenceNumber:      m.seq,
		SentAt:              m.sentAt,
		ReceiveCount:        m.receiveCount,
		Receives:            append([]Receive(nil), m.receives...),
		VisibilityChanges:   append([]VisibilityChange(nil), m.changes...),
		InFlight:            m.inFlight(now),
		VisibleAt:           m.availableAt,
		DeadLetterSourceARN: m.dlqSource,
		RedriveOf:           m.redriveOf,
	}
	if m.visibleAt.After(st.VisibleAt) {
		st.VisibleAt = m.visibleAt
	}
	switch m.gone {
	case goneDeleted:
		st.Deleted, st.DeletedAt = true, m.goneAt
	case goneMoved:
		st.MovedToDLQ, st.MovedTo, st.MovedAt = true, m.movedTo, m.goneAt
	case goneExpired:
		st.Expired, st.ExpiredAt = true, m.goneAt
	case gonePurged, goneQueueDeleted:
		st.Purged = true
	case goneRedriven:
		st.Redriven, st.RedrivenTo, st.RedrivenAt, st.RedrivenAs = true, m.movedTo, m.goneAt, m.redrivenAs
	}
	return st
}

// Messages returns a snapshot of every message ever sent to (or moved into) the queue,
// in arrival order, deleted ones included (but for those forgotten under
// [WithHistoryLimit]). It returns nil for an unknown queue.
func (s *Server) Messages(queueURL string) []MessageState {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	q, err := s.queueLocked(queueURL)
	if err != nil {
		return nil
	}
	s.advanceLocked(q, now)
	out := make([]MessageState, 0, len(q.msgs))
	for _, m := range q.msgs {
		if !m.evicted {
			out = append(out, m.state(now))
		}
	}
	return out
}

// Message returns the snapshot of one message of the queue.
func (s *Server) Message(queueURL, messageID string) (MessageState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	q, err := s.queueLocked(queueURL)
	if err != nil {
		return MessageState{}, false
	}
	s.advanceLocked(q, now)
	if m := q.byID[messageID]; m != nil {
		return m.state(now), true
	}
	return MessageState{}, false
}

// Expire makes the message's visibility lapse now, as if its lease ran out: it
// becomes receivable again and its latest receipt handle counts as expired (not
// superseded). It is an error if the message is not in flight.
func (s *Server) Expire(queueURL, messageID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	q, err := s.queueLocked(queueURL)
	if err != nil {
		return err
	}
	s.advanceLocked(q, now)
	m := q.byID[messageID]
	if m == nil {
		return fmt.Errorf("sqstest: no message %s in %s", messageID, queueURL)
	}
	if !m.inFlight(now) {
		return fmt.Errorf("sqstest: message %s is not in flight", messageID)
	}
	m.visibleAt = now
	s.reindexLocked(q, m, now)
	s.notifyLocked()
	return nil
}

// QueueURL returns the URL of the queue with this name, if it exists.
func (s *Server) QueueURL(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.queues[name]; ok {
		return q.url, true
	}
	return "", false
}

// CreateQueue creates a queue (or returns the existing one's URL) with the same rules
// as the CreateQueue action, except that a name ending in ".fifo" implies
// FifoQueue=true, and that a RedrivePolicy may name a dead-letter queue that does not
// exist (yet), so that a test can build its queues in any order or check what a
// consumer does with a missing DLQ; until that queue exists, messages are not moved.
// The action refuses such a policy, as AWS does. It is not counted in [Server.Calls].
func (s *Server) CreateQueue(name string, attrs map[string]string) (url string, err error) {
	a := maps.Clone(attrs)
	if a == nil {
		a = map[string]string{}
	}
	if _, ok := a["FifoQueue"]; !ok && len(name) > 5 && name[len(name)-5:] == ".fifo" {
		a["FifoQueue"] = "true"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.createQueueLocked(name, a, nil, true, time.Now())
	if err != nil {
		return "", err
	}
	return q.url, nil
}

// DLQName is the name [Server.CreateQueueWithDLQ] gives a queue's dead-letter
// queue: the queue's name and "-dlq", before the ".fifo" of a FIFO queue ("jobs"
// gives "jobs-dlq", "jobs.fifo" gives "jobs-dlq.fifo").
func DLQName(name string) string {
	if base, ok := strings.CutSuffix(name, ".fifo"); ok {
		return base + "-dlq.fifo"
	}
	return name + "-dlq"
}

// dlqRetention is the dead-letter queue's MessageRetentionPeriod in
// [Server.CreateQueueWithDLQ]: 14 days, the most SQS allows.
const dlqRetention = "1209600"

// CreateQueueWithDLQ creates a queue and its dead-letter queue in one call, as
// [Server.CreateQueue] does each: first the dead-letter queue, named DLQName(name),
// of the same type, keeping messages 14 days (MessageRetentionPeriod 1209600, the
// most SQS allows: a standard queue's message keeps its first enqueue time when it
// is moved, so a DLQ that keeps messages no longer than its source could drop them
// at once; https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html),
// then the queue with attrs and a RedrivePolicy that moves a message to
// the dead-letter queue once it has been received maxReceiveCount times (1 to
// 1,000) without being deleted. It returns both URLs. Queues that exist already
// with the same attributes are returned as they are, as CreateQueue does. attrs
// must not hold a RedrivePolicy (the call makes it). On an error nothing is
// created. It is not counted in [Server.Calls].
func (s *Server) CreateQueueWithDLQ(name string, maxReceiveCount int, attrs map[string]string) (url, dlqURL string, err error) {
	if maxReceiveCount < 1 || maxReceiveCount > 1000 {
		return "", "", fmt.Errorf("sqstest: CreateQueueWithDLQ(%q, %d): maxReceiveCount must be from 1 to 1000", name, maxReceiveCount)
	}
	if _, ok := attrs["RedrivePolicy"]; ok {
		return "", "", fmt.Errorf("sqstest: CreateQueueWithDLQ(%q): attrs hold a RedrivePolicy; the call makes the queue's own (use CreateQueue to set one yourself)", name)
	}
	a := maps.Clone(attrs)
	if a == nil {
		a = map[string]string{}
	}
	fifo := strings.HasSuffix(name, ".fifo")
	if _, ok := a["FifoQueue"]; !ok && fifo {
		a["FifoQueue"] = "true"
	}
	dlqAttrs := map[string]string{"MessageRetentionPeriod": dlqRetention}
	if isTrue(a["FifoQueue"]) {
		dlqAttrs["FifoQueue"] = "true"
	}
	dlqName := DLQName(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	_, existed := s.queues[dlqName]
	dlq, err := s.createQueueLocked(dlqName, dlqAttrs, nil, false, now)
	if err != nil {
		return "", "", fmt.Errorf("sqstest: CreateQueueWithDLQ(%q): the dead-letter queue %s: %w", name, dlqName, err)
	}
	a["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, dlq.arn, maxReceiveCount)
	q, err := s.createQueueLocked(name, a, nil, false, now)
	if err != nil {
		if !existed {
			delete(s.queues, dlqName) // new and empty: as if never made
		}
		return "", "", fmt.Errorf("sqstest: CreateQueueWithDLQ(%q): %w", name, err)
	}
	return q.url, dlq.url, nil
}

// SendOption sets a property of a message sent with [Server.Send].
type SendOption func(*sendInput)

// WithGroupID sets MessageGroupId (required on FIFO queues).
func WithGroupID(g string) SendOption { return func(in *sendInput) { in.MessageGroupID = &g } }

// WithDeduplicationID sets MessageDeduplicationId (FIFO).
func WithDeduplicationID(d string) SendOption {
	return func(in *sendInput) { in.MessageDeduplicationID = &d }
}

// WithDelay delays the message by d (any duration; the API allows 0–900 s in whole
// seconds). It overrides the queue's DelaySeconds.
func WithDelay(d time.Duration) SendOption { return func(in *sendInput) { in.delay = &d } }

// WithStringAttribute adds a String message attribute.
func WithStringAttribute(name, value string) SendOption {
	return func(in *sendInput) {
		if in.MessageAttributes == nil {
			in.MessageAttributes = map[string]attrValue{}
		}
		in.MessageAttributes[name] = attrValue{DataType: "String", StringValue: &value}
	}
}

// Send enqueues a message with the same rules as SendMessage and returns its id. It is
// not counted in [Server.Calls]. A FIFO duplicate returns the original's id. Errors
// are [Fault] values, as the action would answer.
func (s *Server) Send(queueURL, body string, opts ...SendOption) (messageID string, err error) {
	in := sendInput{MessageBody: &body}
	for _, o := range opts {
		o(&in)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	q, err := s.queueLocked(queueURL)
	if err != nil {
		return "", err
	}
	if q.fifo && in.delay != nil {
		return "", invalidValue(in.delay.Seconds(), "DelaySeconds", "The request include parameter that is not valid for this queue type.")
	}
	s.advanceLocked(q, now)
	r, err := s.sendLocked(q, in, false, now)
	if err != nil {
		return "", err
	}
	return r.MessageID, nil
}

// FairQueueMetrics are the five CloudWatch metrics AWS publishes for a fair queue (a
// standard queue whose messages carry MessageGroupId; "How Amazon SQS fair queues
// work" in the SQS developer guide), as of one moment. In AWS they are CloudWatch
// metrics only, not queue attributes, and GetQueueAttributes does not return them
// here either. The counts are exact at that moment; CloudWatch's are approximate and
// published once a minute. A message without a group is a tenant of its own and
// always quiet, so it counts in the quiet figures.
type FairQueueMetrics struct {
	// NoisyGroups is ApproximateNumberOfNoisyGroups: the message groups noisy now.
	NoisyGroups int
	// VisibleInQuietGroups is ApproximateNumberOfMessagesVisibleInQuietGroups: the
	// receivable messages of quiet groups.
	VisibleInQuietGroups int
	// NotVisibleInQuietGroups is ApproximateNumberOfMessagesNotVisibleInQuietGroups:
	// the quiet groups' messages in flight.
	NotVisibleInQuietGroups int
	// DelayedInQuietGroups is ApproximateNumberOfMessagesDelayedInQuietGroups: the
	// quiet groups' messages whose delay has not ended.
	DelayedInQuietGroups int
	// AgeOfOldestMessageInQuietGroups is ApproximateAgeOfOldestMessageInQuietGroups
	// (CloudWatch reports it in seconds): how long ago the quiet groups' oldest
	// message still in the queue (in flight and delayed ones included) was enqueued,
	// oldest by arrival in this queue; 0 when the quiet groups have none.
	AgeOfOldestMessageInQuietGroups time.Duration
}

// FairQueueMetrics returns the queue's fair-queue figures now. ok is false for an
// unknown queue and for a FIFO queue (fair queues are standard queues). It is safe
// for concurrent use, like every Server method, and is not counted in [Server.Calls].
func (s *Server) FairQueueMetrics(queueURL string) (m FairQueueMetrics, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	q, err := s.queueLocked(queueURL)
	if err != nil || q.fifo {
		return FairQueueMetrics{}, false
	}
	s.advanceLocked(q, now)
	f := &q.fair
	delayed := q.present() - q.nReady - q.nLeased
	noisyDelayed := f.noisyPresent - f.noisyReady - f.noisyLeased
	m = FairQueueMetrics{
		NoisyGroups:             len(f.noisySet),
		VisibleInQuietGroups:    q.nReady - f.noisyReady,
		NotVisibleInQuietGroups: q.nLeased - f.noisyLeased,
		DelayedInQuietGroups:    delayed - noisyDelayed,
	}
	var oldest *message
	consider := func(t *tenant) {
		if !t.noisy && t.head != nil && (oldest == nil || t.head.order < oldest.order) {
			oldest = t.head
		}
	}
	consider(f.loose)
	for _, t := range f.tenants {
		consider(t)
	}
	if oldest != nil {
		m.AgeOfOldestMessageInQuietGroups = now.Sub(oldest.enqueuedAt)
	}
	return m, true
}

// NoisyGroups returns the MessageGroupIds of the queue's noisy groups now, sorted; nil
// for an unknown queue, a FIFO queue or none noisy. See [FairQueueMetrics] and the
// package documentation's "Fair queues". It is safe for concurrent use.
func (s *Server) NoisyGroups(queueURL string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	q, err := s.queueLocked(queueURL)
	if err != nil || q.fifo {
		return nil
	}
	s.advanceLocked(q, now)
	var ids []string
	for t := range q.fair.noisySet {
		ids = append(ids, t.id)
	}
	sort.Strings(ids)
	return ids
}

package sqstest

import (
	"container/heap"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// goneReason says why a message left its queue.
type goneReason int

const (
	present goneReason = iota
	goneDeleted
	goneMoved
	goneExpired
	gonePurged
	goneQueueDeleted
	goneRedriven // moved out by a message move task
)

// message is one message in one queue. A message moved to a dead-letter queue is a
// second message value (same id) in the DLQ. Guarded by Server.mu.
type message struct {
	q         *queue
	id        string
	body      string
	attrs     map[string]attrValue // user message attributes
	sysAttrs  map[string]attrValue // MessageSystemAttributes (AWSTraceHeader)
	groupID   string
	dedupID   string
	seq       string
	senderID  string
	dlqSource string // DeadLetterQueueSourceArn

	sentAt      time.Time // original send, SentTimestamp
	enqueuedAt  time.Time // retention counts from here
	availableAt time.Time // end of the delay
	visibleAt   time.Time // end of the current lease; in flight while now < visibleAt

	receiveCount int
	firstReceive time.Time
	receives     []Receive
	changes      []VisibilityChange

	gone    goneReason
	goneAt  time.Time
	movedTo string // DLQ URL when gone == goneMoved, destination URL when goneRedriven
	// redrivenAs is the MessageId of the copy a move task made (goneRedriven);
	// redriveOf, on that copy, the MessageId it was made from.
	redrivenAs, redriveOf string

	// Index state (index.go), as of the queue's last advanceLocked.
	order                      uint64    // arrival position in q
	wakeAt                     time.Time // key in q.timers: max(availableAt, visibleAt)
	readyIdx, timerIdx, retIdx int       // heap positions, -1 when absent
	ready                      bool      // receivable
	leased                     bool      // in flight
	group                      *fifoGroup
	tenant                     *tenant  // standard queues: its tenant (fair.go)
	gprev, gnext               *message // neighbours in the FIFO group or the tenant
	evicted                    bool     // dropped from the history (WithHistoryLimit)
}

func (m *message) inFlight(now time.Time) bool {
	return m.gone == present && len(m.receives) > 0 && now.Before(m.visibleAt)
}

func (m *message) available(now time.Time) bool {
	return m.gone == present && !now.Before(m.availableAt) && !now.Before(m.visibleAt)
}

// handleRef is what a receipt handle points at: one receive of one message.
type handleRef struct {
	q   *queue
	m   *message
	idx int // index into m.receives
}

type handleState int

const (
	handleLive       handleState = iota // latest receive, still in flight
	handleExpired                       // latest receive, visibility lapsed, not received again
	handleSuperseded                    // a newer receive of the message exists
	handleGone                          // message deleted, moved, expired or purged
)

func (r *handleRef) state(now time.Time) handleState {
	switch {
	case r.m.gone != present:
		return handleGone
	case r.idx != len(r.m.receives)-1:
		return handleSuperseded
	case now.Before(r.m.visibleAt):
		return handleLive
	default:
		return handleExpired
	}
}

// attrValue is a MessageAttributeValue / MessageSystemAttributeValue on the wire.
type attrValue struct {
	DataType         string   `json:"DataType"`
	StringValue      *string  `json:"StringValue,omitempty"`
	BinaryValue      []byte   `json:"BinaryValue,omitempty"`
	StringListValues []string `json:"StringListValues,omitempty"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty"`
}

// md5OfAttributes is SQS's digest over message attributes (Amazon SQS Developer Guide,
// "Calculating the MD5 message digest for message attributes"): names in
// byte order; per attribute the length-prefixed name, length-prefixed DataType, one
// transport byte (1 string, 2 binary, 3 string list, 4 binary list) and the
// length-prefixed value(s). Returns "" for no attributes.
func md5OfAttributes(attrs map[string]attrValue) string {
	if len(attrs) == 0 {
		return ""
	}
	names := sortedKeys(attrs)
	var buf []byte
	lp := func(b []byte) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
		buf = append(buf, b...)
	}
	for _, n := range names {
		a := attrs[n]
		lp([]byte(n))
		lp([]byte(a.DataType))
		switch {
		case a.StringValue != nil:
			buf = append(buf, 1)
			lp([]byte(*a.StringValue))
		case a.BinaryValue != nil:
			buf = append(buf, 2)
			lp(a.BinaryValue)
		case a.StringListValues != nil:
			buf = append(buf, 3)
			for _, v := range a.StringListValues {
				lp([]byte(v))
			}
		case a.BinaryListValues != nil:
			buf = append(buf, 4)
			for _, v := range a.BinaryListValues {
				lp(v)
			}
		}
	}
	sum := md5.Sum(buf)
	return hex.EncodeToString(sum[:])
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// newReceiptHandle returns an opaque random handle. It encodes nothing: clients must
// not parse it, and cannot.
func newReceiptHandle() string {
	var b [96]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// sendInput is one message to send, as decoded from SendMessage or a batch entry.
type sendInput struct {
	MessageBody             *string              `json:"MessageBody"`
	DelaySeconds            *int32               `json:"DelaySeconds"`
	MessageAttributes       map[string]attrValue `json:"MessageAttributes"`
	MessageSystemAttributes map[string]attrValue `json:"MessageSystemAttributes"`
	MessageDeduplicationID  *string              `json:"MessageDeduplicationId"`
	MessageGroupID          *string              `json:"MessageGroupId"`
	// delay is set by the Send helper for sub-second delays; it overrides DelaySeconds.
	delay *time.Duration
	// traceHeader is the request's X-Amzn-Trace-Id HTTP header, if any.
	traceHeader string
}

type sendResult struct {
	MessageID                    string `json:"MessageId"`
	MD5OfMessageBody             string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes       string `json:"MD5OfMessageAttributes,omitempty"`
	MD5OfMessageSystemAttributes string `json:"MD5OfMessageSystemAttributes,omitempty"`
	SequenceNumber               string `json:"SequenceNumber,omitempty"`
}

var (
	attrNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)
	// idRE: MessageGroupId and MessageDeduplicationId, 1–128 alphanumeric or
	// punctuation characters.
	idRE = regexp.MustCompile(`^[A-Za-z0-9!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~]{1,128}$`)
)

func validBodyChar(r rune) bool {
	return r == 0x9 || r == 0xA || r == 0xD || (r >= 0x20 && r <= 0xD7FF) ||
		(r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

func checkAttributes(attrs map[string]attrValue) (size int, err error) {
	if len(attrs) > 10 {
		return 0, errInvalidParameter.withMessage(textTooManyAttributes, len(attrs))
	}
	for _, n := range sortedKeys(attrs) {
		a := attrs[n]
		lower := strings.ToLower(n)
		if !attrNameRE.MatchString(n) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") ||
			strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.Contains(n, "..") {
			return 0, errInvalidParameter.withMessage(textBadAttributeName, n)
		}
		if a.DataType == "" {
			return 0, errInvalidParameter.withMessage(textAttributeNoType, n)
		}
		base, _, _ := strings.Cut(a.DataType, ".")
		if len(a.DataType) > 256 || (base != "String" && base != "Number" && base != "Binary") {
			return 0, errInvalidParameter.withMessage(textAttributeBadType, n)
		}
		var vlen int
		switch base {
		case "String", "Number":
			if a.StringValue == nil || *a.StringValue == "" {
				return 0, errInvalidParameter.withMessage("Message (user) attribute '%s' must contain a non-empty value of type '%s'.", n, base)
			}
			vlen = len(*a.StringValue)
		case "Binary":
			if len(a.BinaryValue) == 0 {
				return 0, errInvalidParameter.withMessage("Message (user) attribute '%s' must contain a non-empty value of type '%s'.", n, base)
			}
			vlen = len(a.BinaryValue)
		}
		size += len(n) + len(a.DataType) + vlen
	}
	return size, nil
}

func checkSystemAttributes(attrs map[string]attrValue) error {
	for _, n := range sortedKeys(attrs) {
		a := attrs[n]
		if n != "AWSTraceHeader" {
			return errInvalidParameter.withMessage(textBadSystemAttribute, n)
		}
		if a.DataType != "String" || a.StringValue == nil || *a.StringValue == "" {
			return errInvalidParameter.withMessage("Message (system) attribute '%s' must contain a non-empty value of type 'String'.", n)
		}
	}
	return nil
}

// textNoDeduplication is AWS's answer to a FIFO send with neither a deduplication id
// nor content-based deduplication (recorded in LocalStack's AWS-validated
// test_posting_to_fifo_requires_deduplicationid_group_id[sqs]).
const textNoDeduplication = "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"

// sendLocked validates and enqueues one message. batch selects the wording AWS uses
// inside SendMessageBatch where it differs.
func (s *Server) sendLocked(q *queue, in sendInput, batch bool, now time.Time) (sendResult, error) {
	if in.MessageBody == nil || *in.MessageBody == "" {
		return sendResult{}, missingParam("MessageBody")
	}
	body := *in.MessageBody
	for _, r := range body {
		if !validBodyChar(r) {
			return sendResult{}, errInvalidMessageContents
		}
	}
	if !utf8.ValidString(body) {
		return sendResult{}, errInvalidMessageContents
	}
	asize, err := checkAttributes(in.MessageAttributes)
	if err != nil {
		return sendResult{}, err
	}
	if err := checkSystemAttributes(in.MessageSystemAttributes); err != nil {
		return sendResult{}, err
	}
	max := q.intAttr("MaximumMessageSize")
	if int64(len(body)+asize) > max {
		if batch {
			return sendResult{}, errInvalidParameter.withMessage("One or more parameters cannot be validated. Reason: Message must be shorter than %d bytes.", max)
		}
		return sendResult{}, errInvalidParameter.withMessage("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", max)
	}
	delay := time.Duration(q.intAttr("DelaySeconds")) * time.Second
	// On a FIFO queue a per-message DelaySeconds of 0 is accepted and the queue's
	// delay applies; any other value is refused (LocalStack's AWS-validated
	// test_fifo_queue_send_message_with_zero_delay_defaults_to_queue_delay[sqs],
	// recorded 2025-07-31, and test_fifo_queue_send_message_with_delay_seconds_fails[sqs]).
	if d := in.DelaySeconds; d != nil && !(q.fifo && *d == 0) {
		d := *d
		if q.fifo {
			return sendResult{}, invalidValue(d, "DelaySeconds", "The request include parameter that is not valid for this queue type.")
		}
		if d < 0 || d > maxDelaySeconds {
			return sendResult{}, invalidValue(d, "DelaySeconds", textDelaySecondsRange)
		}
		delay = time.Duration(d) * time.Second
	}
	if in.delay != nil {
		delay = *in.delay
	}
	var group, dedup string
	if in.MessageGroupID != nil {
		group = *in.MessageGroupID
		if !idRE.MatchString(group) {
			return sendResult{}, invalidValue(group, "MessageGroupId", "MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
		}
	}
	if in.MessageDeduplicationID != nil {
		dedup = *in.MessageDeduplicationID
		if !q.fifo {
			return sendResult{}, invalidValue(dedup, "MessageDeduplicationId", textDedupOnStandardQueue)
		}
		if !idRE.MatchString(dedup) {
			return sendResult{}, invalidValue(dedup, "MessageDeduplicationId", "MessageDeduplicationId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
		}
	}
	res := sendResult{
		MD5OfMessageBody:             md5Hex(body),
		MD5OfMessageAttributes:       md5OfAttributes(in.MessageAttributes),
		MD5OfMessageSystemAttributes: md5OfAttributes(in.MessageSystemAttributes),
	}
	sysAttrs := in.MessageSystemAttributes
	if _, given := sysAttrs["AWSTraceHeader"]; !given && in.traceHeader != "" {
		// AWS takes AWSTraceHeader from the sender's X-Amzn-Trace-Id header
		// (LocalStack's AWS-validated test_aws_trace_header_propagation[sqs],
		// recorded 2025-06-27); the system attribute wins when both are given
		// (AWS X-Ray Developer Guide, "Amazon SQS and AWS X-Ray").
		sysAttrs = maps.Clone(sysAttrs)
		if sysAttrs == nil {
			sysAttrs = map[string]attrValue{}
		}
		th := in.traceHeader
		sysAttrs["AWSTraceHeader"] = attrValue{DataType: "String", StringValue: &th}
	}
	var dedupKey string
	if q.fifo {
		if group == "" {
			if batch {
				return sendResult{}, errInvalidParameter.withMessage("The request must contain the parameter MessageGroupId.")
			}
			return sendResult{}, missingParam("MessageGroupId")
		}
		if dedup == "" {
			if q.attrs["ContentBasedDeduplication"] != "true" {
				return sendResult{}, errInvalidParameter.withMessage(textNoDeduplication)
			}
			sum := sha256.Sum256([]byte(body))
			dedup = hex.EncodeToString(sum[:])
		}
		dedupKey = dedup
		if q.attrs["DeduplicationScope"] == "messageGroup" {
			dedupKey = group + "\x00" + dedup
		}
		if e, ok := q.dedup[dedupKey]; ok && now.Sub(e.at) < dedupWindow {
			res.MessageID, res.SequenceNumber = duplicateSendAnswer(e.msg)
			return res, nil
		}
	}
	m := &message{
		q:           q,
		id:          newUUID(),
		body:        body,
		attrs:       in.MessageAttributes,
		sysAttrs:    sysAttrs,
		groupID:     group,
		dedupID:     dedup,
		senderID:    defaultSenderID,
		sentAt:      now,
		enqueuedAt:  now,
		availableAt: now.Add(delay),
	}
	if q.fifo {
		m.seq = q.nextSeq()
		q.recordDedupLocked(dedupKey, m, now)
		res.SequenceNumber = m.seq
	}
	res.MessageID = m.id
	s.enqueueLocked(q, m, now)
	s.notifyLocked()
	return res, nil
}

// nextSeq returns a FIFO sequence number: a 20-digit decimal, increasing, not
// consecutive.
func (q *queue) nextSeq() string {
	q.seq++
	return fmt.Sprintf("1%019d", q.seq<<12)
}

// collectLocked picks up to max messages for one receive and marks them received.
// Messages over the redrive limit move to the dead-letter queue instead, on the receive
// that would deliver them, not when their visibility lapses (as AWS was observed to do,
// localstack/localstack#8234). Standard queues are fair queues (fair.go): they
// deliver the quiet tenants' receivable messages first, oldest first, then the noisy
// tenants', the one with the fewest in flight first (counting those this receive
// picked), each tenant's oldest first; FIFO queues the leading receivable messages of the groups with
// none in flight, as many of one group as possible before the next group, groups in
// the order of their first message. Each message is returned at most once per receive.
func (s *Server) collectLocked(q *queue, max int, vt time.Duration, now time.Time) []*message {
	s.advanceLocked(q, now)
	var picked []*message
	if !q.fifo {
		var touched []*tenant
		for len(picked) < max {
			t := q.nextTenant()
			if t == nil {
				break
			}
			m := t.readyMsgs.pop()
			q.placeTenant(t)
			if s.redriveLocked(q, m, now) {
				continue
			}
			picked = append(picked, m)
			if t.noisy {
				// Count it in flight for the order of the rest of this receive.
				t.pending++
				touched = append(touched, t)
				q.placeTenant(t)
			}
		}
		for _, t := range touched {
			if t.pending != 0 {
				t.pending = 0
				q.placeTenant(t)
			}
		}
		for _, m := range picked {
			s.deliverLocked(q, m, vt, now)
		}
		return picked
	}
	q.collecting = true
	var touched []*fifoGroup
	for len(picked) < max && q.readyGroups.Len() > 0 {
		g := heap.Pop(&q.readyGroups).(*fifoGroup)
		touched = append(touched, g)
		for m := g.head; m != nil && m.ready && len(picked) < max; {
			next := m.gnext
			if !s.redriveLocked(q, m, now) {
				picked = append(picked, m)
			}
			m = next
		}
	}
	for _, m := range picked {
		s.deliverLocked(q, m, vt, now)
	}
	q.collecting = false
	for _, g := range touched {
		q.fixGroup(g)
	}
	return picked
}

func (s *Server) deliverLocked(q *queue, m *message, vt time.Duration, now time.Time) {
	h := newReceiptHandle()
	m.receiveCount++
	if m.firstReceive.IsZero() {
		m.firstReceive = now
	}
	m.visibleAt = now.Add(vt)
	m.receives = append(m.receives, Receive{At: now, ReceiptHandle: h, VisibilityTimeout: vt})
	s.handles[h] = &handleRef{q: q, m: m, idx: len(m.receives) - 1}
	s.reindexLocked(q, m, now)
}

// redriveLocked moves m to q's dead-letter queue if its receive count has reached
// maxReceiveCount, and reports whether it did. The DLQ copy keeps id, body,
// attributes and receive count and gains DeadLetterQueueSourceArn; a standard DLQ
// keeps the original enqueue time for retention, a FIFO DLQ resets it (Amazon SQS
// Developer Guide, "Setting-up dead-letter queue retention in Amazon SQS").
func (s *Server) redriveLocked(q *queue, m *message, now time.Time) bool {
	if q.redrive == nil || m.receiveCount < q.redrive.MaxReceiveCount {
		return false
	}
	dlq := s.queueByARNLocked(q.redrive.TargetARN)
	if dlq == nil || (dlq == q && !selfRedriveMoves) {
		return false
	}
	nm := &message{
		id:           m.id,
		body:         m.body,
		attrs:        m.attrs,
		sysAttrs:     m.sysAttrs,
		groupID:      m.groupID,
		dedupID:      m.dedupID,
		senderID:     m.senderID,
		dlqSource:    q.arn,
		sentAt:       m.sentAt,
		enqueuedAt:   m.enqueuedAt,
		availableAt:  now,
		receiveCount: m.receiveCount,
		firstReceive: m.firstReceive,
	}
	if dlq.fifo {
		nm.enqueuedAt = now
		nm.seq = dlq.nextSeq()
		// "When a message is moved from a FIFO queue to a FIFO DLQ, the original
		// message's deduplication ID will be replaced with the original message's
		// ID" (Amazon SQS Developer Guide, "Learn how to configure a dead-letter
		// queue redrive in Amazon SQS").
		nm.dedupID = m.id
	}
	m.movedTo = dlq.url
	s.goneLocked(q, m, goneMoved, now)
	s.advanceLocked(dlq, now)
	s.enqueueLocked(dlq, nm, now)
	s.notifyLocked()
	return true
}

func (m *message) systemAttributes(want map[string]bool) map[string]string {
	if len(want) == 0 {
		return nil
	}
	all := want["All"]
	out := map[string]string{}
	add := func(name, v string) {
		if v != "" && (all || want[name]) {
			out[name] = v
		}
	}
	add("SenderId", m.senderID)
	add("SentTimestamp", itoa(m.sentAt.UnixMilli()))
	add("ApproximateReceiveCount", itoa(int64(m.receiveCount)))
	add("ApproximateFirstReceiveTimestamp", itoa(m.firstReceive.UnixMilli()))
	// A standard queue returns the MessageGroupId it was sent with (fair queues): AWS
	// listed it among the system attributes in LocalStack's AWS-validated
	// test_fair_queue_with_message_group_id[sqs] (recorded 2025-08-18).
	add("MessageGroupId", m.groupID)
	add("MessageDeduplicationId", m.dedupID)
	add("SequenceNumber", m.seq)
	add("DeadLetterQueueSourceArn", m.dlqSource)
	if a, ok := m.sysAttrs["AWSTraceHeader"]; ok && a.StringValue != nil {
		add("AWSTraceHeader", *a.StringValue)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// filterAttributes applies ReceiveMessage's MessageAttributeNames: "All", "*" and
// ".*" select everything, "X.*" every name starting with X (so "Hel.*" selects both
// "Hello" and "Help.Me", as AWS answered in LocalStack's AWS-validated test
// test_receive_message_message_attribute_names_filters), other entries exact
// names. Names no attribute can have select nothing.
func filterAttributes(attrs map[string]attrValue, names []string) map[string]attrValue {
	if len(attrs) == 0 || len(names) == 0 {
		return nil
	}
	out := map[string]attrValue{}
	for _, sel := range names {
		switch {
		case sel == "All" || sel == "*" || sel == ".*":
			return attrs
		case strings.HasSuffix(sel, ".*"):
			prefix := strings.TrimSuffix(sel, ".*")
			for n, v := range attrs {
				if strings.HasPrefix(n, prefix) {
					out[n] = v
				}
			}
		default:
			if v, ok := attrs[sel]; ok {
				out[sel] = v
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

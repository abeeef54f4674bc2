package sqstest

import (
	"encoding/json"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Queue attribute limits and defaults, as documented for CreateQueue's Attributes
// (aws-sdk-go-v2 service/sqs api_op_CreateQueue.go).
const (
	maxVisibilityTimeout   = 43200 // seconds; also the 12-hour ceiling
	defaultVisibility      = 30
	defaultRetention       = 345600
	minRetention           = 60
	maxRetention           = 1209600
	maxDelaySeconds        = 900
	maxWaitTimeSeconds     = 20
	maxMessageSize         = 1048576
	minMessageSize         = 1024
	dedupWindow            = 5 * time.Minute
	purgeInterval          = 60 * time.Second
	queueNameReuseInterval = 60 * time.Second
	maxBatchEntries        = 10
	ceiling                = maxVisibilityTimeout * time.Second
)

// queue is one queue's state. Every field is guarded by Server.mu.
type queue struct {
	name, url, arn string
	fifo           bool
	created        time.Time
	modified       time.Time
	// attrs holds the settable attributes as they read back (normalised strings).
	attrs   map[string]string
	redrive *redrivePolicy
	tags    map[string]string
	// msgs is the history: every message that arrived, in arrival order, but for
	// those evicted by WithHistoryLimit. byID indexes it by MessageId.
	msgs     []*message
	byID     map[string]*message
	dedup    map[string]dedupEntry
	seq      uint64
	purgedAt time.Time
	// moveTasks are the message move tasks started with this queue as source,
	// oldest first (movetask.go).
	moveTasks []*moveTask
	queueIndex
}

type redrivePolicy struct {
	TargetARN       string `json:"deadLetterTargetArn"`
	MaxReceiveCount int    `json:"maxReceiveCount"`
}

type dedupEntry struct {
	at  time.Time
	msg *message
}

func (q *queue) intAttr(name string) int64 {
	n, _ := strconv.ParseInt(q.attrs[name], 10, 64)
	return n
}

func (q *queue) visibilityTimeout() time.Duration {
	return time.Duration(q.intAttr("VisibilityTimeout")) * time.Second
}

// attrSpec describes one settable queue attribute.
type attrSpec struct {
	def      string // default read-back value ("" = absent unless set)
	fifoOnly bool
	create   bool // settable only at creation
	valid    func(string) bool
}

func intRange(lo, hi int64) func(string) bool {
	return func(v string) bool {
		n, err := strconv.ParseInt(v, 10, 64)
		return err == nil && n >= lo && n <= hi
	}
}

func oneOf(vals ...string) func(string) bool {
	return func(v string) bool {
		for _, x := range vals {
			if v == x {
				return true
			}
		}
		return false
	}
}

func anyValue(string) bool { return true }

// isBool accepts "true" and "false" in any letter case: AWS accepted "True" for
// FifoQueue and ContentBasedDeduplication (as Python's str(True) writes it) in
// LocalStack's AWS-validated test_fifo_delete_after_visibility_timeout[sqs]
// (tests/aws/services/sqs/test_sqs.snapshot.json, recorded 2025-03-28) and
// "False" in test_sqs_fifo_same_dedup_id_different_message_groups[sqs]. Such values
// read back in lower case. Casings other than these two: UNCONFIRMED.
func isBool(v string) bool { return strings.EqualFold(v, "true") || strings.EqualFold(v, "false") }

// boolAttrs are the attributes whose values isBool checks; they are stored in lower
// case.
var boolAttrs = map[string]bool{"FifoQueue": true, "ContentBasedDeduplication": true, "SqsManagedSseEnabled": true}

// isTrue reports whether a boolean attribute value is true, in any letter case.
func isTrue(v string) bool { return strings.EqualFold(v, "true") }

var attrSpecs = map[string]attrSpec{
	"DelaySeconds":                  {def: "0", valid: intRange(0, maxDelaySeconds)},
	"MaximumMessageSize":            {def: itoa(maxMessageSize), valid: intRange(minMessageSize, maxMessageSize)},
	"MessageRetentionPeriod":        {def: itoa(defaultRetention), valid: intRange(minRetention, maxRetention)},
	"ReceiveMessageWaitTimeSeconds": {def: "0", valid: intRange(0, maxWaitTimeSeconds)},
	"VisibilityTimeout":             {def: itoa(defaultVisibility), valid: intRange(0, maxVisibilityTimeout)},
	"SqsManagedSseEnabled":          {def: "true", valid: isBool},
	"Policy":                        {valid: anyValue},
	"RedrivePolicy":                 {valid: anyValue}, // checked by parseRedrivePolicy
	"RedriveAllowPolicy":            {valid: anyValue},
	"KmsMasterKeyId":                {valid: anyValue},
	"KmsDataKeyReusePeriodSeconds":  {valid: intRange(60, 86400)},
	"FifoQueue":                     {def: "true", fifoOnly: true, create: true, valid: isBool},
	"ContentBasedDeduplication":     {def: "false", fifoOnly: true, valid: isBool},
	"DeduplicationScope":            {def: "queue", fifoOnly: true, valid: oneOf("queue", "messageGroup")},
	"FifoThroughputLimit":           {def: "perQueue", fifoOnly: true, valid: oneOf("perQueue", "perMessageGroupId")},
}

// readOnlyAttrs are computed on read.
var readOnlyAttrs = []string{
	"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
	"ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn",
}

var (
	queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	fifoNameRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,75}\.fifo$`)
)

// checkAttrsLocked validates attributes for a queue of the given type; creating
// allows create-only attributes, and lenientDLQ accepts a RedrivePolicy naming a
// queue that does not exist (only the Server.CreateQueue helper sets it). It returns
// the normalised values and the redrive policy (rpSet when RedrivePolicy was given).
func (s *Server) checkAttrsLocked(attrs map[string]string, fifo, creating, lenientDLQ bool, self string) (map[string]string, *redrivePolicy, bool, error) {
	out := map[string]string{}
	var rp *redrivePolicy
	rpSet := false
	names := sortedKeys(attrs)
	for _, name := range names {
		v := attrs[name]
		spec, ok := attrSpecs[name]
		if !ok {
			return nil, nil, false, errInvalidAttributeName.withMessage("Unknown Attribute %s.", name)
		}
		if spec.fifoOnly && !fifo {
			// Recorded from AWS in LocalStack's AWS-validated
			// test_create_standard_queue_with_fifo_attribute_raises_error[sqs]
			// (2024-05-15): FifoQueue (even "false") and ContentBasedDeduplication
			// are unknown on a standard queue; DeduplicationScope and
			// FifoThroughputLimit get a sentence of their own.
			// test_set_unsupported_attribute_standard[sqs] (2024-05-14) shows the
			// same for SetQueueAttributes FifoQueue.
			switch name {
			case "DeduplicationScope", "FifoThroughputLimit":
				return nil, nil, false, errInvalidAttributeName.withMessage("You can specify the %s only when FifoQueue is set to true.", name)
			}
			return nil, nil, false, errInvalidAttributeName.withMessage("Unknown Attribute %s.", name)
		}
		if !spec.valid(v) {
			return nil, nil, false, errInvalidAttributeValue.withMessage("Invalid value for the parameter %s.", name)
		}
		if boolAttrs[name] {
			v = strings.ToLower(v)
		}
		if spec.create && !creating {
			// SetQueueAttributes FifoQueue=true on a FIFO queue answers 200 and
			// changes nothing; "false" is refused (LocalStack's AWS-validated
			// test_set_unsupported_attribute_fifo[sqs], 2024-05-14).
			if name == "FifoQueue" && v == "true" {
				continue
			}
			return nil, nil, false, errInvalidAttributeValue.withMessage("Invalid value for the parameter %s. Reason: Modifying queue type is not supported.", name)
		}
		if name == "RedrivePolicy" {
			rpSet = true
			if v == "" {
				continue
			}
			p, err := s.parseRedrivePolicyLocked(v, fifo, lenientDLQ, self)
			if err != nil {
				return nil, nil, false, err
			}
			rp = p
			v = normaliseRedrivePolicy(p)
		}
		out[name] = v
	}
	return out, rp, rpSet, nil
}

// parseRedrivePolicyLocked checks a RedrivePolicy value. A policy naming the queue
// itself is accepted, as AWS accepted it in LocalStack's AWS-validated
// test_set_empty_redrive_policy[sqs] (tests/aws/services/sqs/test_sqs.py, validated
// 2024-08-20); such a queue never moves a message (unconfirmed.go). A policy naming a
// queue that does not exist is refused (deadLetterTargetMissing) unless lenient.
func (s *Server) parseRedrivePolicyLocked(v string, fifo, lenient bool, self string) (*redrivePolicy, error) {
	bad := func(reason string) error { return invalidValue(v, "RedrivePolicy", reason) }
	var raw map[string]any
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, bad("Redrive policy is not a valid JSON map.")
	}
	arn, _ := raw["deadLetterTargetArn"].(string)
	if arn == "" {
		return nil, bad("Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
	}
	var n int64
	switch c := raw["maxReceiveCount"].(type) {
	case float64:
		n = int64(c)
		if float64(n) != c {
			n = 0
		}
	case string:
		n, _ = strconv.ParseInt(c, 10, 64)
	case nil:
		return nil, bad("Redrive policy does not contain mandatory attribute: maxReceiveCount.")
	}
	if n < 1 || n > 1000 {
		return nil, bad("Invalid value for maxReceiveCount: " + fmtAny(raw["maxReceiveCount"]) + ", valid values are from 1 to 1000 both inclusive.")
	}
	dlq := s.queueByARNLocked(arn)
	if dlq == nil && arn != self && !lenient {
		return nil, deadLetterTargetMissing(v)
	}
	if dlq != nil && dlq.fifo != fifo {
		return nil, bad("Dead-letter queue must be same type of queue as the source.")
	}
	return &redrivePolicy{TargetARN: arn, MaxReceiveCount: int(n)}, nil
}

func fmtAny(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (s *Server) queueByARNLocked(arn string) *queue {
	for _, q := range s.queues {
		if q.arn == arn {
			return q
		}
	}
	return nil
}

// queueLocked resolves a QueueUrl. Routing uses only the path's last two segments
// (account and name), so any host and scheme reach the queue, as with AWS's
// endpoint-independent queue URLs. A bare queue name (no "/") names a queue of this
// server's account: AWS accepted names as QueueUrl for SetQueueAttributes and
// GetQueueAttributes in LocalStack's AWS-validated test_set_empty_redrive_policy[sqs]
// (validated 2024-08-20).
func (s *Server) queueLocked(url string) (*queue, error) {
	if url == "" {
		return nil, missingParam("QueueUrl")
	}
	if !strings.Contains(url, "/") {
		if q, ok := s.queues[url]; ok {
			return q, nil
		}
		return nil, errQueueDoesNotExist
	}
	rest := url
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if len(parts) >= 2 {
		name, account := parts[len(parts)-1], parts[len(parts)-2]
		if q, ok := s.queues[name]; ok && account == s.cfg.accountID {
			return q, nil
		}
	}
	return nil, errQueueDoesNotExist
}

// createQueueLocked is CreateQueue; lenientDLQ as in checkAttrsLocked.
func (s *Server) createQueueLocked(name string, attrs map[string]string, tags map[string]string, lenientDLQ bool, now time.Time) (*queue, error) {
	if name == "" {
		return nil, missingParam("QueueName")
	}
	fifo := isTrue(attrs["FifoQueue"])
	if fifo && !fifoNameRE.MatchString(name) {
		return nil, errInvalidParameter.withMessage("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
	}
	if !fifo && !queueNameRE.MatchString(name) {
		return nil, errInvalidParameter.withMessage("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
	}
	arn := "arn:aws:sqs:" + s.cfg.region + ":" + s.cfg.accountID + ":" + name
	set, rp, _, err := s.checkAttrsLocked(attrs, fifo, true, lenientDLQ, arn)
	if err != nil {
		return nil, err
	}
	if err := checkEncryption(nil, set); err != nil {
		return nil, err
	}
	if q, ok := s.queues[name]; ok {
		for _, k := range sortedKeys(set) {
			if q.attrValueLocked(k) != set[k] {
				return nil, errQueueNameExists.withMessage("A queue already exists with the same name and a different value for attribute %s", k)
			}
		}
		return q, nil
	}
	if at, ok := s.deletedAt[name]; ok && now.Sub(at) < queueNameReuseInterval {
		return nil, errQueueDeletedRecently
	}
	q := &queue{
		name:     name,
		url:      s.cfg.baseURL + "/" + s.cfg.accountID + "/" + name,
		arn:      arn,
		fifo:     fifo,
		created:  now,
		modified: now,
		attrs:    map[string]string{},
		tags:     map[string]string{},
		dedup:    map[string]dedupEntry{},
		byID:     map[string]*message{},
		redrive:  rp,
	}
	q.queueIndex.init()
	for k, spec := range attrSpecs {
		if spec.def != "" && (!spec.fifoOnly || fifo) {
			q.attrs[k] = spec.def
		}
	}
	applyAttrs(q.attrs, set)
	maps.Copy(q.tags, tags)
	s.queues[name] = q
	return q, nil
}

func (s *Server) setQueueAttributesLocked(q *queue, attrs map[string]string, now time.Time) error {
	set, rp, rpSet, err := s.checkAttrsLocked(attrs, q.fifo, false, false, q.arn)
	if err != nil {
		return err
	}
	if err := checkEncryption(q.attrs, set); err != nil {
		return err
	}
	applyAttrs(q.attrs, set)
	if rpSet {
		q.redrive = rp
		if rp == nil {
			delete(q.attrs, "RedrivePolicy")
		}
	}
	q.modified = now
	s.notifyLocked()
	return nil
}

// attrValueLocked reads one attribute ("" when absent).
func (q *queue) attrValueLocked(name string) string { return q.attrs[name] }

func (s *Server) getQueueAttributesLocked(q *queue, names []string, now time.Time) (map[string]string, error) {
	want := map[string]bool{}
	all := false
	for _, n := range names {
		if n == "All" {
			all = true
			continue
		}
		if _, ok := attrSpecs[n]; !ok && !contains(readOnlyAttrs, n) {
			return nil, errInvalidAttributeName.withMessage("Unknown Attribute %s.", n)
		}
		want[n] = true
	}
	out := map[string]string{}
	s.advanceLocked(q, now)
	visible, inflight := q.nReady, q.nLeased
	delayed := q.present() - visible - inflight
	computed := map[string]string{
		"ApproximateNumberOfMessages":           itoa(int64(visible)),
		"ApproximateNumberOfMessagesNotVisible": itoa(int64(inflight)),
		"ApproximateNumberOfMessagesDelayed":    itoa(int64(delayed)),
		"CreatedTimestamp":                      itoa(q.created.Unix()),
		"LastModifiedTimestamp":                 itoa(q.modified.Unix()),
		"QueueArn":                              q.arn,
	}
	for k, v := range computed {
		if all || want[k] {
			out[k] = v
		}
	}
	for k, v := range q.listedAttrs() {
		if all || want[k] {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// deleteQueueLocked deletes q. Its messages and their receipt handles are forgotten
// with it: nothing can reach them any more, and a long-running server must not keep
// them. (A handle of the deleted queue used on a re-created queue of the same name
// therefore answers as never issued.)
func (s *Server) deleteQueueLocked(q *queue, now time.Time) {
	delete(s.queues, q.name)
	for name, at := range s.deletedAt {
		if now.Sub(at) >= queueNameReuseInterval {
			delete(s.deletedAt, name)
		}
	}
	s.deletedAt[q.name] = now
	s.removeAllLocked(q, goneQueueDeleted, now)
	for _, m := range q.msgs {
		s.forgetLocked(q, m)
	}
	q.msgs, q.departed = nil, nil
	s.notifyLocked()
}

func (s *Server) purgeLocked(q *queue, now time.Time) error {
	if !q.purgedAt.IsZero() && now.Sub(q.purgedAt) < purgeInterval {
		return errPurgeInProgress.withMessage("Only one PurgeQueue operation on %s is allowed every 60 seconds.", q.name)
	}
	q.purgedAt = now
	s.removeAllLocked(q, gonePurged, now)
	if q.fifo {
		q.clearDedupLocked()
	}
	s.notifyLocked()
	return nil
}

// Server-side encryption attributes, as AWS answered in LocalStack's AWS-validated
// tests (tests/aws/services/sqs/test_sqs.snapshot.json): setting KmsMasterKeyId
// turns SqsManagedSseEnabled to "false" (test_sse_queue_attributes[sqs],
// 2024-04-30; test_set_queue_attributes_default_values[sqs], 2025-12-10); setting
// it to "" makes both KMS attributes disappear from GetQueueAttributes while
// SqsManagedSseEnabled stays "false" (the same test); asking for KMS and SQS-managed
// encryption in one call is refused with InvalidAttributeName
// (test_sse_kms_and_sqs_are_mutually_exclusive[sqs], 2024-04-30).
const (
	attrKmsKey   = "KmsMasterKeyId"
	attrKmsReuse = "KmsDataKeyReusePeriodSeconds"
	attrSqsSSE   = "SqsManagedSseEnabled"
)

// checkEncryption refuses a change (set, already validated) that would leave a
// queue with current attributes cur (nil when creating) with both a KMS key and
// SQS-managed encryption.
func checkEncryption(cur, set map[string]string) error {
	key, keySet := set[attrKmsKey]
	if !keySet {
		key = cur[attrKmsKey]
	}
	if key != "" && set[attrSqsSSE] == "true" {
		return errInvalidAttributeName.withMessage("You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.")
	}
	return nil
}

// applyAttrs merges validated attributes set into a queue's attrs, with the
// encryption rules above.
func applyAttrs(attrs, set map[string]string) {
	maps.Copy(attrs, set)
	key, keySet := set[attrKmsKey]
	switch {
	case !keySet:
	case key == "":
		delete(attrs, attrKmsKey)
		delete(attrs, attrKmsReuse)
	default:
		if _, sse := set[attrSqsSSE]; !sse {
			attrs[attrSqsSSE] = "false"
		}
	}
}

// listedAttrs are the settable attributes GetQueueAttributes returns: the KMS pair
// only while a key is set, KmsDataKeyReusePeriodSeconds then defaulting to 300 s
// (its documented default, aws-sdk-go-v2 service/sqs api_op_SetQueueAttributes.go;
// that it is listed when never set is UNCONFIRMED).
func (q *queue) listedAttrs() map[string]string {
	if q.attrs[attrKmsKey] != "" {
		if _, ok := q.attrs[attrKmsReuse]; ok {
			return q.attrs
		}
		out := maps.Clone(q.attrs)
		out[attrKmsReuse] = "300"
		return out
	}
	if _, ok := q.attrs[attrKmsReuse]; !ok {
		return q.attrs
	}
	out := maps.Clone(q.attrs)
	delete(out, attrKmsReuse)
	return out
}

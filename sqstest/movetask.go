package sqstest

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// This file owns message move tasks (StartMessageMoveTask, CancelMessageMoveTask,
// ListMessageMoveTasks) and ListDeadLetterSourceQueues.
//
// A task has no goroutine and no timer of its own. It takes one step every interval
// (1/MaxNumberOfMessagesPerSecond), the first when it starts; advanceTasksLocked
// takes every step that is due, in time order, at the start of every request and
// helper call, before anything else reads a queue, so each step sees the queues as
// they were at its moment. A long poll waits at most until the next step
// (nextTaskStepLocked). Inside a testing/synctest bubble a task therefore runs on
// virtual time like everything else.

// Move task statuses, as listed in the SQS API reference (ListMessageMoveTasksResultEntry).
const (
	TaskRunning    = "RUNNING"
	TaskCompleted  = "COMPLETED"
	TaskCancelling = "CANCELLING"
	TaskCancelled  = "CANCELLED"
	TaskFailed     = "FAILED"
)

// maxMoveRate is the largest MaxNumberOfMessagesPerSecond (aws-sdk-go-v2 service/sqs
// api_op_StartMessageMoveTask.go: "The maximum value for messages per second is 500").
const maxMoveRate = 500

// maxListedTasks is ListMessageMoveTasks' upper limit on MaxResults (up to the 10
// most recent tasks, aws-sdk-go-v2 service/sqs api_op_ListMessageMoveTasks.go).
const maxListedTasks = 10

// moveTask is one message move task. Guarded by Server.mu.
type moveTask struct {
	id        string
	handle    string
	source    *queue // the queue the task started on; the task fails if it is deleted
	sourceARN string
	destARN   string // "" moves each message to its DeadLetterQueueSourceArn
	rate      int32  // MaxNumberOfMessagesPerSecond as given, 0 when not given
	interval  time.Duration
	started   time.Time
	status    string
	moved     int64
	toMove    int64
	failure   string
	// members are the messages in the source when the task started, in arrival
	// order; those moved or gone are dropped from the front as they are passed.
	members []*message
	next    time.Time // the next step, while the task is active
}

func (t *moveTask) active() bool { return t.status == TaskRunning || t.status == TaskCancelling }

// taskHandle encodes a task's handle as AWS does: base64 of a JSON object with the
// task id (a UUID) and the source queue's ARN. LocalStack's AWS-validated
// test_basic_move_task_workflow (tests/aws/services/sqs/test_sqs_move_task.py,
// validated 2024-04-30) decodes AWS's handle that way.
func taskHandle(id, sourceARN string) string {
	b, _ := json.Marshal(struct {
		TaskID    string `json:"taskId"`
		SourceARN string `json:"sourceArn"`
	}{id, sourceARN})
	return base64.StdEncoding.EncodeToString(b)
}

func parseTaskHandle(h string) (id, sourceARN string, ok bool) {
	b, err := base64.StdEncoding.DecodeString(h)
	if err != nil {
		return "", "", false
	}
	var v struct {
		TaskID    string `json:"taskId"`
		SourceARN string `json:"sourceArn"`
	}
	if json.Unmarshal(b, &v) != nil || v.TaskID == "" || v.SourceARN == "" {
		return "", "", false
	}
	return v.TaskID, v.SourceARN, true
}

// Errors of the move-task actions recorded from AWS in LocalStack's AWS-validated
// tests (tests/aws/services/sqs/test_sqs_move_task.snapshot.json, 2024-04-30; test
// names given with each use).
var (
	errResourceNotFound = Fault{Status: http.StatusNotFound, Type: "ResourceNotFoundException",
		QueryCode: "ResourceNotFoundException"}
	errSourceARNNotFound      = errResourceNotFound.withMessage("The resource that you specified for the SourceArn parameter doesn't exist.")
	errDestinationARNNotFound = errResourceNotFound.withMessage("The resource that you specified for the DestinationArn parameter doesn't exist.")
)

// advanceTasksLocked takes every due step of every active task, earliest first (ties
// in the order the tasks started). s.mu must be held.
func (s *Server) advanceTasksLocked(now time.Time) {
	for {
		var t *moveTask
		for _, x := range s.tasks {
			if t == nil || x.next.Before(t.next) {
				t = x
			}
		}
		if t == nil || t.next.After(now) {
			return
		}
		s.stepTaskLocked(t)
		if !t.active() {
			s.tasks = slices.DeleteFunc(s.tasks, func(x *moveTask) bool { return x == t })
		}
	}
}

// nextTaskStepLocked is the time of the next step of any active task, or zero.
func (s *Server) nextTaskStepLocked() time.Time {
	var next time.Time
	for _, t := range s.tasks {
		if next.IsZero() || t.next.Before(next) {
			next = t.next
		}
	}
	return next
}

// stepTaskLocked takes t's step due at t.next: a cancelled task stops; otherwise the
// oldest receivable message of those present at the start moves to its destination
// as a new message. The task completes when none of them is left or receivable
// (movableLocked), and fails when a queue it needs is gone: the message that could
// not move stays where it is.
func (s *Server) stepTaskLocked(t *moveTask) {
	at := t.next
	if t.status == TaskCancelling {
		t.status = TaskCancelled
		return
	}
	if s.queues[t.source.name] != t.source {
		t.status, t.failure = TaskFailed, errQueueDoesNotExist.Code()
		return
	}
	s.advanceLocked(t.source, at)
	m := t.movableLocked(at)
	if m == nil {
		t.status = TaskCompleted
		return
	}
	dest := t.destARN
	if dest == "" {
		dest = m.dlqSource
	}
	dq := s.queueByARNLocked(dest)
	if dq == nil {
		// Recorded: deleting the destination while the task runs fails it with
		// this reason (test_move_task_delete_destination_queue_while_running).
		// A message with no DeadLetterQueueSourceArn, moved without a
		// DestinationArn, fails it the same way: UNCONFIRMED (unconfirmed.go).
		t.status, t.failure = TaskFailed, errQueueDoesNotExist.Code()
		return
	}
	s.advanceLocked(dq, at)
	s.redriveMessageLocked(t.source, dq, m, at)
	t.moved++
	if t.movableLocked(at) == nil && len(t.members) == 0 {
		t.status = TaskCompleted
		return
	}
	t.next = at.Add(t.interval)
}

// movableLocked drops the members that left the source and returns the oldest one
// that is receivable at at, or nil.
func (t *moveTask) movableLocked(at time.Time) *message {
	for len(t.members) > 0 && t.members[0].gone != present {
		t.members[0] = nil
		t.members = t.members[1:]
	}
	for _, m := range t.members {
		if m.available(at) {
			return m
		}
	}
	return nil
}

// redriveMessageLocked moves m from src to dst as a new message, as a move task does:
// "All redriven messages are considered new messages with a new messageID and
// enqueueTime" (Amazon SQS Developer Guide, "Learn how to configure a dead-letter
// queue redrive in Amazon SQS"), so its receive count starts at 0 and its retention
// at the move. Body, message attributes, AWSTraceHeader and, on FIFO queues, group
// and deduplication id are kept; the rest of what the copy gets is listed in
// unconfirmed.go (redriveCopy).
func (s *Server) redriveMessageLocked(src, dst *queue, m *message, at time.Time) {
	nm := redriveCopy(m, dst, at)
	m.movedTo, m.redrivenAs = dst.url, nm.id
	s.goneLocked(src, m, goneRedriven, at)
	s.enqueueLocked(dst, nm, at)
	s.notifyLocked()
}

// isDeadLetterQueueLocked reports whether some queue's RedrivePolicy names q.
func (s *Server) isDeadLetterQueueLocked(q *queue) bool {
	for _, x := range s.queues {
		if x.redrive != nil && x.redrive.TargetARN == q.arn {
			return true
		}
	}
	return false
}

func (s *Server) actStartMessageMoveTask(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		SourceARN string `json:"SourceArn"`
		DestARN   string `json:"DestinationArn"`
		Rate      *int32 `json:"MaxNumberOfMessagesPerSecond"`
	}](body)
	if err != nil {
		return nil, err
	}
	if in.SourceARN == "" {
		return nil, missingParam("SourceArn")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advanceTasksLocked(now)
	src := s.queueByARNLocked(in.SourceARN)
	if src == nil {
		return nil, errSourceARNNotFound // recorded for CancelMessageMoveTask; see unconfirmed.go
	}
	if !s.isDeadLetterQueueLocked(src) {
		// test_source_needs_redrive_policy
		return nil, errInvalidParameter.withMessage("Source queue must be configured as a Dead Letter Queue.")
	}
	if r := in.Rate; r != nil && (*r < 1 || *r > maxMoveRate) {
		return nil, invalidValue(*r, "MaxNumberOfMessagesPerSecond", textMoveRateRange)
	}
	if in.DestARN != "" {
		dq := s.queueByARNLocked(in.DestARN)
		if dq == nil {
			return nil, errDestinationARNNotFound // test_destination_needs_to_exist
		}
		if dq.fifo != src.fifo {
			return nil, errInvalidParameter.withMessage(textMoveQueueTypes)
		}
	}
	for _, t := range src.moveTasks {
		if t.active() {
			// test_start_multiple_move_tasks
			return nil, errInvalidParameter.withMessage("There is already a task running. Only one active task is allowed for a source queue arn at a given time.")
		}
	}
	s.advanceLocked(src, now)
	t := &moveTask{
		id:        newUUID(),
		source:    src,
		sourceARN: src.arn,
		destARN:   in.DestARN,
		interval:  time.Second / defaultMoveRate,
		started:   now,
		status:    TaskRunning,
		members:   src.presentInOrder(),
		next:      now,
	}
	t.handle = taskHandle(t.id, t.sourceARN)
	t.toMove = int64(len(t.members))
	if in.Rate != nil {
		t.rate = *in.Rate
		t.interval = time.Second / time.Duration(t.rate)
	}
	src.moveTasks = append(src.moveTasks, t)
	s.tasks = append(s.tasks, t)
	s.advanceTasksLocked(now) // the first message moves at once
	return struct {
		TaskHandle string `json:"TaskHandle"`
	}{t.handle}, nil
}

// presentInOrder returns the messages still in q, in arrival order.
func (q *queue) presentInOrder() []*message {
	out := append([]*message(nil), q.retention.items...)
	slices.SortFunc(out, func(a, b *message) int { return cmp.Compare(a.order, b.order) })
	return out
}

func (s *Server) actCancelMessageMoveTask(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		TaskHandle string `json:"TaskHandle"`
	}](body)
	if err != nil {
		return nil, err
	}
	if in.TaskHandle == "" {
		return nil, missingParam("TaskHandle")
	}
	id, arn, ok := parseTaskHandle(in.TaskHandle)
	if !ok {
		// test_cancel_with_invalid_task_handle
		return nil, errInvalidParameter.withMessage("Value for parameter TaskHandle is invalid.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceTasksLocked(time.Now())
	src := s.queueByARNLocked(arn)
	if src == nil {
		return nil, errSourceARNNotFound // test_cancel_with_invalid_source_arn_in_task_handle
	}
	i := slices.IndexFunc(src.moveTasks, func(t *moveTask) bool { return t.id == id })
	if i < 0 {
		// test_cancel_with_invalid_task_id_in_task_handle
		return nil, errResourceNotFound.withMessage("Task does not exist.")
	}
	t := src.moveTasks[i]
	if t.status != TaskRunning {
		return nil, errInvalidParameter.withMessage(textCancelNotRunning, t.status)
	}
	// The task stops at its next step (unconfirmed.go); the answer counts the
	// messages moved so far (test_move_task_cancel).
	t.status = TaskCancelling
	return struct {
		Moved int64 `json:"ApproximateNumberOfMessagesMoved"`
	}{t.moved}, nil
}

// taskEntry is one ListMessageMoveTasks result. As AWS answered in
// test_move_task_cancel and test_basic_move_task_workflow: TaskHandle only while
// RUNNING, DestinationArn and MaxNumberOfMessagesPerSecond only when the task was
// started with them, FailureReason only when FAILED.
type taskEntry struct {
	Moved          int64  `json:"ApproximateNumberOfMessagesMoved"`
	ToMove         int64  `json:"ApproximateNumberOfMessagesToMove"`
	DestinationARN string `json:"DestinationArn,omitempty"`
	FailureReason  string `json:"FailureReason,omitempty"`
	Rate           int32  `json:"MaxNumberOfMessagesPerSecond,omitempty"`
	SourceARN      string `json:"SourceArn"`
	Started        int64  `json:"StartedTimestamp"`
	Status         string `json:"Status"`
	TaskHandle     string `json:"TaskHandle,omitempty"`
}

func (s *Server) actListMessageMoveTasks(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		SourceARN  string `json:"SourceArn"`
		MaxResults *int32 `json:"MaxResults"`
	}](body)
	if err != nil {
		return nil, err
	}
	if in.SourceARN == "" {
		return nil, missingParam("SourceArn")
	}
	limit := 1
	if r := in.MaxResults; r != nil {
		if *r < 1 || *r > maxListedTasks {
			return nil, invalidValue(*r, "MaxResults", textListTasksRange)
		}
		limit = int(*r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceTasksLocked(time.Now())
	src := s.queueByARNLocked(in.SourceARN)
	if src == nil {
		return nil, errSourceARNNotFound
	}
	out := struct {
		Results []taskEntry `json:"Results"`
	}{Results: []taskEntry{}}
	for i := len(src.moveTasks) - 1; i >= 0 && len(out.Results) < limit; i-- {
		t := src.moveTasks[i]
		e := taskEntry{Moved: t.moved, ToMove: t.toMove, DestinationARN: t.destARN, Rate: t.rate,
			SourceARN: t.sourceARN, Started: startedTimestamp(t.started), Status: t.status}
		if t.status == TaskRunning {
			e.TaskHandle = t.handle
		}
		if t.status == TaskFailed {
			e.FailureReason = t.failure
		}
		out.Results = append(out.Results, e)
	}
	return out, nil
}

func (s *Server) actListDeadLetterSourceQueues(_ context.Context, body []byte) (any, error) {
	in, err := decode[struct {
		QueueURL   string `json:"QueueUrl"`
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
	return s.withQueue(in.QueueURL, func(q *queue, _ time.Time) (any, error) {
		// The member is "queueUrls", lower case, in the SQS model (aws-sdk-go-v2
		// service/sqs schemas/schemas.go); it is required, so an empty list is
		// sent, not left out.
		out := struct {
			QueueUrls []string `json:"queueUrls"`
			NextToken string   `json:"NextToken,omitempty"`
		}{QueueUrls: []string{}}
		for _, name := range sortedKeys(s.queues) {
			x := s.queues[name]
			if x.redrive == nil || x.redrive.TargetARN != q.arn || (after != "" && name <= after) {
				continue
			}
			if in.MaxResults != nil && len(out.QueueUrls) == int(*in.MaxResults) {
				last := out.QueueUrls[len(out.QueueUrls)-1]
				out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(last[strings.LastIndex(last, "/")+1:]))
				break
			}
			if in.MaxResults == nil && len(out.QueueUrls) == 1000 {
				break
			}
			out.QueueUrls = append(out.QueueUrls, x.url)
		}
		return out, nil
	})
}

// MoveTask is a snapshot of one message move task, for assertions. The fields are
// those ListMessageMoveTasks reports.
type MoveTask struct {
	TaskHandle     string
	SourceARN      string
	DestinationARN string // "" when the task moves messages to their original sources
	// MaxNumberOfMessagesPerSecond as given, 0 when not given.
	MaxNumberOfMessagesPerSecond int32
	Status                       string // TaskRunning, TaskCompleted, ...
	Moved, ToMove                int64
	FailureReason                string
	Started                      time.Time
}

// MoveTasks returns every move task started on the queue (by URL), oldest first,
// as of now. It returns nil for an unknown queue.
func (s *Server) MoveTasks(queueURL string) []MoveTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceTasksLocked(time.Now())
	q, err := s.queueLocked(queueURL)
	if err != nil {
		return nil
	}
	out := make([]MoveTask, 0, len(q.moveTasks))
	for _, t := range q.moveTasks {
		out = append(out, MoveTask{TaskHandle: t.handle, SourceARN: t.sourceARN, DestinationARN: t.destARN,
			MaxNumberOfMessagesPerSecond: t.rate, Status: t.status, Moved: t.moved, ToMove: t.toMove,
			FailureReason: t.failure, Started: t.started})
	}
	return out
}

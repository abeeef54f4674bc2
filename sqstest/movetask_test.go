package sqstest_test

// Message move tasks. Expectations marked "recorded" are AWS's answers in
// LocalStack's AWS-validated tests (repository localstack/localstack,
// tests/aws/services/sqs/test_sqs_move_task.snapshot.json with
// test_sqs_move_task.validation.json, validated 2024-04-30; the test is named in
// each case). The rest follow unconfirmed.go.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// pipe is a source queue whose messages go to dlq after one receive, as in the
// recordings' sqs_create_dlq_pipe fixture.
type pipe struct {
	b                bundle
	src, dlq         string
	srcARN, dlqARN   string
	destURL, destARN string
}

func newPipe(t *testing.T, b bundle, suffix string) pipe {
	t.Helper()
	p := pipe{b: b}
	attrs := map[string]string{}
	if suffix == ".fifo" {
		attrs = map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	}
	p.dlq = b.queue(t, "dlq"+suffix, attrs)
	p.dlqARN = queueArn(t, b, p.dlq)
	src := map[string]string{"VisibilityTimeout": "0", "RedrivePolicy": `{"deadLetterTargetArn":"` + p.dlqARN + `","maxReceiveCount":1}`}
	for k, v := range attrs {
		src[k] = v
	}
	p.src = b.queue(t, "src"+suffix, src)
	p.srcARN = queueArn(t, b, p.src)
	p.destURL = b.queue(t, "dest"+suffix, attrs)
	p.destARN = queueArn(t, b, p.destURL)
	return p
}

// deadLetter sends n messages to the source and receives each twice, so that all
// move to the DLQ; it returns their bodies.
func (p pipe) deadLetter(t *testing.T, n int, mod ...func(*sqs.SendMessageInput)) []string {
	t.Helper()
	var want []string
	for i := range n {
		body := fmt.Sprintf("message-%d", i)
		p.b.send(t, p.src, body, mod...)
		want = append(want, body)
	}
	for range 2 * n {
		p.b.receive(t, p.src, withMax(1))
	}
	require.Equal(t, itoa(n), queueAttrs(t, p.b, p.dlq, "ApproximateNumberOfMessages")["ApproximateNumberOfMessages"])
	return want
}

func itoa(n int) string { return fmt.Sprint(n) }

func (p pipe) start(t *testing.T, dest string, rate int32) string {
	t.Helper()
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(p.dlqARN)}
	if dest != "" {
		in.DestinationArn = aws.String(dest)
	}
	if rate > 0 {
		in.MaxNumberOfMessagesPerSecond = aws.Int32(rate)
	}
	out, err := p.b.c.StartMessageMoveTask(p.b.ctx, in)
	require.NoError(t, err)
	return *out.TaskHandle
}

func (p pipe) list(t *testing.T) types.ListMessageMoveTasksResultEntry {
	t.Helper()
	out, err := p.b.c.ListMessageMoveTasks(p.b.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(p.dlqARN)})
	require.NoError(t, err)
	require.Len(t, out.Results, 1)
	return out.Results[0]
}

// drain receives everything from url; the messages stay in flight for a minute.
func drain(t *testing.T, b bundle, url string) []types.Message {
	t.Helper()
	var all []types.Message
	for {
		got := b.receive(t, url, withAllAttributes, withVisibility(60))
		if len(got) == 0 {
			return all
		}
		all = append(all, got...)
	}
}

func sortedBodies(ms []types.Message) []string {
	out := bodies(ms)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// test_basic_move_task_workflow and test_move_task_workflow_with_default_destination
// (recorded): the messages move, the task completes with both counts 2, its entry
// names the destination only when one was given and carries no handle once done,
// and the DLQ is empty. The moved messages are new messages: new MessageId, receive
// count starting again (AWS Developer Guide, DLQ redrive).
func TestMoveTaskWorkflow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		defaultDest bool
		suffix      string
	}{{"to a destination", false, ""}, {"to the original source", true, ""}, {"FIFO to a destination", false, ".fifo"}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				p := newPipe(t, b, tt.suffix)
				var mod []func(*sqs.SendMessageInput)
				if tt.suffix == ".fifo" {
					mod = append(mod, withGroup("g"))
				}
				want := p.deadLetter(t, 2, mod...)
				dlqCopies := b.srv.Messages(p.dlq)
				dest, destURL := p.destARN, p.destURL
				if tt.defaultDest {
					dest, destURL = "", p.src
				}
				handle := p.start(t, dest, 0)
				raw, err := base64.StdEncoding.DecodeString(handle)
				require.NoError(t, err)
				var h struct{ TaskID, SourceArn string }
				require.NoError(t, json.Unmarshal(raw, &h), "the handle is base64 JSON")
				require.Equal(t, p.dlqARN, h.SourceArn)
				require.Len(t, h.TaskID, 36)

				time.Sleep(time.Second)
				e := p.list(t)
				require.Equal(t, "COMPLETED", *e.Status)
				require.EqualValues(t, 2, e.ApproximateNumberOfMessagesMoved)
				require.EqualValues(t, 2, *e.ApproximateNumberOfMessagesToMove)
				require.Equal(t, p.dlqARN, *e.SourceArn)
				require.Nil(t, e.TaskHandle)
				require.Nil(t, e.MaxNumberOfMessagesPerSecond)
				require.Nil(t, e.FailureReason)
				require.NotZero(t, e.StartedTimestamp)
				if tt.defaultDest {
					require.Nil(t, e.DestinationArn)
				} else {
					require.Equal(t, p.destARN, *e.DestinationArn)
				}

				moved := drain(t, b, destURL)
				require.Equal(t, want, sortedBodies(moved))
				for i, m := range moved {
					require.Equal(t, "1", m.Attributes["ApproximateReceiveCount"], "a new message: its first receive")
					require.NotEqual(t, dlqCopies[i].ID, *m.MessageId, "a new MessageId")
					require.Empty(t, m.Attributes["DeadLetterQueueSourceArn"])
					st, ok := b.srv.Message(destURL, *m.MessageId)
					require.True(t, ok)
					require.Equal(t, dlqCopies[i].ID, st.RedriveOf)
					if tt.suffix == ".fifo" {
						require.Equal(t, "g", m.Attributes["MessageGroupId"])
					}
				}
				require.Empty(t, b.receive(t, p.dlq, withWait(1)), "nothing left in the DLQ")
				for _, st := range b.srv.Messages(p.dlq) {
					require.True(t, st.Redriven)
					require.Equal(t, destURL, st.RedrivenTo)
				}
			})
		})
	}
}

// test_move_task_workflow_with_multiple_sources_as_default_destination (recorded):
// without a destination each message returns to the queue it came from.
func TestMoveTaskToSeveralSources(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		p := newPipe(t, b, "")
		q2 := b.queue(t, "src2", map[string]string{"VisibilityTimeout": "0", "RedrivePolicy": `{"deadLetterTargetArn":"` + p.dlqARN + `","maxReceiveCount":1}`})
		for _, m := range []struct{ q, body string }{{p.src, "message-1-1"}, {p.src, "message-1-2"}, {q2, "message-2-1"}, {q2, "message-2-2"}} {
			b.send(t, m.q, m.body)
		}
		for range 4 {
			b.receive(t, p.src, withMax(1))
			b.receive(t, q2, withMax(1))
		}
		p.start(t, "", 0)
		time.Sleep(time.Second)
		require.EqualValues(t, 4, p.list(t).ApproximateNumberOfMessagesMoved)
		require.Equal(t, []string{"message-1-1", "message-1-2"}, sortedBodies(drain(t, b, p.src)))
		require.Equal(t, []string{"message-2-1", "message-2-2"}, sortedBodies(drain(t, b, q2)))
	})
}

// test_move_task_with_throughput_limit (recorded): at one message per second four
// messages take at least three seconds; here exactly, the first moving at once.
func TestMoveTaskRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		p := newPipe(t, b, "")
		p.deadLetter(t, 4)
		start := time.Now()
		p.start(t, p.destARN, 1)
		var arrivals []time.Duration
		for len(arrivals) < 4 {
			got := b.receive(t, p.destURL, withWait(20), withMax(10))
			for range got {
				arrivals = append(arrivals, time.Since(start))
			}
		}
		require.Equal(t, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, arrivals,
			"a long poll on the destination wakes when the task moves a message")
		e := p.list(t)
		require.Equal(t, "COMPLETED", *e.Status)
		require.EqualValues(t, 1, *e.MaxNumberOfMessagesPerSecond)
	})
}

// test_move_task_cancel (recorded): while running the entry has the handle; the
// cancel answers the number moved so far; the task ends CANCELLED and the rest stays
// in the DLQ. CANCELLING lasts until the task's next step (unconfirmed.go).
func TestMoveTaskCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		p := newPipe(t, b, "")
		p.deadLetter(t, 10)
		handle := p.start(t, p.destARN, 1)
		time.Sleep(1500 * time.Millisecond)
		e := p.list(t)
		require.Equal(t, "RUNNING", *e.Status)
		require.Equal(t, handle, *e.TaskHandle)
		require.EqualValues(t, 2, e.ApproximateNumberOfMessagesMoved)
		require.EqualValues(t, 10, *e.ApproximateNumberOfMessagesToMove)

		out, err := b.c.CancelMessageMoveTask(b.ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: &handle})
		require.NoError(t, err)
		require.EqualValues(t, 2, out.ApproximateNumberOfMessagesMoved)
		require.Equal(t, "CANCELLING", *p.list(t).Status)
		_, err = b.c.CancelMessageMoveTask(b.ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: &handle})
		requireAPIError(t, err, "InvalidParameterValue", "Only a task with status RUNNING can be cancelled; this task is CANCELLING.")

		time.Sleep(time.Second)
		e = p.list(t)
		require.Equal(t, "CANCELLED", *e.Status)
		require.Nil(t, e.TaskHandle)
		require.EqualValues(t, 2, e.ApproximateNumberOfMessagesMoved)
		require.Len(t, drain(t, b, p.dlq), 8)

		// The source is free for a new task once this one ended.
		p.start(t, p.destARN, 0)
	})
}

// test_move_task_delete_destination_queue_while_running (recorded): the task fails
// with FailureReason AWS.SimpleQueueService.NonExistentQueue and the messages not
// moved stay in the DLQ.
func TestMoveTaskDestinationDeleted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		p := newPipe(t, b, "")
		p.deadLetter(t, 10)
		p.start(t, p.destARN, 1)
		time.Sleep(2500 * time.Millisecond)
		_, err := b.c.DeleteQueue(b.ctx, &sqs.DeleteQueueInput{QueueUrl: &p.destURL})
		require.NoError(t, err)
		time.Sleep(time.Second)
		e := p.list(t)
		require.Equal(t, "FAILED", *e.Status)
		require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", *e.FailureReason)
		require.EqualValues(t, 3, e.ApproximateNumberOfMessagesMoved)
		require.Len(t, drain(t, b, p.dlq), 7)
	})
}

// A message sent to the DLQ directly has no DeadLetterQueueSourceArn: a task
// without a destination fails on it and leaves it (UNCONFIRMED, unconfirmed.go).
func TestMoveTaskMessageWithoutSource(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		p := newPipe(t, b, "")
		p.deadLetter(t, 1)
		b.send(t, p.dlq, "sent directly")
		p.start(t, "", 0)
		time.Sleep(time.Second)
		e := p.list(t)
		require.Equal(t, "FAILED", *e.Status)
		require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", *e.FailureReason)
		require.EqualValues(t, 1, e.ApproximateNumberOfMessagesMoved)
		require.Equal(t, []string{"sent directly"}, bodies(drain(t, b, p.dlq)))
	})
}

// Messages in flight in the DLQ are passed over; when nothing receivable is left the
// task completes (UNCONFIRMED, unconfirmed.go). Messages arriving after the start
// stay.
func TestMoveTaskSkipsInFlightAndLateMessages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		p := newPipe(t, b, "")
		p.deadLetter(t, 3)
		held := b.receive(t, p.dlq, withMax(1))
		require.Len(t, held, 1)
		p.start(t, p.destARN, 1)
		b.send(t, p.dlq, "late")
		time.Sleep(5 * time.Second)
		e := p.list(t)
		require.Equal(t, "COMPLETED", *e.Status)
		require.EqualValues(t, 2, e.ApproximateNumberOfMessagesMoved)
		require.EqualValues(t, 3, *e.ApproximateNumberOfMessagesToMove)
		require.Len(t, drain(t, b, p.destURL), 2)
	})
}

// Every error the move-task actions answer. Recorded ones name their test.
func TestMoveTaskErrors(t *testing.T) {
	t.Parallel()
	handleFor := func(id, arn string) string {
		return base64.StdEncoding.EncodeToString([]byte(`{"taskId":"` + id + `","sourceArn":"` + arn + `"}`))
	}
	tests := []struct {
		name     string
		call     func(p pipe) error
		wantType any // a pointer to the typed SDK error, or nil for GenericAPIError
		wantCode string
		wantMsg  string
	}{
		{"cancel: handle not base64 JSON (test_cancel_with_invalid_task_handle)", func(p pipe) error {
			_, err := p.b.c.CancelMessageMoveTask(p.b.ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String("foobared")})
			return err
		}, nil, "InvalidParameterValue", "Value for parameter TaskHandle is invalid."},
		{"cancel: source does not exist (test_cancel_with_invalid_source_arn_in_task_handle)", func(p pipe) error {
			h := handleFor("10f57157-fc38-4da9-a113-4de7e12d05dd", "arn:aws:sqs:us-east-1:878966065785:test-queue-doesnt-exist-123456")
			_, err := p.b.c.CancelMessageMoveTask(p.b.ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: &h})
			return err
		}, new(*types.ResourceNotFoundException), "ResourceNotFoundException", "The resource that you specified for the SourceArn parameter doesn't exist."},
		{"cancel: no such task (test_cancel_with_invalid_task_id_in_task_handle)", func(p pipe) error {
			h := handleFor("10f57157-fc38-4da9-a113-4de7e12d05aa", p.srcARN)
			_, err := p.b.c.CancelMessageMoveTask(p.b.ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: &h})
			return err
		}, new(*types.ResourceNotFoundException), "ResourceNotFoundException", "Task does not exist."},
		{"start: source is no DLQ (test_source_needs_redrive_policy)", func(p pipe) error {
			_, err := p.b.c.StartMessageMoveTask(p.b.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: &p.destARN, DestinationArn: &p.srcARN})
			return err
		}, nil, "InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue."},
		{"start: destination does not exist (test_destination_needs_to_exist)", func(p pipe) error {
			_, err := p.b.c.StartMessageMoveTask(p.b.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: &p.dlqARN, DestinationArn: aws.String(p.destARN + "doesntexist")})
			return err
		}, new(*types.ResourceNotFoundException), "ResourceNotFoundException", "The resource that you specified for the DestinationArn parameter doesn't exist."},
		{"start: a task is running (test_start_multiple_move_tasks)", func(p pipe) error {
			in := &sqs.StartMessageMoveTaskInput{SourceArn: &p.dlqARN, DestinationArn: &p.destARN, MaxNumberOfMessagesPerSecond: aws.Int32(1)}
			if _, err := p.b.c.StartMessageMoveTask(p.b.ctx, in); err != nil {
				return fmt.Errorf("first start: %w", err)
			}
			_, err := p.b.c.StartMessageMoveTask(p.b.ctx, in)
			return err
		}, nil, "InvalidParameterValue", "There is already a task running. Only one active task is allowed for a source queue arn at a given time."},
		{"start: source does not exist", func(p pipe) error {
			_, err := p.b.c.StartMessageMoveTask(p.b.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(p.dlqARN + "x")})
			return err
		}, new(*types.ResourceNotFoundException), "ResourceNotFoundException", "The resource that you specified for the SourceArn parameter doesn't exist."},
		{"start: rate 0", func(p pipe) error {
			_, err := p.b.c.StartMessageMoveTask(p.b.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: &p.dlqARN, MaxNumberOfMessagesPerSecond: aws.Int32(0)})
			return err
		}, nil, "InvalidParameterValue", "Value 0 for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500."},
		{"start: rate 501", func(p pipe) error {
			_, err := p.b.c.StartMessageMoveTask(p.b.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: &p.dlqARN, MaxNumberOfMessagesPerSecond: aws.Int32(501)})
			return err
		}, nil, "InvalidParameterValue", "Value 501 for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500."},
		{"start: destination of the other type", func(p pipe) error {
			fifo := p.b.queue(t, "other.fifo", map[string]string{"FifoQueue": "true"})
			_, err := p.b.c.StartMessageMoveTask(p.b.ctx, &sqs.StartMessageMoveTaskInput{SourceArn: &p.dlqARN, DestinationArn: aws.String(queueArn(t, p.b, fifo))})
			return err
		}, nil, "InvalidParameterValue", "The source queue and the destination queue must be of the same queue type."},
		{"list: source does not exist", func(p pipe) error {
			_, err := p.b.c.ListMessageMoveTasks(p.b.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:123456789012:nope")})
			return err
		}, new(*types.ResourceNotFoundException), "ResourceNotFoundException", "The resource that you specified for the SourceArn parameter doesn't exist."},
		{"list: MaxResults 11", func(p pipe) error {
			_, err := p.b.c.ListMessageMoveTasks(p.b.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: &p.dlqARN, MaxResults: aws.Int32(11)})
			return err
		}, nil, "InvalidParameterValue", "Value 11 for parameter MaxResults is invalid. Reason: Must be between 1 and 10."},
		{"list sources: unknown queue", func(p pipe) error {
			_, err := p.b.c.ListDeadLetterSourceQueues(p.b.ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(p.dlq + "x")})
			return err
		}, new(*types.QueueDoesNotExist), "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				p := newPipe(t, b, "")
				p.deadLetter(t, 2)
				err := tt.call(p)
				requireAPIError(t, err, tt.wantCode, tt.wantMsg)
				if tt.wantType != nil {
					require.True(t, errors.As(err, tt.wantType), "typed error %T: %v", tt.wantType, err)
				}
			})
		})
	}
}

// ListMessageMoveTasks lists the most recent first, one by default, up to MaxResults.
func TestListMessageMoveTasksOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		p := newPipe(t, b, "")
		for i := range 3 {
			p.deadLetter(t, 1)
			p.start(t, p.destARN, 0)
			time.Sleep(time.Second)
			require.Len(t, b.srv.MoveTasks(p.dlq), i+1)
		}
		out, err := b.c.ListMessageMoveTasks(b.ctx, &sqs.ListMessageMoveTasksInput{SourceArn: &p.dlqARN, MaxResults: aws.Int32(10)})
		require.NoError(t, err)
		require.Len(t, out.Results, 3)
		tasks := b.srv.MoveTasks(p.dlq)
		for i, e := range out.Results {
			require.Equal(t, tasks[2-i].Started.UnixMilli(), e.StartedTimestamp, "most recent first")
			require.Equal(t, sqstest.TaskCompleted, *e.Status)
		}
	})
}

// ListDeadLetterSourceQueues lists the queues whose RedrivePolicy names the queue,
// by name, with pagination as ListQueues.
func TestListDeadLetterSourceQueues(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		dlq := b.queue(t, "dlq", nil)
		policy := `{"deadLetterTargetArn":"` + queueArn(t, b, dlq) + `","maxReceiveCount":5}`
		var want []string
		for _, n := range []string{"c", "a", "b"} {
			want = append(want, b.queue(t, n, map[string]string{"RedrivePolicy": policy}))
		}
		b.queue(t, "unrelated", nil)
		out, err := b.c.ListDeadLetterSourceQueues(b.ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: &dlq})
		require.NoError(t, err)
		require.Equal(t, []string{want[1], want[2], want[0]}, out.QueueUrls)
		require.Nil(t, out.NextToken)

		page, err := b.c.ListDeadLetterSourceQueues(b.ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: &dlq, MaxResults: aws.Int32(2)})
		require.NoError(t, err)
		require.Equal(t, []string{want[1], want[2]}, page.QueueUrls)
		require.NotNil(t, page.NextToken)
		rest, err := b.c.ListDeadLetterSourceQueues(b.ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: &dlq, MaxResults: aws.Int32(2), NextToken: page.NextToken})
		require.NoError(t, err)
		require.Equal(t, []string{want[0]}, rest.QueueUrls)

		none, err := b.c.ListDeadLetterSourceQueues(b.ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(want[0])})
		require.NoError(t, err)
		require.Empty(t, none.QueueUrls)
	})
}

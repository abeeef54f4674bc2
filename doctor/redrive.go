package doctor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Move task statuses, as SQS reports them (ListMessageMoveTasks).
const (
	TaskRunning    = "RUNNING"
	TaskCompleted  = "COMPLETED"
	TaskCancelling = "CANCELLING"
	TaskCancelled  = "CANCELLED"
	TaskFailed     = "FAILED"
)

// Defaults and limits of RedriveOptions.
const (
	// MaxRedriveRate is the highest MaxNumberOfMessagesPerSecond SQS accepts
	// (aws-sdk-go-v2 service/sqs api_op_StartMessageMoveTask.go).
	MaxRedriveRate = 500
	// DefaultPollInterval is how often Redrive asks SQS for the task's progress.
	DefaultPollInterval = time.Second
)

// ErrInterrupted is wrapped by the error of a Redrive or Replay whose context
// ended before the work was done (Ctrl-C in sqsdoctor).
var ErrInterrupted = errors.New("doctor: interrupted")

// RedriveOptions tunes Redrive. The zero value moves every message back to its
// source at the rate SQS chooses.
type RedriveOptions struct {
	// Destination is the URL of the queue to move the messages to; "" sends each
	// back to the queue SQS moved it from (its DeadLetterQueueSourceArn). The
	// destination must be of the DLQ's type (FIFO or standard).
	Destination string
	// Rate is MaxNumberOfMessagesPerSecond, 1 to MaxRedriveRate; 0 lets SQS
	// choose (it adapts to the backlog).
	Rate int
	// PollInterval is how often Redrive lists the task; 0 means
	// DefaultPollInterval.
	PollInterval time.Duration
	// Progress, when set, is called with the task after each poll, on Redrive's
	// goroutine.
	Progress func(MoveTask)
}

// MoveTask is an SQS message move task as ListMessageMoveTasks reports it.
type MoveTask struct {
	Handle         string `json:"task_handle"`
	Status         string `json:"status"`
	SourceARN      string `json:"source_arn"`
	DestinationARN string `json:"destination_arn,omitempty"` // "" when moving to the sources
	Rate           int    `json:"max_messages_per_second,omitempty"`
	Moved          int64  `json:"moved"`
	// ToMove is ApproximateNumberOfMessagesToMove, -1 until SQS reports it.
	ToMove        int64     `json:"to_move"`
	FailureReason string    `json:"failure_reason,omitempty"`
	Started       time.Time `json:"started"`
}

// Done reports whether the task has ended (COMPLETED, CANCELLED or FAILED).
func (t MoveTask) Done() bool {
	return t.Status == TaskCompleted || t.Status == TaskCancelled || t.Status == TaskFailed
}

// Redrive starts an SQS message move task from the dead-letter queue at dlqURL
// (StartMessageMoveTask) and follows it until it ends, calling opts.Progress after
// each poll. Moved messages arrive as new messages (new MessageId, receive count
// 0). It returns the task as last seen; the caller judges its Status (COMPLETED,
// CANCELLED or FAILED with FailureReason). SQS runs the task; Redrive only starts
// and watches it, so a Redrive that dies leaves it running.
//
// When ctx ends first, Redrive cancels the task (CancelMessageMoveTask, with a
// context of its own), follows it for up to 30 s more until it is CANCELLED, and
// returns an error wrapping ErrInterrupted. An error is also returned when the
// task cannot be started (e.g. the queue is no DLQ, or a task is already running
// on it) or followed.
//
// Messages sent to the DLQ by a program (as sqsconsumer does after a Permanent
// error) carry no DeadLetterQueueSourceArn: without a Destination SQS cannot send
// them back, and the task fails. Replay sends them to the sqsconsumer.source queue.
func Redrive(ctx context.Context, c DLQClient, dlqURL string, opts RedriveOptions) (MoveTask, error) {
	if opts.Rate < 0 || opts.Rate > MaxRedriveRate {
		return MoveTask{}, fmt.Errorf("doctor: RedriveOptions.Rate %d: must be 1 to %d messages per second, or 0 to let SQS choose", opts.Rate, MaxRedriveRate)
	}
	if opts.PollInterval < 0 {
		return MoveTask{}, fmt.Errorf("doctor: RedriveOptions.PollInterval %s: must not be negative", opts.PollInterval)
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	src, err := queueARN(ctx, c, dlqURL)
	if err != nil {
		return MoveTask{}, fmt.Errorf("doctor: %w", err)
	}
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(src)}
	if opts.Destination != "" {
		dst, err := queueARN(ctx, c, opts.Destination)
		if err != nil {
			return MoveTask{}, fmt.Errorf("doctor: the destination: %w", err)
		}
		in.DestinationArn = aws.String(dst)
	}
	if opts.Rate > 0 {
		in.MaxNumberOfMessagesPerSecond = aws.Int32(int32(opts.Rate))
	}
	out, err := c.StartMessageMoveTask(ctx, in)
	if err != nil {
		return MoveTask{}, fmt.Errorf("doctor: starting a move task on %s: %w", dlqURL, err)
	}
	task := MoveTask{Handle: aws.ToString(out.TaskHandle), Status: TaskRunning, SourceARN: src,
		DestinationARN: aws.ToString(in.DestinationArn), Rate: opts.Rate, ToMove: -1, Started: time.Now()}
	if opts.Progress != nil {
		opts.Progress(task)
	}
	for !task.Done() {
		if err := sleepCtx(ctx, opts.PollInterval); err != nil {
			return cancelTask(ctx, c, task, opts)
		}
		t, err := listTask(ctx, c, task)
		if err != nil {
			if ctx.Err() != nil {
				return cancelTask(ctx, c, task, opts)
			}
			return task, fmt.Errorf("doctor: following move task on %s: %w", dlqURL, err)
		}
		task = t
		if opts.Progress != nil {
			opts.Progress(task)
		}
	}
	return task, nil
}

// cancelTask cancels a task whose Redrive was interrupted and follows it until it
// ends or 30 s passed.
func cancelTask(ctx context.Context, c DLQClient, task MoveTask, opts RedriveOptions) (MoveTask, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	cause := context.Cause(ctx)
	if _, err := c.CancelMessageMoveTask(cctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(task.Handle)}); err != nil {
		// It may have ended meanwhile; the list says.
		if t, lerr := listTask(cctx, c, task); lerr == nil && t.Done() {
			return t, fmt.Errorf("%w (%v) after the move task had ended", ErrInterrupted, cause)
		}
		return task, fmt.Errorf("%w (%v); cancelling the move task failed, it may still be running: %w", ErrInterrupted, cause, err)
	}
	for {
		t, err := listTask(cctx, c, task)
		if err == nil {
			task = t
			if opts.Progress != nil {
				opts.Progress(task)
			}
		}
		if task.Done() {
			return task, fmt.Errorf("%w (%v): the move task is %s", ErrInterrupted, cause, task.Status)
		}
		if sleepCtx(cctx, opts.PollInterval) != nil {
			return task, fmt.Errorf("%w (%v): the move task was cancelled but is still %s", ErrInterrupted, cause, task.Status)
		}
	}
}

// listTask reads the most recent task of task's source, which is task while it
// runs (SQS allows one active task per source).
func listTask(ctx context.Context, c DLQClient, task MoveTask) (MoveTask, error) {
	out, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(task.SourceARN)})
	if err != nil {
		return task, err
	}
	if len(out.Results) == 0 {
		return task, nil // not listed yet
	}
	return moveTaskFrom(out.Results[0], task.Handle), nil
}

func moveTaskFrom(e types.ListMessageMoveTasksResultEntry, handle string) MoveTask {
	t := MoveTask{Handle: handle, Status: aws.ToString(e.Status), SourceARN: aws.ToString(e.SourceArn),
		DestinationARN: aws.ToString(e.DestinationArn), Moved: e.ApproximateNumberOfMessagesMoved, ToMove: -1,
		FailureReason: aws.ToString(e.FailureReason), Started: time.UnixMilli(e.StartedTimestamp)}
	if e.ApproximateNumberOfMessagesToMove != nil {
		t.ToMove = *e.ApproximateNumberOfMessagesToMove
	}
	if e.MaxNumberOfMessagesPerSecond != nil {
		t.Rate = int(*e.MaxNumberOfMessagesPerSecond)
	}
	return t
}

// queueARN reads a queue's ARN.
func queueARN(ctx context.Context, c Client, url string) (string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", fmt.Errorf("reading the attributes of %s: %w", url, err)
	}
	arn := out.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", fmt.Errorf("%s reported no QueueArn", url)
	}
	return arn, nil
}

// sleepCtx waits d on a timer, or until ctx ends (its error then).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package doctor

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// dlqFixture is a source queue "work" with a dead-letter queue "work-dlq" (after
// one receive) and a spare queue "spare".
type dlqFixture struct {
	srv                *sqstest.Server
	c                  *sqs.Client
	src, dlq, spare    string
	srcARN, dlqARN     string
	fifo               bool
	deadLetteredBySQS  []string // bodies
	deadLetteredByCons []string
}

func newDLQFixture(t *testing.T, fifo bool) *dlqFixture {
	t.Helper()
	f := &dlqFixture{srv: sqstest.New(t), fifo: fifo}
	f.c = f.srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	suffix, attrs := "", map[string]string{}
	if fifo {
		suffix, attrs = ".fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	}
	create := func(name string, extra map[string]string) string {
		a := map[string]string{}
		for k, v := range attrs {
			a[k] = v
		}
		for k, v := range extra {
			a[k] = v
		}
		out, err := f.c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name + suffix), Attributes: a})
		require.NoError(t, err)
		return *out.QueueUrl
	}
	f.dlq = create("work-dlq", map[string]string{"MessageRetentionPeriod": "1209600"})
	f.dlqARN = arn("work-dlq" + suffix)
	f.src = create("work", map[string]string{"VisibilityTimeout": "0", "RedrivePolicy": redrive("work-dlq"+suffix, 1)})
	f.srcARN = arn("work" + suffix)
	f.spare = create("spare", nil)
	return f
}

func (f *dlqFixture) send(t *testing.T, url, body string, mod ...func(*sqs.SendMessageInput)) string {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
	if f.fifo {
		in.MessageGroupId = aws.String("g")
	}
	for _, m := range mod {
		m(in)
	}
	out, err := f.c.SendMessage(t.Context(), in)
	require.NoError(t, err)
	return *out.MessageId
}

// bySQS sends bodies to the source and receives each twice, so that SQS's redrive
// policy moves them (with DeadLetterQueueSourceArn).
func (f *dlqFixture) bySQS(t *testing.T, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		f.send(t, f.src, b)
	}
	for range 2 * len(bodies) {
		_, err := f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &f.src})
		require.NoError(t, err)
	}
	f.deadLetteredBySQS = append(f.deadLetteredBySQS, bodies...)
}

// byConsumer runs an sqsconsumer Consumer on the source whose handler fails every
// message in reasons with sqsconsumer.Permanent(reason), so that the library moves
// them to the DLQ with its sqsconsumer.* attributes.
func (f *dlqFixture) byConsumer(t *testing.T, reasons map[string]string, mod ...func(*sqs.SendMessageInput)) {
	t.Helper()
	for body := range reasons {
		f.send(t, f.src, body, mod...)
	}
	h := sqsconsumer.HandlerFunc(func(_ context.Context, m *sqsconsumer.Message) error {
		return sqsconsumer.Permanent(errors.New(reasons[m.Body]))
	})
	c, err := sqsconsumer.New(f.c, f.src, h, sqsconsumer.WithWaitTime(time.Second), sqsconsumer.WithDeadLetterQueue(f.dlq),
		sqsconsumer.WithVisibilityTimeout(30*time.Second))
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	want := len(f.deadLetteredBySQS) + len(reasons)
	for i := 0; counters(t, f.c, f.dlq)[0] < want && i < 60; i++ {
		time.Sleep(time.Second)
	}
	stop()
	require.NoError(t, <-done)
	require.Equal(t, want, counters(t, f.c, f.dlq)[0], "every message reached the DLQ")
	for body := range reasons {
		f.deadLetteredByCons = append(f.deadLetteredByCons, body)
	}
}

// counters is visible, in flight, delayed.
func counters(t *testing.T, c *sqs.Client, url string) [3]int {
	t.Helper()
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"}})
	require.NoError(t, err)
	var n [3]int
	for i, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		n[i] = atoi(out.Attributes[k])
	}
	return n
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}

// present lists the bodies of the messages still in the queue, sorted.
func present(srv *sqstest.Server, url string) []string {
	var out []string
	for _, m := range srv.Messages(url) {
		if !m.Deleted && !m.MovedToDLQ && !m.Redriven && !m.Expired && !m.Purged {
			out = append(out, m.Body)
		}
	}
	sort.Strings(out)
	return out
}

func sorted(s ...string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func TestInspectDLQ(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newDLQFixture(t, false)
		f.bySQS(t, "sqs-1", "sqs-2", "sqs-3")
		time.Sleep(time.Hour)
		f.byConsumer(t, map[string]string{"bad-1": "decoding the order: unexpected EOF\nat line 3", "bad-2": "decoding the order: unexpected EOF\nat line 9"})
		time.Sleep(time.Hour)
		receivesBefore := map[string]int{}
		for _, m := range f.srv.Messages(f.dlq) {
			receivesBefore[m.ID] = len(m.Receives)
		}

		rep, err := InspectDLQ(t.Context(), f.c, f.dlq, InspectOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 5, rep.Visible)
		require.False(t, rep.Empty())
		require.Equal(t, []string{f.src}, rep.Sources)
		require.Equal(t, 5, rep.Peeked)
		require.Equal(t, []Tally{{"", 3}, {"permanent: decoding the order: unexpected EOF", 2}}, rep.Reasons, "the text sqsconsumer wrote, first line")
		require.Equal(t, []Tally{{"work", 5}}, rep.BySource, "sqsconsumer.source names the source too")
		require.Equal(t, 2, rep.WithReason)
		require.Equal(t, 2, rep.NotFromSQS)
		// Ages by SentTimestamp: the SQS-moved messages keep their original send
		// (two hours ago), the library's copies were sent an hour ago.
		require.InDelta(t, (2 * time.Hour).Seconds(), rep.Oldest.Seconds(), 2)
		require.InDelta(t, (2 * time.Hour).Seconds(), rep.Median.Seconds(), 2)
		require.True(t, rep.ExpiryKnown)
		require.Equal(t, 14*24*time.Hour-rep.Oldest, rep.OldestExpiresIn)
		require.Equal(t, PeekCost{Receives: 2, ReceiveCountRaised: 5, HiddenFor: DefaultPeekVisibility, Released: 5}, rep.Cost)

		// What the report says it cost is what it cost: one receive each, and
		// every message visible again.
		require.Equal(t, [3]int{5, 0, 0}, counters(t, f.c, f.dlq))
		for _, m := range f.srv.Messages(f.dlq) {
			require.Equal(t, receivesBefore[m.ID]+1, len(m.Receives), "peeked once: %s", m.Body)
		}

		few, err := InspectDLQ(t.Context(), f.c, f.dlq, InspectOptions{Max: 2, Top: 1})
		require.NoError(t, err)
		require.Equal(t, 2, few.Peeked)
		require.Len(t, few.Reasons, 1)
		none, err := InspectDLQ(t.Context(), f.c, f.dlq, InspectOptions{Max: -1})
		require.NoError(t, err)
		require.Zero(t, none.Peeked)
		require.EqualValues(t, 5, none.Visible)
	})
}

func TestInspectDLQCostsAndErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newDLQFixture(t, false)
		_, err := f.c.SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: &f.dlq,
			Attributes: map[string]string{"RedrivePolicy": redrive("spare", 4)}})
		require.NoError(t, err)
		_, err = InspectDLQ(t.Context(), f.c, f.dlq, InspectOptions{Visibility: 10 * time.Second})
		require.ErrorIs(t, err, ErrUnsafePeek, "the DLQ's own policy counts the peeks")
		rep, err := InspectDLQ(t.Context(), f.c, f.dlq, InspectOptions{Visibility: 10 * time.Second, Force: true})
		require.NoError(t, err)
		require.True(t, rep.Empty())
		require.Equal(t, 4, rep.Cost.DLQMaxReceiveCount, "peeking counts toward the DLQ's own policy")
		require.Equal(t, 10*time.Second, rep.Cost.HiddenFor)

		for _, tt := range []struct {
			name string
			opts InspectOptions
			want string
		}{
			{"sub-second visibility", InspectOptions{Visibility: 1500 * time.Millisecond}, "InspectOptions.Visibility 1.5s: must be whole seconds"},
			{"visibility beyond 12h", InspectOptions{Visibility: 13 * time.Hour}, "InspectOptions.Visibility 13h0m0s"},
			{"negative top", InspectOptions{Top: -1}, "InspectOptions.Top -1"},
		} {
			_, err := InspectDLQ(t.Context(), f.c, f.dlq, tt.opts)
			require.ErrorContains(t, err, tt.want, tt.name)
		}
		_, err = InspectDLQ(t.Context(), f.c, f.srv.BaseURL()+"/123456789012/nope", InspectOptions{})
		require.ErrorContains(t, err, "reading the attributes of")
	})
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	t.Run("to the sources", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			f.bySQS(t, "a", "b", "c")
			var seen []MoveTask
			task, err := Redrive(t.Context(), f.c, f.dlq, RedriveOptions{Progress: func(m MoveTask) { seen = append(seen, m) }})
			require.NoError(t, err)
			require.Equal(t, TaskCompleted, task.Status)
			require.EqualValues(t, 3, task.Moved)
			require.EqualValues(t, 3, task.ToMove)
			require.Empty(t, task.DestinationARN)
			require.Equal(t, f.dlqARN, task.SourceARN)
			require.Equal(t, TaskRunning, seen[0].Status, "the first progress call comes right after the start")
			require.EqualValues(t, -1, seen[0].ToMove)
			require.Equal(t, []string{"a", "b", "c"}, present(f.srv, f.src))
			require.Empty(t, present(f.srv, f.dlq))
			for _, m := range f.srv.Messages(f.src) {
				if m.RedriveOf != "" {
					require.Zero(t, m.ReceiveCount, "a moved message arrives with receive count 0")
				}
			}
		})
	})
	t.Run("to a queue at a rate", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			f.bySQS(t, "a", "b", "c", "d")
			start := time.Now()
			var moved []int64
			task, err := Redrive(t.Context(), f.c, f.dlq, RedriveOptions{Destination: f.spare, Rate: 1,
				Progress: func(m MoveTask) { moved = append(moved, m.Moved) }})
			require.NoError(t, err)
			require.Equal(t, TaskCompleted, task.Status)
			require.Equal(t, 1, task.Rate)
			require.Equal(t, arn("spare"), task.DestinationARN)
			require.Equal(t, []int64{0, 2, 3, 4}, moved, "polled once a second")
			require.Equal(t, 3*time.Second, time.Since(start))
			require.Equal(t, []string{"a", "b", "c", "d"}, present(f.srv, f.spare))
		})
	})
	t.Run("interrupted", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			f.bySQS(t, "1", "2", "3", "4", "5", "6", "7", "8", "9", "10")
			ctx, interrupt := context.WithCancel(t.Context())
			time.AfterFunc(2500*time.Millisecond, interrupt) // Ctrl-C
			task, err := Redrive(ctx, f.c, f.dlq, RedriveOptions{Destination: f.spare, Rate: 1})
			require.ErrorIs(t, err, ErrInterrupted)
			require.ErrorContains(t, err, "the move task is CANCELLED")
			require.Equal(t, TaskCancelled, task.Status)
			require.EqualValues(t, 3, task.Moved)
			require.Len(t, present(f.srv, f.spare), 3)
			require.Len(t, present(f.srv, f.dlq), 7, "the rest stays in the DLQ")
		})
	})
	t.Run("messages the library moved need a destination", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			f.byConsumer(t, map[string]string{"x": "boom"})
			task, err := Redrive(t.Context(), f.c, f.dlq, RedriveOptions{})
			require.NoError(t, err)
			require.Equal(t, TaskFailed, task.Status, "no DeadLetterQueueSourceArn: sqstest fails the task (UNCONFIRMED for AWS)")
			require.NotEmpty(t, task.FailureReason)
			require.Equal(t, []string{"x"}, present(f.srv, f.dlq))
		})
	})
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			for _, tt := range []struct {
				name string
				url  string
				opts RedriveOptions
				want string
			}{
				{"not a DLQ", f.spare, RedriveOptions{}, "Source queue must be configured as a Dead Letter Queue."},
				{"rate too high", f.dlq, RedriveOptions{Rate: 501}, "RedriveOptions.Rate 501"},
				{"negative poll", f.dlq, RedriveOptions{PollInterval: -time.Second}, "RedriveOptions.PollInterval -1s"},
				{"missing destination", f.dlq, RedriveOptions{Destination: f.srv.BaseURL() + "/123456789012/nope"}, "the destination: reading the attributes of"},
			} {
				_, err := Redrive(t.Context(), f.c, tt.url, tt.opts)
				require.ErrorContains(t, err, tt.want, tt.name)
			}
			f.bySQS(t, "a", "b")
			_, err := f.c.StartMessageMoveTask(t.Context(), &sqs.StartMessageMoveTaskInput{SourceArn: &f.dlqARN, MaxNumberOfMessagesPerSecond: aws.Int32(1)})
			require.NoError(t, err)
			_, err = Redrive(t.Context(), f.c, f.dlq, RedriveOptions{})
			require.ErrorContains(t, err, "There is already a task running.")
		})
	})
}

func TestReplay(t *testing.T) {
	t.Parallel()
	t.Run("a filter, to the sources", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			f.bySQS(t, "by-sqs")
			f.byConsumer(t, map[string]string{"slow": "calling billing: timeout after 30s", "bad": "decoding: unexpected EOF"},
				func(in *sqs.SendMessageInput) {
					in.MessageAttributes = map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}
					in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-abc")}}
				})
			filter, err := ParseFilter("reason~TIMEOUT", "attr.tenant=acme")
			require.NoError(t, err)
			var audit []AuditRecord
			res, err := Replay(t.Context(), f.c, f.dlq, ReplayOptions{Filter: filter, Audit: func(r AuditRecord) { audit = append(audit, r) }})
			require.NoError(t, err)
			require.Equal(t, ReplayResult{Examined: 3, Matched: 1, Replayed: 1, Released: 2}, res)
			require.True(t, res.Complete())
			require.Len(t, audit, 1)
			a := audit[0]
			require.Equal(t, AuditReplayed, a.Outcome)
			require.Equal(t, f.src, a.Target)
			require.Equal(t, f.srcARN, a.Source)
			require.Equal(t, "permanent: calling billing: timeout after 30s", a.Reason)
			require.NotEmpty(t, a.NewMessageID)

			require.Equal(t, []string{"bad", "by-sqs"}, present(f.srv, f.dlq), "only the match left the DLQ")
			require.Equal(t, [3]int{2, 0, 0}, counters(t, f.c, f.dlq), "the others are visible again")
			out, err := f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &f.src, MessageAttributeNames: []string{"All"},
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
			require.NoError(t, err)
			require.Len(t, out.Messages, 1)
			m := out.Messages[0]
			require.Equal(t, "slow", *m.Body)
			require.Equal(t, a.NewMessageID, *m.MessageId)
			require.Equal(t, []string{"tenant"}, keysOf(m.MessageAttributes), "sqsconsumer's attributes are dropped, the message's own kept")
			require.Equal(t, "Root=1-abc", m.Attributes["AWSTraceHeader"])
			require.Equal(t, "1", m.Attributes["ApproximateReceiveCount"], "a new message")
		})
	})
	t.Run("dry run", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			f.bySQS(t, "a", "b")
			var audit []AuditRecord
			res, err := Replay(t.Context(), f.c, f.dlq, ReplayOptions{DryRun: true, Audit: func(r AuditRecord) { audit = append(audit, r) }})
			require.NoError(t, err)
			require.Equal(t, ReplayResult{Examined: 2, Matched: 2, WouldReplay: 2, Released: 2}, res)
			require.Len(t, audit, 2)
			require.Equal(t, AuditDryRun, audit[0].Outcome)
			require.Equal(t, f.src, audit[0].Target)
			require.Equal(t, []string{"a", "b"}, present(f.srv, f.dlq))
			require.Empty(t, present(f.srv, f.src))
			require.Equal(t, [3]int{2, 0, 0}, counters(t, f.c, f.dlq))
		})
	})
	t.Run("rate, destination and max", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			f.bySQS(t, "1", "2", "3", "4", "5", "6")
			start := time.Now()
			var at []time.Duration
			res, err := Replay(t.Context(), f.c, f.dlq, ReplayOptions{Destination: f.spare, Rate: 2, Max: 5,
				Audit: func(AuditRecord) { at = append(at, time.Since(start)) }})
			require.NoError(t, err)
			require.Equal(t, 5, res.Replayed)
			require.Equal(t, 1, res.Released)
			require.Equal(t, []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second}, at)
			require.Len(t, present(f.srv, f.spare), 5)
			require.Len(t, present(f.srv, f.dlq), 1)
		})
	})
	t.Run("FIFO keeps group and deduplication id, and a group's order", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, true)
			f.bySQS(t, "g1", "g2", "g3")
			dlqStates := f.srv.Messages(f.dlq)
			f.srv.FailNext("SendMessage", 1, sqstest.FaultAccessDenied) // the second send of the group fails
			var audit []AuditRecord
			res, err := Replay(t.Context(), f.c, f.dlq, ReplayOptions{Audit: func(r AuditRecord) { audit = append(audit, r) }})
			require.NoError(t, err)
			require.Equal(t, 0, res.Replayed)
			require.Equal(t, 1, res.SendFailed)
			require.Equal(t, 2, res.Skipped, "later messages of the group are not sent out of order")
			require.False(t, res.Complete())
			require.Equal(t, []string{AuditSendFailed, AuditSkipped, AuditSkipped}, outcomes(audit))
			require.Equal(t, "an earlier message of its group was not replayed", audit[1].Error)

			res, err = Replay(t.Context(), f.c, f.dlq, ReplayOptions{Audit: func(r AuditRecord) { audit = append(audit, r) }})
			require.NoError(t, err)
			require.Equal(t, 3, res.Replayed)
			var got []string
			for _, m := range f.srv.Messages(f.src) {
				if !m.MovedToDLQ { // the replayed copies, in arrival order
					got = append(got, m.Body+"/"+m.GroupID+"/"+m.DeduplicationID)
				}
			}
			want := make([]string, 3)
			for i, st := range dlqStates {
				want[i] = st.Body + "/g/" + st.ID // SQS gave the DLQ copy its MessageId as deduplication id
			}
			require.Equal(t, want, got, "in group order, with group and deduplication id kept")
		})
	})
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			f := newDLQFixture(t, false)
			for _, tt := range []struct {
				name string
				opts ReplayOptions
				want string
			}{
				{"negative rate", ReplayOptions{Rate: -1}, "ReplayOptions.Rate -1"},
				{"lease too long", ReplayOptions{Lease: 24 * time.Hour}, "ReplayOptions.Lease 24h0m0s"},
				{"negative max", ReplayOptions{Max: -2}, "ReplayOptions.Max -2"},
			} {
				_, err := Replay(t.Context(), f.c, f.dlq, tt.opts)
				require.ErrorContains(t, err, tt.want, tt.name)
			}
			f.send(t, f.dlq, "orphan")
			var audit []AuditRecord
			res, err := Replay(t.Context(), f.c, f.dlq, ReplayOptions{Audit: func(r AuditRecord) { audit = append(audit, r) }})
			require.NoError(t, err)
			require.Equal(t, 1, res.Skipped)
			require.False(t, res.Complete())
			require.Contains(t, audit[0].Error, "names no source queue")
			require.Equal(t, []string{"orphan"}, present(f.srv, f.dlq))
		})
	})
}

func outcomes(rs []AuditRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
}

func keysOf(m map[string]types.MessageAttributeValue) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// crashClient passes calls to the server until crashAt says the process died at a
// call (a send still reaches the server, its answer is lost; a delete does not).
// Then it cancels the run's context, as a dying process stops, and fails every
// call, since nothing would reach SQS any more.
type crashClient struct {
	DLQClient
	kill    context.CancelFunc
	mu      sync.Mutex // guards dead
	dead    bool
	crashAt func(action string, n int) bool
	n       atomic.Int32
}

var errKilled = errors.New("process killed")

func (c *crashClient) check(action string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errKilled
	}
	if c.crashAt(action, int(c.n.Add(1))) {
		c.dead = true
		c.kill()
	}
	return nil
}

func (c *crashClient) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if err := c.check("SendMessage"); err != nil {
		return nil, err
	}
	out, err := c.DLQClient.SendMessage(ctx, in, o...)
	if c.isDead() {
		return nil, errKilled // the send reached SQS; its answer never reached us
	}
	return out, err
}

func (c *crashClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	if err := c.check("DeleteMessage"); err != nil || c.isDead() {
		return nil, errKilled // dead before the delete left
	}
	return c.DLQClient.DeleteMessage(ctx, in, o...)
}

func (c *crashClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if c.isDead() {
		return nil, errKilled
	}
	return c.DLQClient.ChangeMessageVisibilityBatch(ctx, in, o...)
}

func (c *crashClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if c.isDead() {
		return nil, errKilled
	}
	return c.DLQClient.ReceiveMessage(ctx, in, o...)
}

func (c *crashClient) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// A crash mid-replay loses nothing: a message is at worst both sent and still in
// the DLQ, and the audit reports it.
func TestReplayCrash(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		crashAt func(action string, n int) bool
		outcome string
	}{
		// The process dies while the third send is on the wire: SQS took it, the
		// answer was lost, the delete never ran.
		{"during a send", func(action string, n int) bool { return action == "SendMessage" && n == 5 }, AuditSendFailed},
		// The process dies between the second send and its delete.
		{"between send and delete", func(action string, n int) bool { return action == "DeleteMessage" && n == 4 }, AuditNotDeleted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newDLQFixture(t, false)
				f.bySQS(t, "1", "2", "3", "4")
				ctx, kill := context.WithCancel(t.Context())
				defer kill()
				cc := &crashClient{DLQClient: f.c, kill: kill, crashAt: tt.crashAt}
				var audit []AuditRecord
				res, err := Replay(ctx, cc, f.dlq, ReplayOptions{Lease: time.Minute, Audit: func(r AuditRecord) { audit = append(audit, r) }})
				require.ErrorIs(t, err, ErrInterrupted)
				require.False(t, res.Complete())
				last := audit[len(audit)-1]
				require.Equal(t, tt.outcome, last.Outcome, "the audit reports the message caught by the crash")
				require.ErrorContains(t, errors.New(last.Error), "process killed")

				// After the lease, everything is somewhere; the message caught by
				// the crash is in both queues.
				time.Sleep(time.Minute)
				inDLQ, inSrc := present(f.srv, f.dlq), present(f.srv, f.src)
				require.Equal(t, len(inDLQ), counters(t, f.c, f.dlq)[0], "visible again")
				require.Equal(t, sorted("1", "2", "3", "4"), sortedUnion(inDLQ, inSrc), "nothing lost")
				require.Equal(t, []string{last.MessageID}, intersectIDs(f, inDLQ, inSrc, last), "at worst one message is in both")
				require.Equal(t, res.Replayed, len(inSrc)-1)
			})
		})
	}
}

func sortedUnion(a, b []string) []string {
	set := map[string]bool{}
	for _, s := range append(append([]string(nil), a...), b...) {
		set[s] = true
	}
	var out []string
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// intersectIDs returns the DLQ MessageIds of the bodies present in both queues.
func intersectIDs(f *dlqFixture, inDLQ, inSrc []string, _ AuditRecord) []string {
	both := map[string]bool{}
	for _, b := range inDLQ {
		for _, s := range inSrc {
			if b == s {
				both[b] = true
			}
		}
	}
	var ids []string
	for _, m := range f.srv.Messages(f.dlq) {
		if both[m.Body] && !m.Deleted {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

func TestParseFilter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	d := DeadLetter{Reason: "calling billing: Timeout", Source: "arn:aws:sqs:eu-west-1:1:orders", SourceFromSQS: true,
		Body: `{"id":7}`, SentAt: now.Add(-3 * time.Hour),
		Attributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}}
	tests := []struct {
		exprs   []string
		match   bool
		wantErr string
	}{
		{nil, true, ""},
		{[]string{"reason~timeout"}, true, ""},
		{[]string{"reason=calling billing: Timeout"}, true, ""},
		{[]string{"reason=timeout"}, false, ""},
		{[]string{"source=orders"}, true, ""},
		{[]string{"source=arn:aws:sqs:eu-west-1:1:orders"}, true, ""},
		{[]string{"source=payments"}, false, ""},
		{[]string{"source~eu-west-1"}, true, ""},
		{[]string{"age>2h"}, true, ""},
		{[]string{"age>1d"}, false, ""},
		{[]string{"age<4h", "age>90m"}, true, ""},
		{[]string{"body~\"id\":7"}, true, ""},
		{[]string{"attr.tenant=acme"}, true, ""},
		{[]string{"attr.tenant~AC"}, true, ""},
		{[]string{"attr.region=eu"}, false, ""},
		{[]string{"reason~timeout", "attr.tenant=other"}, false, ""},
		{[]string{"agee>1h"}, false, `unknown key "agee"`},
		{[]string{"age=1h"}, false, "age takes > or <"},
		{[]string{"reason>x"}, false, "reason takes = or ~"},
		{[]string{"age>soon"}, false, `age "soon" is not a duration`},
		{[]string{"timeout"}, false, "want KEY OP VALUE"},
		{[]string{"attr.=x"}, false, "attr. needs an attribute name"},
	}
	for _, tt := range tests {
		f, err := ParseFilter(tt.exprs...)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, "%v", tt.exprs)
			continue
		}
		require.NoError(t, err, "%v", tt.exprs)
		require.Equal(t, tt.match, f.Match(d, now), "%v", tt.exprs)
	}
	f, _ := ParseFilter("reason~x", "age>1h")
	require.Equal(t, "reason~x and age>1h", f.String())
	require.Equal(t, "all messages", Filter{}.String())
}

func TestNextSend(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		last, now time.Time
		rate      float64
		want      time.Time
	}{
		{"first send at once", time.Time{}, t0, 10, t0},
		{"too soon waits", t0, t0.Add(20 * time.Millisecond), 10, t0.Add(100 * time.Millisecond)},
		{"late enough goes now", t0, t0.Add(time.Second), 10, t0.Add(time.Second)},
		{"fractional rate", t0, t0, 0.5, t0.Add(2 * time.Second)},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, nextSend(tt.last, tt.rate, tt.now), tt.name)
	}
}

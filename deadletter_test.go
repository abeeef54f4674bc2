package sqsconsumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// dlqBundle is a source queue whose RedrivePolicy names dlq.
type dlqBundle struct {
	bundle
	dlq, dlqARN, srcARN string
}

// setupDLQ makes a dead-letter queue and a source queue redriving to it
// after maxReceive receives (FIFO when fifo), plus extra source attributes.
func setupDLQ(t *testing.T, fifo bool, maxReceive int, extra map[string]string) dlqBundle {
	t.Helper()
	srv := sqstest.New(t)
	suffix := ""
	attrs := map[string]string{}
	if fifo {
		suffix = ".fifo"
		attrs["FifoQueue"] = "true"
		attrs["ContentBasedDeduplication"] = "true"
	}
	dlq, err := srv.CreateQueue("q-dlq"+suffix, attrs)
	require.NoError(t, err)
	client := srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	arn := queueARN(t, client, dlq)
	attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn, maxReceive)
	for k, v := range extra {
		attrs[k] = v
	}
	url, err := srv.CreateQueue("q"+suffix, attrs)
	require.NoError(t, err)
	return dlqBundle{bundle: bundle{srv: srv, client: client, url: url}, dlq: dlq, dlqARN: arn, srcARN: queueARN(t, client, url)}
}

func queueARN(t *testing.T, c *sqs.Client, url string) string {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	return out.Attributes["QueueArn"]
}

// receiveDLQ receives every message of the dead-letter queue with its
// attributes.
func (b dlqBundle) receiveDLQ(t *testing.T) []types.Message {
	t.Helper()
	var all []types.Message
	for {
		out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(b.dlq), MaxNumberOfMessages: 10, VisibilityTimeout: 600,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			return all
		}
		all = append(all, out.Messages...)
	}
}

// callLog wraps a Client and records the order of the calls that settle
// messages: "send <body>" and "delete".
type callLog struct {
	Client
	mu    sync.Mutex
	calls []string
}

func (c *callLog) add(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

func (c *callLog) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

func (c *callLog) SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := c.Client.(messageSender).SendMessage(ctx, in, optFns...)
	if err == nil {
		c.add("send " + aws.ToString(in.MessageBody))
	}
	return out, err
}

func (c *callLog) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out, err := c.Client.DeleteMessageBatch(ctx, in, optFns...)
	if err == nil {
		for range out.Successful {
			c.add("delete")
		}
	}
	return out, err
}

func TestPermanentErrorMovesToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		id, err := b.srv.Send(b.url, "not json", sqstest.WithStringAttribute("tenant", "acme"), sqstest.WithStringAttribute("kind", "order"))
		require.NoError(t, err)
		var events []EventKind
		var doneErr error
		var mu sync.Mutex
		client := &callLog{Client: b.client}
		c, err := New(client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			return Permanent(errors.New("decoding the body: invalid character 'o'"))
		}), WithVisibilityTimeout(30*time.Second), WithObserver(ObserverFunc(func(e Event) {
			mu.Lock()
			events = append(events, e.Kind)
			if e.Kind == EventDone {
				doneErr = e.Err
			}
			mu.Unlock()
		})))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())

		st := b.state(t, id)
		require.True(t, st.Deleted, "the original is deleted")
		require.Equal(t, 1, st.ReceiveCount, "moved at once, not after maxReceiveCount receives")
		require.False(t, st.MovedToDLQ, "moved by the Consumer, not by SQS's redrive")
		require.Equal(t, []string{"send not json", "delete"}, client.list(), "the delete only after the send succeeded")

		got := b.receiveDLQ(t)
		require.Len(t, got, 1)
		m := got[0]
		require.Equal(t, "not json", aws.ToString(m.Body))
		attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
		require.Equal(t, "acme", attr("tenant"), "the original attributes are kept")
		require.Equal(t, "order", attr("kind"))
		require.Equal(t, "permanent: decoding the body: invalid character 'o'", attr("sqsconsumer.error"))
		require.Equal(t, "1", attr("sqsconsumer.receive_count"))
		require.Equal(t, "Number", aws.ToString(m.MessageAttributes["sqsconsumer.receive_count"].DataType))
		require.Equal(t, b.srcARN, attr("sqsconsumer.source"))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []EventKind{EventReceived, EventStarted, EventFailed, EventDeadLettered, EventDeleted, EventDone}, events)
		require.True(t, IsPermanent(doneErr), "EventDone carries the handler's error")
	})
}

func TestDeadLetterSendFailureLeavesTheMessage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		id, err := b.srv.Send(b.url, "poison")
		require.NoError(t, err)
		b.srv.FailNext("SendMessage", 1, sqstest.FaultInternalError)
		client := &callLog{Client: b.client}
		var logs bytes.Buffer
		var logMu sync.Mutex // the Consumer logs from its goroutines
		c, err := New(client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			return Permanent(errors.New("schema violation"))
		}), WithVisibilityTimeout(30*time.Second), WithBackoff(func(int) time.Duration { return 10 * time.Second }),
			WithLogger(slog.New(slog.NewTextHandler(&lockedWriter{mu: &logMu, w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(5 * time.Second)
		st := b.state(t, id)
		require.False(t, st.Deleted, "a failed send never deletes")
		require.True(t, st.InFlight, "released for a retry after its backoff")
		require.Equal(t, 10*time.Second, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout)
		require.Empty(t, client.list())
		logMu.Lock()
		require.Contains(t, logs.String(), "could not move a permanently failing message")
		logMu.Unlock()

		time.Sleep(time.Minute) // the retry moves it
		require.NoError(t, stop())
		st = b.state(t, id)
		require.True(t, st.Deleted)
		require.Equal(t, 2, st.ReceiveCount)
		require.Equal(t, []string{"send poison", "delete"}, client.list())
		got := b.receiveDLQ(t)
		require.Len(t, got, 1)
		require.Equal(t, "2", aws.ToString(got[0].MessageAttributes["sqsconsumer.receive_count"].StringValue))
	})
}

// A move to the dead-letter queue whose SendMessage hangs through the
// shutdown is given up when the shutdown timeout runs out, so that the
// message's release (its backoff, as for a failed move) is still sent
// before the hard stop: it used to be cut with the move, leaving the
// message hidden for the rest of its visibility after Run returned.
func TestDeadLetterMoveHungAtShutdownStillReleases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		id, err := b.srv.Send(b.url, "poison")
		require.NoError(t, err)
		b.srv.DelayNext("SendMessage", 1, time.Hour)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			return Permanent(errors.New("schema violation"))
		}), WithVisibilityTimeout(40*time.Second), WithBackoff(func(int) time.Duration { return 3 * time.Second }),
			WithShutdownTimeout(2*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Second) // the move hangs
		begun := time.Now()
		require.NoError(t, stop())
		require.LessOrEqual(t, time.Since(begun), 2*time.Second+shutdownCallTimeout, "Run outlived its hard stop")
		st := b.state(t, id)
		require.False(t, st.Deleted)
		require.NotEmpty(t, st.VisibilityChanges, "the message was never released: hidden for the rest of its visibility")
		last := st.VisibilityChanges[len(st.VisibilityChanges)-1]
		require.Empty(t, last.Err)
		require.Equal(t, 3*time.Second, last.Timeout, "released for its backoff")
	})
}

// The dead-letter queue's check at Run's start is optional: one that
// hangs is given up after a call timeout, logged, and Run goes on, as
// after a check that fails; it used to hold Run's start until Run's
// context ended.
func TestDeadLetterCheckThatHangsIsGivenUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		id, err := b.srv.Send(b.url, "m")
		require.NoError(t, err)
		b.srv.DelayNext("GetQueueAttributes", 1, 0)         // the queue's own
		b.srv.DelayNext("GetQueueAttributes", 1, time.Hour) // the dead-letter queue's check
		c, err := New(b.client, b.url, HandlerFunc(func(context.Context, *Message) error { return nil }),
			WithVisibilityTimeout(30*time.Second), WithDeadLetterQueue(b.dlq))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(receiveCallTimeout + time.Second)
		require.Equal(t, "running", c.Health().Status)
		require.True(t, b.state(t, id).Deleted, "the Consumer never ran")
		require.NoError(t, stop())
	})
}

func TestDeadLetterFIFOKeepsGroupOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, true, 5, nil)
		ids := map[string]string{}
		for _, body := range []string{"g0", "g1", "g2", "g3"} {
			id, err := b.srv.Send(b.url, body, sqstest.WithGroupID("g"))
			require.NoError(t, err)
			ids[body] = id
		}
		b.srv.FailNext("SendMessage", 1, sqstest.FaultServiceUnavailable) // g1's first move fails
		var mu sync.Mutex
		var order []string
		started := map[string]time.Time{}
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			mu.Lock()
			order = append(order, m.Body)
			if _, ok := started[m.Body]; !ok {
				started[m.Body] = time.Now()
			}
			mu.Unlock()
			time.Sleep(time.Second)
			if m.Body == "g1" || m.Body == "g2" {
				return Permanent(fmt.Errorf("%s is poison", m.Body))
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second), WithBackoff(func(int) time.Duration { return 5 * time.Second }))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())

		mu.Lock()
		require.Equal(t, []string{"g0", "g1", "g1", "g2", "g3"}, order, "g2 waited for g1's failed move and its retry")
		mu.Unlock()
		for body, id := range ids {
			require.True(t, b.state(t, id).Deleted, body)
		}
		require.False(t, started["g2"].Before(b.state(t, ids["g1"]).DeletedAt), "g2 started after g1 left the group")
		require.False(t, started["g3"].Before(b.state(t, ids["g2"]).DeletedAt))

		copies := b.srv.Messages(b.dlq)
		require.Len(t, copies, 2)
		require.Equal(t, "g1", copies[0].Body, "the dead-letter queue gets the group in order")
		require.Equal(t, "g2", copies[1].Body)
		for _, cp := range copies {
			require.Equal(t, "g", cp.GroupID)
			require.Equal(t, ids[cp.Body], cp.DeduplicationID, "deduplicated by the original's MessageId")
		}
	})
}

func TestDeadLetterMoveIsDeduplicatedOnFIFO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// A crash between send and delete: the message comes back and is
		// moved again; the FIFO dead-letter queue drops the second copy.
		b := setupDLQ(t, true, 5, nil)
		id, err := b.srv.Send(b.url, "p", sqstest.WithGroupID("g"))
		require.NoError(t, err)
		b.srv.FailNext("DeleteMessageBatch", 1, sqstest.FaultAccessDenied)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			return Permanent(errors.New("poison"))
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())
		st := b.state(t, id)
		require.True(t, st.Deleted)
		require.Equal(t, 2, st.ReceiveCount, "the delete failed once: delivered again and moved again")
		require.Equal(t, 2, b.srv.CallCount("SendMessage"))
		require.Len(t, b.receiveDLQ(t), 1, "one copy: the second send was a duplicate within 5 minutes")
	})
}

func TestDeadLetterAttributeLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		own  int
		want []string // of ours, present
	}{
		{own: 7, want: []string{"sqsconsumer.error", "sqsconsumer.receive_count", "sqsconsumer.source"}},
		{own: 8, want: []string{"sqsconsumer.error", "sqsconsumer.receive_count"}},
		{own: 9, want: []string{"sqsconsumer.error"}},
		{own: 10, want: nil},
	} {
		t.Run(fmt.Sprint(tt.own), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setupDLQ(t, false, 5, nil)
				var opts []sqstest.SendOption
				for i := range tt.own {
					opts = append(opts, sqstest.WithStringAttribute(fmt.Sprintf("a%d", i), "v"))
				}
				_, err := b.srv.Send(b.url, "x", opts...)
				require.NoError(t, err)
				var logs bytes.Buffer
				c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
					return Permanent(errors.New("bad"))
				}), WithVisibilityTimeout(30*time.Second), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(10 * time.Second)
				require.NoError(t, stop())
				got := b.receiveDLQ(t)
				require.Len(t, got, 1)
				require.Len(t, got[0].MessageAttributes, min(tt.own+3, 10))
				for i := range tt.own {
					require.Contains(t, got[0].MessageAttributes, fmt.Sprintf("a%d", i), "every original attribute is kept")
				}
				var ours []string
				for name := range got[0].MessageAttributes {
					if strings.HasPrefix(name, "sqsconsumer.") {
						ours = append(ours, name)
					}
				}
				require.ElementsMatch(t, tt.want, ours)
				if len(tt.want) < 3 {
					require.Contains(t, logs.String(), "attributes_left_out=")
					require.Contains(t, logs.String(), "error=\"permanent: bad\"", "what does not fit is logged")
				}
			})
		})
	}
}

func TestDeadLetterTooLargeWithReasonIsSentPlain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, false, 5, nil)
		_, err := b.client.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(b.dlq),
			Attributes: map[string]string{"MaximumMessageSize": "1024"}})
		require.NoError(t, err)
		body := strings.Repeat("b", 1000)
		_, err = b.srv.Send(b.url, body)
		require.NoError(t, err)
		c, err := New(b.client, b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
			return Permanent(errors.New(strings.Repeat("e", 5000)))
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(10 * time.Second)
		require.NoError(t, stop())
		got := b.receiveDLQ(t)
		require.Len(t, got, 1)
		require.Equal(t, body, aws.ToString(got[0].Body))
		require.Empty(t, got[0].MessageAttributes)
		require.Equal(t, 2, b.srv.CallCount("SendMessage"))
	})
}

// noSend hides the client's SendMessage.
type noSend struct{ Client }

func TestPermanentWithoutDeadLetterQueue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		redrive bool
		client  func(*sqs.Client) Client
		why     string
	}{
		{"no redrive policy", false, func(c *sqs.Client) Client { return c }, "the queue has no RedrivePolicy"},
		{"client without SendMessage", true, func(c *sqs.Client) Client { return noSend{c} }, "has no SendMessage method"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var b bundle
				if tt.redrive {
					b = setupDLQ(t, false, 100, nil).bundle
				} else {
					b = setup(t, nil)
				}
				ids := b.send(t, 3)
				var logs bytes.Buffer
				c, err := New(tt.client(b.client), b.url, HandlerFunc(func(ctx context.Context, m *Message) error {
					return Permanent(errors.New("bad"))
				}), WithVisibilityTimeout(30*time.Second), WithBackoff(func(int) time.Duration { return time.Hour }),
					WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
				require.NoError(t, err)
				stop := running(t, c)
				time.Sleep(time.Minute)
				require.NoError(t, stop())
				for _, id := range ids {
					st := b.state(t, id)
					require.False(t, st.Deleted, "settled as an ordinary failure")
					require.True(t, st.InFlight, "released with its backoff")
					require.Equal(t, time.Hour, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout)
				}
				require.Equal(t, 1, strings.Count(logs.String(), "no dead-letter queue"), "warned once")
				require.Contains(t, logs.String(), tt.why)
				require.Zero(t, b.srv.CallCount("SendMessage"))
			})
		})
	}
}

func TestDeadLetterQueueChecks(t *testing.T) {
	t.Parallel()
	h := HandlerFunc(func(context.Context, *Message) error { return nil })
	_, err := New(&sqs.Client{}, "https://sqs.us-east-1.amazonaws.com/123456789012/q", h, WithDeadLetterQueue("q-dlq"))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, `WithDeadLetterQueue: sqsconsumer: invalid option: queue URL "q-dlq" is not a URL`)

	synctest.Test(t, func(t *testing.T) {
		b := setupDLQ(t, true, 5, nil)
		std, err := b.srv.CreateQueue("plain", nil)
		require.NoError(t, err)
		c, err := New(b.client, b.url, h, WithDeadLetterQueue(std))
		require.NoError(t, err)
		err = runFor(c, 2*time.Second)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "is a standard queue but the source is a FIFO queue")
	})
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"q-dlq","maxReceiveCount":3}`})
		c, err := New(b.client, b.url, h)
		require.NoError(t, err)
		err = runFor(c, 2*time.Second)
		require.ErrorContains(t, err, `names "q-dlq", which is not an SQS queue ARN`)
	})
}

func TestQueueURLFromARN(t *testing.T) {
	t.Parallel()
	got, err := queueURLFromARN("https://sqs.eu-west-1.amazonaws.com/111122223333/jobs", "arn:aws:sqs:eu-west-1:111122223333:jobs-dlq")
	require.NoError(t, err)
	require.Equal(t, "https://sqs.eu-west-1.amazonaws.com/111122223333/jobs-dlq", got)
	for _, bad := range []string{"", "jobs-dlq", "arn:aws:sns:eu-west-1:1:t", "arn:aws:sqs:eu-west-1::x", "arn:aws:sqs:eu-west-1:1:"} {
		_, err := queueURLFromARN("https://sqs.eu-west-1.amazonaws.com/1/jobs", bad)
		require.Error(t, err, bad)
	}
}

// A dead-letter queue that is the source queue would loop a Permanent
// message forever (a send and a delete each time): New refuses the
// source's own URL, and Run the same queue under another URL (by its
// QueueArn) and a RedrivePolicy naming the queue itself, which SQS
// accepts.
func TestDeadLetterQueueIsNotTheSource(t *testing.T) {
	t.Parallel()
	// A Consumer looping between the queue and itself never blocks, so
	// virtual time would not pass: 10 handler calls end the run too. (The
	// channel is made in each bubble, for the blocking on it to count.)
	var calls chan struct{}
	h := HandlerFunc(func(context.Context, *Message) error {
		select {
		case calls <- struct{}{}:
		default:
		}
		return Permanent(errors.New("bad"))
	})
	run := func(c *Consumer) error { return runBounded(c, 2*time.Second, calls, 10) }
	t.Run("by URL at New", func(t *testing.T) {
		b := setup(t, nil)
		c, err := New(b.client, b.url, h, WithDeadLetterQueue(strings.ToUpper(b.url[:8])+b.url[8:]+"/"))
		require.Nil(t, c)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "WithDeadLetterQueue(")
		require.ErrorContains(t, err, "is the queue the Consumer reads ("+b.url+")")
	})
	t.Run("by ARN at Run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			calls = make(chan struct{}, 1)
			b := setup(t, nil)
			b.send(t, 1)
			// Another host for the same account and name: the same queue.
			other := "http://queue.amazonaws.com/" + strings.Join(strings.Split(b.url, "/")[3:], "/")
			require.False(t, sameQueueURL(other, b.url))
			c, err := New(b.client, b.url, h, WithDeadLetterQueue(other), WithVisibilityTimeout(30*time.Second))
			require.NoError(t, err, "the URLs differ")
			err = run(c)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, "WithDeadLetterQueue names dead-letter queue "+other+", which is the queue the Consumer reads ("+b.url)
			require.Zero(t, b.srv.CallCount("ReceiveMessage"))
			require.Zero(t, b.srv.CallCount("SendMessage"))
		})
	})
	t.Run("RedrivePolicy naming the queue itself", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			calls = make(chan struct{}, 1)
			b := setup(t, nil)
			arn := queueARN(t, b.client, b.url)
			_, err := b.client.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(b.url),
				Attributes: map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":5}`, arn)}})
			require.NoError(t, err, "SQS accepts it")
			c, err := New(b.client, b.url, h)
			require.NoError(t, err)
			err = run(c)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, "the queue's RedrivePolicy names the queue itself ("+arn+")")
			require.Zero(t, b.srv.CallCount("ReceiveMessage"))

			// Given a separate one, the Consumer moves its messages there.
			dlq, err := b.srv.CreateQueue("other-dlq", nil)
			require.NoError(t, err)
			id := b.send(t, 1)[0]
			c, err = New(b.client, b.url, h, WithDeadLetterQueue(dlq))
			require.NoError(t, err)
			stop := running(t, c)
			time.Sleep(time.Second)
			require.NoError(t, stop())
			require.True(t, b.state(t, id).Deleted)
			require.Equal(t, 1, b.srv.CallCount("SendMessage"))
		})
	})
}

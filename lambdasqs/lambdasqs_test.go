package lambdasqs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mapping plays the event source mapping inside a synctest bubble: it
// receives a batch as the mapping would and builds the event.
type mapping struct {
	srv    *sqstest.Server
	client *sqs.Client
	url    string
	arn    string
}

func newMapping(t *testing.T, name string, attrs map[string]string) *mapping {
	t.Helper()
	srv := sqstest.New(t)
	url, err := srv.CreateQueue(name, attrs)
	require.NoError(t, err)
	client := srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	out, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	return &mapping{srv: srv, client: client, url: url, arn: out.Attributes["QueueArn"]}
}

// receive takes up to n messages (visibility 30 s) and returns the event.
func (mp *mapping) receive(t *testing.T, n int32) events.SQSEvent {
	t.Helper()
	out, err := mp.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &mp.url, MaxNumberOfMessages: n,
		VisibilityTimeout: 30, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames: []string{"All"}})
	require.NoError(t, err)
	return Event(mp.arn, "us-east-1", out.Messages)
}

// settle deletes what the response does not name, as the mapping does,
// and returns the failed IDs.
func (mp *mapping) settle(t *testing.T, ev events.SQSEvent, resp events.SQSEventResponse) []string {
	t.Helper()
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	for _, r := range ev.Records {
		if !slices.Contains(failed, r.MessageId) {
			_, err := mp.client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &mp.url, ReceiptHandle: &r.ReceiptHandle})
			require.NoError(t, err)
		}
	}
	return failed
}

func (mp *mapping) send(t *testing.T, bodies ...string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, b := range bodies {
		var opts []sqstest.SendOption
		if strings.HasSuffix(mp.url, ".fifo") {
			opts = append(opts, sqstest.WithGroupID(b[:1]))
		}
		id, err := mp.srv.Send(mp.url, b, opts...)
		require.NoError(t, err)
		ids[b] = id
	}
	return ids
}

func bodiesOf(ev events.SQSEvent, ids []string) []string {
	var out []string
	for _, r := range ev.Records {
		if slices.Contains(ids, r.MessageId) {
			out = append(out, r.Body)
		}
	}
	return out
}

func TestWrapValidates(t *testing.T) {
	t.Parallel()
	h := sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil })
	c := &sqs.Client{}
	for _, tt := range []struct {
		name string
		opts []Option
		want string
	}{
		{"visibility", []Option{WithVisibilityTimeout(1500 * time.Millisecond)}, "WithVisibilityTimeout(1.5s)"},
		{"reserve", []Option{WithReserve(time.Millisecond)}, "WithReserve(1ms)"},
		{"drain notice", []Option{WithDrainNotice(-time.Second)}, "WithDrainNotice(-1s)"},
		{"drain notice max", []Option{WithDrainNotice(16 * time.Minute)}, "WithDrainNotice(16m0s)"},
		{"window", []Option{WithBatchingWindow(10 * time.Minute)}, "WithBatchingWindow(10m0s)"},
		{"concurrency", []Option{WithConcurrency(0)}, "WithConcurrency(0)"},
		{"middleware", []Option{WithMiddleware(nil)}, "middleware 0 is nil"},
		{"observer", []Option{WithObserver(nil)}, "WithObserver(nil)"},
		{"queue url", []Option{WithQueueURL(nil)}, "WithQueueURL(nil)"},
		{"nil option", []Option{nil}, "an Option is nil"},
	} {
		_, err := Wrap(c, h, tt.opts...)
		require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	_, err := Wrap(nil, nil)
	require.ErrorContains(t, err, "client is nil")
	_, err = Wrap(c, nil)
	require.ErrorContains(t, err, "handler is nil")
	_, err = WrapBatch(c, nil)
	require.ErrorContains(t, err, "batch handler is nil")

	u, err := QueueURL("arn:aws:sqs:eu-west-1:123456789012:jobs.fifo")
	require.NoError(t, err)
	require.Equal(t, "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo", u)
	_, err = QueueURL("arn:aws:sns:eu-west-1:123456789012:topic")
	require.ErrorContains(t, err, "is not an SQS queue ARN")
}

// A standard queue: records run at once, failures are reported by ID, a
// job longer than the visibility timeout keeps its message, and the
// adapter never deletes.
func TestWrapStandard(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mp := newMapping(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
		mp.send(t, "ok1", "fail", "slow", "panic")
		h, err := Wrap(mp.client, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			switch m.Body {
			case "fail":
				return errors.New("no")
			case "slow":
				time.Sleep(100 * time.Second) // over three leases
			case "panic":
				panic("boom")
			}
			return nil
		}), WithVisibilityTimeout(30*time.Second))
		require.NoError(t, err)
		ev := mp.receive(t, 10)
		require.Len(t, ev.Records, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var resp events.SQSEventResponse
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err = h(ctx, ev)
		}()
		time.Sleep(50 * time.Second)
		out, rerr := mp.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &mp.url, MaxNumberOfMessages: 10})
		require.NoError(t, rerr)
		for _, m := range out.Messages {
			require.NotEqual(t, "slow", *m.Body, "the running job's message stays invisible")
		}
		<-done
		require.NoError(t, err)
		failed := bodiesOf(ev, failedIDs(resp))
		slices.Sort(failed)
		require.Equal(t, []string{"fail", "panic"}, failed)
		for _, st := range mp.srv.Messages(mp.url) {
			require.False(t, st.Deleted, "the adapter never deletes")
			if st.Body == "slow" {
				require.GreaterOrEqual(t, len(st.VisibilityChanges), 3)
			}
		}
	})
}

func failedIDs(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// A record that would outlive the function is reported failed before the
// deadline, and its heartbeat stops.
func TestWrapDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mp := newMapping(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
		mp.send(t, "quick", "long")
		var cause error
		h, err := Wrap(mp.client, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			if m.Body == "quick" {
				return nil
			}
			select {
			case <-time.After(time.Hour):
				return nil
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return cause
			}
		}), WithReserve(2*time.Second))
		require.NoError(t, err)
		ev := mp.receive(t, 10)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := h(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, 58*time.Second, time.Since(start), "returned at the deadline less the reserve")
		require.ErrorIs(t, cause, ErrDeadline)
		require.Equal(t, []string{"long"}, bodiesOf(ev, failedIDs(resp)))
		changes := 0
		for _, st := range mp.srv.Messages(mp.url) {
			if st.Body == "long" {
				changes = len(st.VisibilityChanges)
			}
		}
		time.Sleep(5 * time.Minute)
		for _, st := range mp.srv.Messages(mp.url) {
			if st.Body == "long" {
				require.Equal(t, changes, len(st.VisibilityChanges), "no renewal after the function returned")
				require.False(t, st.InFlight, "it came back")
			}
		}
	})
}

// FIFO: records run in order; from the first failure on, everything is
// reported failed and nothing later runs.
func TestWrapFIFO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mp := newMapping(t, "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		mp.send(t, "a0", "a1", "a2", "b0")
		var mu sync.Mutex
		var ran []string
		h, err := Wrap(mp.client, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			mu.Lock()
			ran = append(ran, m.Body)
			mu.Unlock()
			if m.Body == "a1" {
				return errors.New("a1 failed")
			}
			return nil
		}))
		require.NoError(t, err)
		ev := mp.receive(t, 10)
		require.Len(t, ev.Records, 4)
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Equal(t, []string{"a0", "a1"}, ran)
		require.Equal(t, []string{"a1", "a2", "b0"}, bodiesOf(ev, failedIDs(resp)))
		mp.settle(t, ev, resp)
	})
}

// WrapBatch: middleware per record, one call for the rest, partial
// failures; a duplicate never reaches the batch.
func TestWrapBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mp := newMapping(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
		mp.send(t, "k1", "k2", "k3", "k2-dup", "bad")
		mw, err := sqsconsumer.NewIdempotent(sqsconsumer.NewMemoryStore(), sqsconsumer.WithIdempotencyKey(func(m *sqsconsumer.Message) (string, error) {
			if m.Body == "bad" {
				return "", errors.New("no key")
			}
			return strings.TrimSuffix(m.Body, "-dup"), nil
		}))
		require.NoError(t, err)
		var mu sync.Mutex
		var calls [][]string
		var batchEvents int
		h, err := WrapBatch(mp.client, func(ctx context.Context, msgs []*sqsconsumer.Message) error {
			var bodies []string
			fails := sqsconsumer.BatchFailures{}
			for _, m := range msgs {
				bodies = append(bodies, m.Body)
				if m.Body == "k3" {
					fails[m.ID] = errors.New("k3 failed")
				}
			}
			mu.Lock()
			calls = append(calls, bodies)
			mu.Unlock()
			time.Sleep(40 * time.Second)
			return fails
		}, WithMiddleware(mw), WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
			if e.Kind == sqsconsumer.EventBatch {
				mu.Lock()
				batchEvents++
				mu.Unlock()
			}
		})))
		require.NoError(t, err)
		ev := mp.receive(t, 3)
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Equal(t, []string{"k3"}, bodiesOf(ev, failedIDs(resp)))
		mp.settle(t, ev, resp)
		ev = mp.receive(t, 10)
		resp, err = h(context.Background(), ev)
		require.NoError(t, err)
		failed := bodiesOf(ev, failedIDs(resp))
		slices.Sort(failed)
		require.Equal(t, []string{"bad"}, failed, "bad has no key; k2-dup is a duplicate, which succeeds")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, [][]string{{"k1", "k2", "k3"}}, calls, "no call for a duplicate and a failure")
		require.Equal(t, 1, batchEvents)
	})
}

// WrapBatch on FIFO: a record whose middleware fails keeps the later ones
// out of the batch; a failure in the batch fails everything after it.
func TestWrapBatchFIFO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mp := newMapping(t, "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		mp.send(t, "a0", "a1", "a2", "a3")
		var mu sync.Mutex
		var got, earlier []string // earlier: records failed behind an earlier one, as their middleware saw it
		refuse := "a2"
		mw := func(next sqsconsumer.Handler) sqsconsumer.Handler {
			return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				if m.Body == refuse {
					time.Sleep(time.Second)
					return errors.New("refused")
				}
				return next.HandleMessage(ctx, m)
			})
		}
		h, err := WrapBatch(mp.client, func(ctx context.Context, msgs []*sqsconsumer.Message) error {
			got = got[:0]
			fails := sqsconsumer.BatchFailures{}
			for _, m := range msgs {
				got = append(got, m.Body)
				if m.Body == "a0" && refuse == "" {
					fails[m.ID] = errors.New("a0 failed")
				}
			}
			return fails
		}, WithMiddleware(mw), WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
			if e.Kind == sqsconsumer.EventFailed && errors.Is(e.Err, errEarlierFailed) {
				mu.Lock()
				earlier = append(earlier, e.Message.Body)
				mu.Unlock()
			}
		})))
		require.NoError(t, err)
		ev := mp.receive(t, 10)
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Equal(t, []string{"a0", "a1"}, got)
		require.Equal(t, []string{"a2", "a3"}, bodiesOf(ev, failedIDs(resp)))

		refuse = ""
		resp, err = h(context.Background(), ev)
		require.NoError(t, err)
		require.Equal(t, []string{"a0", "a1", "a2", "a3"}, got)
		require.Equal(t, []string{"a0", "a1", "a2", "a3"}, bodiesOf(ev, failedIDs(resp)))
		slices.Sort(earlier)
		require.Equal(t, []string{"a1", "a2", "a3", "a3"}, earlier, "a3 behind a2's refusal, then a1..a3 behind a0's failure")
	})
}

func TestEventShape(t *testing.T) {
	t.Parallel()
	ev := Event("arn:aws:sqs:us-east-1:123456789012:q", "us-east-1", []types.Message{{MessageId: aws.String("id"), ReceiptHandle: aws.String("rh"),
		Body: aws.String("b"), Attributes: map[string]string{"ApproximateReceiveCount": "2"},
		MessageAttributes: map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}}})
	require.Len(t, ev.Records, 1)
	r := ev.Records[0]
	require.Equal(t, "aws:sqs", r.EventSource)
	require.Equal(t, "id", r.MessageId)
	require.Equal(t, "v", *r.MessageAttributes["k"].StringValue)
	require.Equal(t, "String", r.MessageAttributes["k"].DataType)
	require.Equal(t, "2", r.Attributes["ApproximateReceiveCount"])
	require.Equal(t, "arn:aws:sqs:us-east-1:123456789012:q", r.EventSourceARN)
	require.Equal(t, "us-east-1", r.AWSRegion)
}

// WrapBatch without middleware runs the batch on one goroutine (runJoined)
// instead of a goroutine per record and gather: each case runs both ways
// (no middleware, and a middleware that only passes the record on) and
// must give the same response and the same observer events.
func TestWrapBatchJoinOnly(t *testing.T) {
	t.Parallel()
	type batchFunc = func(ctx context.Context, msgs []*sqsconsumer.Message) error
	failBody := func(body string) batchFunc {
		return func(ctx context.Context, msgs []*sqsconsumer.Message) error {
			fails := sqsconsumer.BatchFailures{}
			for _, m := range msgs {
				if m.Body == body {
					fails[m.ID] = errors.New(body + " failed")
				}
			}
			return fails
		}
	}
	for _, tt := range []struct {
		name    string
		fifo    bool
		timeout time.Duration // the function's; 0: none
		batch   batchFunc
		want    []string // failed bodies, in the event's order
	}{
		{"all succeed", false, 0, failBody(""), nil},
		{"one fails", false, 0, failBody("k2"), []string{"k2"}},
		{"an error fails all", false, 0, func(context.Context, []*sqsconsumer.Message) error { return errors.New("down") },
			[]string{"k1", "k2", "k3"}},
		{"a panic fails all", false, 0, func(context.Context, []*sqsconsumer.Message) error { panic("boom") },
			[]string{"k1", "k2", "k3"}},
		{"an unknown ID fails all", false, 0, func(context.Context, []*sqsconsumer.Message) error {
			return sqsconsumer.BatchFailures{"nope": errors.New("?")}
		}, []string{"k1", "k2", "k3"}},
		{"FIFO: from the first failure on", true, 0, failBody("a1"), []string{"a1", "a2", "a3"}},
		{"FIFO: all succeed", true, 0, failBody(""), nil},
		{"cutoff already passed", false, 500 * time.Millisecond, failBody(""), []string{"k1", "k2", "k3"}},
		{"FIFO: cutoff already passed", true, 500 * time.Millisecond, failBody(""), []string{"a0", "a1", "a2", "a3"}},
		{"the batch outlives the cutoff", false, time.Minute, func(ctx context.Context, _ []*sqsconsumer.Message) error {
			<-ctx.Done()
			time.Sleep(time.Second) // past the reserve's half
			return nil
		}, []string{"k1", "k2", "k3"}},
		{"the batch stops at the cutoff", true, time.Minute, func(ctx context.Context, _ []*sqsconsumer.Message) error {
			<-ctx.Done()
			return context.Cause(ctx)
		}, []string{"a0", "a1", "a2", "a3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := func(t *testing.T, mws ...sqsconsumer.Middleware) (failed, events []string) {
				synctest.Test(t, func(t *testing.T) {
					name, attrs, bodies := "jobs", map[string]string{"VisibilityTimeout": "30"}, []string{"k1", "k2", "k3"}
					if tt.fifo {
						name, attrs, bodies = "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}, []string{"a0", "a1", "a2", "a3"}
					}
					mp := newMapping(t, name, attrs)
					mp.send(t, bodies...)
					var mu sync.Mutex
					h, err := WrapBatch(mp.client, tt.batch, WithMiddleware(mws...), WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
						switch e.Kind {
						case sqsconsumer.EventStarted, sqsconsumer.EventSucceeded, sqsconsumer.EventFailed, sqsconsumer.EventBatch:
						default:
							return // the lease's own (a renewal at the cutoff may or may not happen)
						}
						body := ""
						if e.Message != nil {
							body = e.Message.Body
						}
						errText := fmt.Sprint(e.Err)
						for _, m := range e.Batch {
							body += m.Body + ","
							errText = strings.ReplaceAll(errText, m.ID, m.Body) // IDs differ between the runs
						}
						mu.Lock()
						events = append(events, fmt.Sprintf("%v %s %s", e.Kind, body, errText))
						mu.Unlock()
					})))
					require.NoError(t, err)
					ev := mp.receive(t, 10)
					require.Len(t, ev.Records, len(bodies))
					ctx := context.Background()
					if tt.timeout > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tt.timeout)
						defer cancel()
					}
					resp, err := h(ctx, ev)
					require.NoError(t, err)
					failed = bodiesOf(ev, failedIDs(resp))
					time.Sleep(time.Minute) // a batch that outlived the invocation returns
					synctest.Wait()
					mu.Lock()
					defer mu.Unlock()
					slices.Sort(events)
				})
				return failed, events
			}
			failed, events := run(t)
			require.Equal(t, tt.want, failed)
			pass := func(next sqsconsumer.Handler) sqsconsumer.Handler { return next }
			failedMW, eventsMW := run(t, pass)
			require.Equal(t, failedMW, failed, "the same failures with a middleware")
			require.Equal(t, eventsMW, events, "the same events with a middleware")
		})
	}
}

// A record that cannot be leased (here: not from an SQS queue) is
// reported failed and the others run; an event of such records only, or
// an empty one, returns at once with each of Wrap's and WrapBatch's ways.
func TestUnusableRecords(t *testing.T) {
	t.Parallel()
	pass := func(next sqsconsumer.Handler) sqsconsumer.Handler { return next }
	for _, tt := range []struct {
		name string
		wrap func(c sqsconsumer.Client, ran *[]string) (Handler, error)
	}{
		{"Wrap", func(c sqsconsumer.Client, ran *[]string) (Handler, error) {
			var mu sync.Mutex
			return Wrap(c, sqsconsumer.HandlerFunc(func(_ context.Context, m *sqsconsumer.Message) error {
				mu.Lock()
				defer mu.Unlock()
				*ran = append(*ran, m.Body)
				return nil
			}))
		}},
		{"WrapBatch", func(c sqsconsumer.Client, ran *[]string) (Handler, error) {
			return WrapBatch(c, func(_ context.Context, msgs []*sqsconsumer.Message) error {
				for _, m := range msgs {
					*ran = append(*ran, m.Body)
				}
				return nil
			})
		}},
		{"WrapBatch with middleware", func(c sqsconsumer.Client, ran *[]string) (Handler, error) {
			return WrapBatch(c, func(_ context.Context, msgs []*sqsconsumer.Message) error {
				for _, m := range msgs {
					*ran = append(*ran, m.Body)
				}
				return nil
			}, WithMiddleware(pass))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				mp := newMapping(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
				mp.send(t, "k1", "k2", "k3")
				var ran []string
				h, err := tt.wrap(mp.client, &ran)
				require.NoError(t, err)
				ev := mp.receive(t, 10)
				require.Len(t, ev.Records, 3)
				ev.Records[1].EventSourceARN = "arn:aws:sns:us-east-1:123456789012:topic"
				resp, err := h(context.Background(), ev)
				require.NoError(t, err)
				require.Equal(t, []string{ev.Records[1].Body}, bodiesOf(ev, failedIDs(resp)))
				slices.Sort(ran)
				want := []string{ev.Records[0].Body, ev.Records[2].Body}
				slices.Sort(want)
				require.Equal(t, want, ran)

				for i := range ev.Records {
					ev.Records[i].EventSourceARN = "arn:aws:sns:us-east-1:123456789012:topic"
				}
				ran = nil
				resp, err = h(context.Background(), ev)
				require.NoError(t, err)
				require.Len(t, resp.BatchItemFailures, 3)
				require.Empty(t, ran)

				resp, err = h(context.Background(), events.SQSEvent{})
				require.NoError(t, err)
				require.NotNil(t, resp.BatchItemFailures)
				require.Empty(t, resp.BatchItemFailures)
			})
		})
	}
}

// WithConcurrency bounds the records of a standard queue's event handled
// at once.
func TestWrapConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mp := newMapping(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
		mp.send(t, "k1", "k2", "k3", "k4", "k5")
		var mu sync.Mutex
		running, most := 0, 0
		h, err := Wrap(mp.client, sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(time.Second)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}), WithConcurrency(2))
		require.NoError(t, err)
		ev := mp.receive(t, 10)
		require.Len(t, ev.Records, 5)
		start := time.Now()
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
		require.Equal(t, 2, most)
		require.Equal(t, 3*time.Second, time.Since(start), "5 one-second records, 2 at a time")
	})
}

// Issue 36 point 6, in Lambda: the drain begins a notice before the
// cutoff (the deadline less the reserve), the handlers' contexts still
// live; a long job that hands its record back with RetryAfter(err, 0) is
// reported failed and released at once, and the invocation returns as
// soon as the handlers have. Wrap and WrapBatch, with and without
// middleware.
func TestWrapDraining(t *testing.T) {
	t.Parallel()
	passThrough := WithMiddleware(func(next sqsconsumer.Handler) sqsconsumer.Handler {
		return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error { return next.HandleMessage(ctx, m) })
	})
	errCheckpointed := errors.New("draining: checkpointed")
	for _, tc := range []struct {
		name  string
		batch bool
		opts  []Option
	}{
		{name: "wrap"},
		{name: "wrap/middleware", opts: []Option{passThrough}},
		{name: "batch", batch: true},
		{name: "batch/middleware", batch: true, opts: []Option{passThrough}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				mp := newMapping(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
				mp.send(t, "quick", "long")
				var mu sync.Mutex
				var drainedAt []time.Time
				var live []bool
				job := func(ctx context.Context) error {
					select {
					case <-sqsconsumer.Draining(ctx):
						mu.Lock()
						drainedAt = append(drainedAt, time.Now())
						live = append(live, ctx.Err() == nil)
						mu.Unlock()
						return sqsconsumer.RetryAfter(errCheckpointed, 0)
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(time.Hour):
						return nil
					}
				}
				opts := append(tc.opts, WithReserve(2*time.Second), WithDrainNotice(10*time.Second))
				var h Handler
				var err error
				if tc.batch {
					h, err = WrapBatch(mp.client, func(ctx context.Context, msgs []*sqsconsumer.Message) error {
						fails := sqsconsumer.BatchFailures{}
						for _, m := range msgs {
							if m.Body == "long" {
								fails[m.ID] = job(ctx)
							}
						}
						return fails
					}, opts...)
				} else {
					h, err = Wrap(mp.client, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
						if m.Body == "quick" {
							return nil
						}
						return job(ctx)
					}), opts...)
				}
				require.NoError(t, err)
				ev := mp.receive(t, 10)
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				resp, err := h(ctx, ev)
				require.NoError(t, err)
				require.Equal(t, 48*time.Second, time.Since(start), "returned at the drain (deadline 60 s, less the reserve, less the notice)")
				mu.Lock()
				require.Equal(t, []time.Time{start.Add(48 * time.Second)}, drainedAt)
				require.Equal(t, []bool{true}, live, "the handler's context was live at the drain")
				mu.Unlock()
				require.Equal(t, []string{"long"}, bodiesOf(ev, failedIDs(resp)))
				for _, st := range mp.srv.Messages(mp.url) {
					if st.Body == "long" {
						require.False(t, st.InFlight, "released at once, not left for its visibility")
						require.Equal(t, time.Duration(0), st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout)
					}
				}
			})
		})
	}
}

// A failed record whose error asks for a delay with RetryAfter comes back
// after that delay (the adapter sets its visibility); one without comes
// back when its visibility runs out. On a FIFO queue the records reported
// failed after the first failure come back with it.
func TestWrapRetryAfter(t *testing.T) {
	t.Parallel()
	t.Run("standard", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			mp := newMapping(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
			mp.send(t, "later", "plain")
			h, err := Wrap(mp.client, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				if m.Body == "later" {
					return sqsconsumer.RetryAfter(errors.New("not yet"), 5*time.Second)
				}
				return errors.New("failed")
			}))
			require.NoError(t, err)
			ev := mp.receive(t, 10)
			resp, err := h(context.Background(), ev)
			require.NoError(t, err)
			require.Len(t, resp.BatchItemFailures, 2)
			for _, st := range mp.srv.Messages(mp.url) {
				require.True(t, st.InFlight, st.Body)
				if st.Body == "later" {
					require.Equal(t, 5*time.Second, st.VisibilityChanges[len(st.VisibilityChanges)-1].Timeout)
				} else {
					require.Empty(t, st.VisibilityChanges, "no call for a record without RetryAfter")
				}
			}
			time.Sleep(6 * time.Second)
			for _, st := range mp.srv.Messages(mp.url) {
				require.Equal(t, st.Body == "plain", st.InFlight, "later came back after 5 s; plain waits out its 30 s: %s", st.Body)
			}
		})
	})
	t.Run("fifo", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			mp := newMapping(t, "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
			mp.send(t, "a0", "a1", "a2")
			h, err := Wrap(mp.client, sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				if m.Body == "a1" {
					return sqsconsumer.RetryAfter(errors.New("drained"), 0)
				}
				return nil
			}))
			require.NoError(t, err)
			ev := mp.receive(t, 10)
			resp, err := h(context.Background(), ev)
			require.NoError(t, err)
			require.Equal(t, []string{"a1", "a2"}, bodiesOf(ev, failedIDs(resp)))
			mp.settle(t, ev, resp)
			ev = mp.receive(t, 10)
			require.Equal(t, []string{"a1", "a2"}, bodiesOf(ev, idsOf(ev)), "the group came back at once, in order")
		})
	})
}

func idsOf(ev events.SQSEvent) []string {
	var ids []string
	for _, r := range ev.Records {
		ids = append(ids, r.MessageId)
	}
	return ids
}

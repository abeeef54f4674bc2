// The shared test bundle: an sqstest server with one queue and a client
// without SDK retries, and the helpers the Lease and Consumer tests use to
// receive, lease, run and inspect messages.

package sqsconsumer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// bundle is what most tests need: an in-memory SQS, a client without the
// SDK's own retries (so call counts are exact), and one queue.
type bundle struct {
	srv    *sqstest.Server
	client *sqs.Client
	url    string
}

func setup(t *testing.T, attrs map[string]string) bundle {
	t.Helper()
	srv := sqstest.New(t)
	name := "q"
	if attrs["FifoQueue"] == "true" {
		name = "q.fifo"
	}
	url, err := srv.CreateQueue(name, attrs)
	require.NoError(t, err)
	return bundle{srv: srv, client: srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} }), url: url}
}

// receive sends body and receives it with the given visibility, returning
// the message and when the receive request was sent.
func (b bundle) receive(t *testing.T, body string, visibility time.Duration) (types.Message, time.Time) {
	t.Helper()
	_, err := b.srv.Send(b.url, body)
	require.NoError(t, err)
	return b.receiveNext(t, visibility)
}

func (b bundle) receiveNext(t *testing.T, visibility time.Duration) (types.Message, time.Time) {
	t.Helper()
	sent := time.Now()
	out, err := b.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(b.url),
		VisibilityTimeout:           int32(visibility / time.Second),
		WaitTimeSeconds:             20,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	return out.Messages[0], sent
}

// lease makes a standalone 30-second Lease for msg, received at sent;
// opts come after those defaults and may override them.
func (b bundle) lease(t *testing.T, msg types.Message, sent time.Time, opts ...LeaseOption) *Lease {
	t.Helper()
	l, err := NewLease(b.client, b.url, msg, append([]LeaseOption{WithVisibilityTimeout(30 * time.Second), WithReceivedAt(sent)}, opts...)...)
	require.NoError(t, err)
	return l
}

func (b bundle) state(t *testing.T, id string) sqstest.MessageState {
	t.Helper()
	st, ok := b.srv.Message(b.url, id)
	require.True(t, ok, "message %s unknown to sqstest", id)
	return st
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) count(k EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// spy wraps a Client and records the MaxNumberOfMessages of every receive.
type spy struct {
	Client
	mu   sync.Mutex
	maxN []int32
}

func (s *spy) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s.mu.Lock()
	s.maxN = append(s.maxN, in.MaxNumberOfMessages)
	s.mu.Unlock()
	return s.Client.ReceiveMessage(ctx, in, optFns...)
}

// running starts c.Run in a goroutine; stop cancels it and returns Run's error.
func running(t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

func (b bundle) send(t *testing.T, n int, opts ...sqstest.SendOption) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		id, err := b.srv.Send(b.url, fmt.Sprintf("m%03d", i), opts...)
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}

// flowOf returns the flow of c's run once Run has set it up, nil before.
func (c *Consumer) flowOf() *flow[*delivery] {
	if r := c.runOf(); r != nil {
		return r.fl
	}
	return nil
}

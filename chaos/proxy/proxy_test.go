package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/chaos/internal/wire"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// These tests use real sockets on 127.0.0.1: the proxy's faults (resets,
// delays) are faults of a TCP connection.

type bundle struct {
	srv   *sqstest.Server
	px    *Proxy
	c     *sqs.Client
	queue string
}

func setup(t *testing.T, p Policy) bundle {
	t.Helper()
	srv := sqstest.NewServer()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	px, err := Start(hs.URL, p)
	require.NoError(t, err)
	t.Cleanup(px.Close)
	url, err := srv.CreateQueue("q", map[string]string{"VisibilityTimeout": "30"})
	require.NoError(t, err)
	return bundle{srv: srv, px: px, c: wire.Client(px.URL(), 4242), queue: url}
}

// once makes a client call a single attempt, so each fault shows as is.
func once(o *sqs.Options) { o.RetryMaxAttempts = 1 }

func (b bundle) receive(t *testing.T) types.Message {
	t.Helper()
	_, err := b.srv.Send(b.queue, "hello")
	require.NoError(t, err)
	out, err := b.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &b.queue, MaxNumberOfMessages: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}}, once)
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	return out.Messages[0]
}

func TestDeleteFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		class       Class
		wantErr     string // substring of the client's error; "" for success
		wantCode    string // the API error code the SDK reports, when an API error
		wantDeleted bool   // the server deleted the message
	}{
		{class: None, wantDeleted: true},
		{class: Error500, wantErr: "StatusCode: 500", wantCode: "InternalError"},
		{class: Throttle400, wantErr: "StatusCode: 400", wantCode: "RequestThrottled"},
		{class: Throttle403, wantErr: "StatusCode: 403", wantCode: "RequestThrottled"},
		{class: ResetBefore, wantErr: "connection reset"},
		{class: HTML, wantErr: "StatusCode: 502"},
		{class: Delay, wantDeleted: true},
		{class: Truncated, wantErr: "deserialization failed", wantDeleted: true},
		{class: LostAnswer, wantErr: "connection reset", wantDeleted: true},
		{class: FakeDelete},
	}
	for _, tt := range tests {
		name := string(tt.class)
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Funcs{BeforeFunc: func(c *Call) Fault {
				if c.Action == "DeleteMessageBatch" {
					return Fault{Class: tt.class, Delay: 300 * time.Millisecond}
				}
				return Fault{}
			}})
			m := b.receive(t)
			start := time.Now()
			out, err := b.c.DeleteMessageBatch(t.Context(), &sqs.DeleteMessageBatchInput{QueueUrl: &b.queue,
				Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("e1"), ReceiptHandle: m.ReceiptHandle}}}, once)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Len(t, out.Successful, 1)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
			}
			if tt.wantCode != "" {
				var api smithy.APIError
				require.True(t, errors.As(err, &api), "an API error: %v", err)
				require.Equal(t, tt.wantCode, api.ErrorCode())
			}
			if tt.class == Delay {
				require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
			}
			st, ok := b.srv.Message(b.queue, *m.MessageId)
			require.True(t, ok)
			require.Equal(t, tt.wantDeleted, st.Deleted, "deleted on the server")

			// The record names the fault, the handle and its message.
			require.Eventually(t, func() bool { return len(b.px.Records()) == 2 }, 5*time.Second, 5*time.Millisecond)
			recs := b.px.Records()
			require.Equal(t, "ReceiveMessage", recs[0].Action)
			require.Equal(t, []Delivery{{MessageID: *m.MessageId, Handle: *m.ReceiptHandle, ReceiveCount: 1}}, recs[0].Delivered)
			require.Equal(t, 4242, recs[0].PID)
			del := recs[1]
			require.Equal(t, "DeleteMessageBatch", del.Action)
			require.Equal(t, tt.class, del.Fault.Class)
			require.Equal(t, tt.class.Forwarded(), del.Forwarded)
			require.Equal(t, []string{*m.ReceiptHandle}, del.Handles)
			require.Equal(t, []string{*m.MessageId}, del.IDs)
			if tt.wantDeleted {
				require.Equal(t, []string{*m.ReceiptHandle}, del.Deleted)
			} else {
				require.Empty(t, del.Deleted)
			}
		})
	}
}

// A receive answer held past the client's patience is recorded as handed
// out with ClientGone: the messages are in flight on the server, and the
// client never saw them.
func TestHeldReceiveClientGone(t *testing.T) {
	t.Parallel()
	held := make(chan struct{}, 1)
	b := setup(t, Funcs{AfterFunc: func(c *Call) Fault {
		if len(c.Delivered) > 0 {
			held <- struct{}{}
			return Fault{Class: Delay, Delay: 10 * time.Second}
		}
		return Fault{}
	}})
	_, err := b.srv.Send(b.queue, "hello")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := b.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &b.queue, WaitTimeSeconds: 1}, once)
		errc <- err
	}()
	<-held
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Eventually(t, func() bool { return len(b.px.Records()) == 1 }, 5*time.Second, 5*time.Millisecond)
	rec := b.px.Records()[0]
	require.True(t, rec.ClientGone)
	require.Len(t, rec.Delivered, 1)
	require.Less(t, rec.End.Sub(rec.Time), 5*time.Second, "the proxy stops holding when the client leaves")
	st, _ := b.srv.Message(b.queue, rec.Delivered[0].MessageID)
	require.True(t, st.InFlight, "stranded on the server")
}

func TestRandomPolicy(t *testing.T) {
	t.Parallel()
	classes := []Class{Error500, LostAnswer}
	decide := func(seed uint64) []Fault {
		p := Random(seed, 0.5, classes, time.Second, "DeleteMessageBatch", "ReceiveMessage")
		var out []Fault
		for i := range 200 {
			action := []string{"DeleteMessageBatch", "ReceiveMessage", "GetQueueAttributes"}[i%3]
			f := p.Before(&Call{Action: action})
			if action == "GetQueueAttributes" {
				require.Equal(t, None, f.Class, "actions not listed are never faulted")
			}
			if action == "ReceiveMessage" {
				require.NotEqual(t, LostAnswer, f.Class, "lost answers only on deletes")
			}
			out = append(out, f)
		}
		return out
	}
	a := decide(7)
	require.Equal(t, a, decide(7), "a seed replays its decisions")
	n := 0
	for _, f := range a {
		if f.Class != None {
			n++
		}
	}
	require.InDelta(t, 67, n, 30, "about half of the eligible requests faulted")
}

func TestErrorBodyShape(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	awsError(w, http.StatusForbidden, "RequestThrottled", "RequestThrottled", "Rate exceeded")
	require.Equal(t, 403, w.Code)
	require.Equal(t, "RequestThrottled;Sender", w.Header().Get("x-amzn-query-error"))
	require.JSONEq(t, `{"__type":"com.amazonaws.sqs#RequestThrottled","message":"Rate exceeded"}`, w.Body.String())
	w = httptest.NewRecorder()
	awsError(w, http.StatusInternalServerError, "InternalError", "InternalError", "x")
	require.True(t, strings.HasSuffix(w.Header().Get("x-amzn-query-error"), ";Receiver"))
}

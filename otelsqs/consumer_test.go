package otelsqs

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// TestWithConsumer runs a real Consumer against the in-memory SQS under
// synctest, with both the Observer and the Middleware: the producer's
// trace context crosses the queue in both encodings, and the metrics
// count what happened.
func TestWithConsumer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("work", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		client := srv.Client(func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
		send := func(body string, attrs map[string]types.MessageAttributeValue, sys map[string]types.MessageSystemAttributeValue) {
			_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{
				QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: attrs, MessageSystemAttributes: sys})
			require.NoError(t, err)
		}
		send("w3c", map[string]types.MessageAttributeValue{"traceparent": str("00-" + w3cTrace + "-" + w3cParent + "-01")}, nil)
		send("xray", nil, map[string]types.MessageSystemAttributeValue{"AWSTraceHeader": {
			DataType: aws.String("String"), StringValue: aws.String("Root=" + xrayRoot + ";Parent=" + xrayPar + ";Sampled=1")}})
		send("fail", nil, nil)

		m := newMeters(t)
		tr := newTracing(t)
		c, err := sqsconsumer.New(client, url, sqsconsumer.HandlerFunc(func(ctx context.Context, msg *sqsconsumer.Message) error {
			switch msg.Body {
			case "fail":
				return sqsconsumer.RetryAfter(errors.New("not today"), 10*time.Minute)
			case "xray":
				time.Sleep(45 * time.Second) // outlives the 30 s lease: renewed
			}
			return nil
		}),
			sqsconsumer.WithVisibilityTimeout(30*time.Second),
			sqsconsumer.WithObserver(m.obs),
			sqsconsumer.WithMiddleware(Middleware(WithTracerProvider(tr.tp), WithQueueURL(url))))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(2 * time.Minute)
		cancel()
		require.NoError(t, <-done)

		spans := map[string]int{}
		for _, s := range tr.rec.Ended() {
			require.Equal(t, "process work", s.Name())
			switch s.SpanContext().TraceID().String() {
			case w3cTrace:
				require.Equal(t, w3cParent, s.Parent().SpanID().String())
				spans["w3c"]++
			case xrayTrace:
				require.Equal(t, xrayPar, s.Parent().SpanID().String())
				spans["xray"]++
			default:
				require.False(t, s.Parent().IsValid())
				require.Equal(t, codes.Error, s.Status().Code)
				spans["fail"]++
			}
		}
		require.Equal(t, map[string]int{"w3c": 1, "xray": 1, "fail": 1}, spans)

		ms := m.collect(t)
		for name, want := range map[string]int64{
			"sqsconsumer.messages.received":  3,
			"sqsconsumer.messages.processed": 3,
			"sqsconsumer.messages.failed":    1,
			"sqsconsumer.messages.deleted":   2,
			"sqsconsumer.messages.released":  1,
			"sqsconsumer.messages.in_flight": 0,
		} {
			require.Equal(t, want, sum(t, ms, name), name)
		}
		require.GreaterOrEqual(t, sum(t, ms, "sqsconsumer.lease.renewals"), int64(1), "the 45 s handler was renewed")
		h := hist(t, ms, "sqsconsumer.handler.duration")
		require.Equal(t, uint64(3), h.Count)
		maxDur, defined := h.Max.Value()
		require.True(t, defined)
		require.InDelta(t, 45, maxDur, 1e-6, "the slow handler took 45 s of virtual time")
	})
}

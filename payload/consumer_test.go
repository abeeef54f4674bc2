package payload_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/payload"
	"github.com/sqskit/sqsconsumer/sqstest"
)

type invoice struct {
	ID     string `json:"invoice_id"`
	Amount int    `json:"amount_cents"`
}

// notification wraps message in an SNS envelope as a topic delivers it.
func notification(t *testing.T, message string, attrs map[string]map[string]string) string {
	t.Helper()
	env := map[string]any{
		"Type": "Notification", "MessageId": "5c1d9e0a-3b7f-4e2a-9c8d-1f0e2d3c4b5a", "TopicArn": "arn:aws:sns:us-east-1:210987654321:invoices",
		"Subject": "invoice", "Message": message, "Timestamp": "2026-03-14T12:00:00.000Z", "SignatureVersion": "1",
		"Signature": "c2ln", "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
		"UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
	}
	if attrs != nil {
		env["MessageAttributes"] = attrs
	}
	b, err := json.Marshal(env)
	require.NoError(t, err)
	return string(b)
}

// End to end through a Consumer on sqstest: the typed handler gets the
// invoices out of SNS envelopes; a malformed envelope and an undecodable
// invoice fail permanently (the observer sees IsPermanent) without reaching
// the handler, and are not deleted; the S3 test event is deleted without a
// handler call.
func TestConsumerWithUnwrapAndHandle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.New(t)
		url, err := srv.CreateQueue("invoices", map[string]string{"VisibilityTimeout": "30"})
		require.NoError(t, err)
		send := func(body string) string {
			id, err := srv.Send(url, body)
			require.NoError(t, err)
			return id
		}
		good1 := send(notification(t, `{"invoice_id":"inv-1","amount_cents":100}`, map[string]map[string]string{"tenant": {"Type": "String", "Value": "acme"}}))
		good2 := send(notification(t, `{"invoice_id":"inv-2","amount_cents":250}`, nil))
		badEnvelope := send(`{"Type":"Notification","MessageId":"x","TopicArn":"arn:aws:sns:us-east-1:210987654321:invoices","Timestamp":"2026-03-14T12:00:00Z"}`)
		badInvoice := send(notification(t, `{"invoice_id":42}`, nil))
		testEvent := send(notification(t, `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-03-14T12:00:00.000Z","Bucket":"b","RequestId":"r","HostId":"h"}`, nil))

		var mu sync.Mutex
		got := map[string]invoice{}
		tenants := map[string]string{}
		failed := map[string]error{}
		handler, err := payload.Handle(func(ctx context.Context, m *sqsconsumer.Message, inv invoice) error {
			env := payload.FromContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			got[m.ID] = inv
			if a, ok := m.MessageAttributes["tenant"]; ok {
				tenants[m.ID] = *a.StringValue
			}
			require.Equal(t, "arn:aws:sns:us-east-1:210987654321:invoices", env.SNS.TopicARN)
			require.NotEqual(t, m.Body, env.Original.Body)
			require.Same(t, env.Original.Lease, m.Lease, "the handler's message shares the lease")
			return nil
		})
		require.NoError(t, err)
		unwrap, err := payload.Unwrap(payload.Auto)
		require.NoError(t, err)

		ctx, stop := context.WithCancel(context.Background())
		c, err := sqsconsumer.New(srv.Client(), url, handler,
			sqsconsumer.WithMiddleware(unwrap),
			sqsconsumer.WithObserver(sqsconsumer.ObserverFunc(func(e sqsconsumer.Event) {
				if e.Kind == sqsconsumer.EventFailed {
					mu.Lock()
					failed[e.MessageID] = e.Err
					mu.Unlock()
				}
			})))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(3 * time.Second) // virtual: every message handled once, short of the retry backoff
		stop()
		require.NoError(t, <-done)

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]invoice{good1: {"inv-1", 100}, good2: {"inv-2", 250}}, got)
		require.Equal(t, map[string]string{good1: "acme"}, tenants)
		require.Len(t, failed, 2)
		var ee *payload.EnvelopeError
		require.ErrorAs(t, failed[badEnvelope], &ee)
		require.True(t, sqsconsumer.IsPermanent(failed[badEnvelope]))
		require.Contains(t, ee.Reason, `no "Message" field`)
		var de *payload.DecodeError
		require.ErrorAs(t, failed[badInvoice], &de)
		require.True(t, sqsconsumer.IsPermanent(failed[badInvoice]))
		require.Equal(t, "invoice_id", de.Field)

		for _, id := range []string{good1, good2, testEvent} {
			st, ok := srv.Message(url, id)
			require.True(t, ok)
			require.True(t, st.Deleted, "message %s", id)
			require.Equal(t, 1, st.ReceiveCount)
		}
		for _, id := range []string{badEnvelope, badInvoice} {
			st, ok := srv.Message(url, id)
			require.True(t, ok)
			require.False(t, st.Deleted, "a failed message is never deleted")
		}
	})
}

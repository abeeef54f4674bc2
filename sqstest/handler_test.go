package sqstest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// TestHandlerOverHTTP serves the fake on a real loopback listener, as other processes
// see it. A socket cannot live in a synctest bubble, so this test runs on the wall
// clock with short timeouts (1 s long poll, 5 s ceiling per call).
func TestHandlerOverHTTP(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(nil)
	srv := sqstest.NewServer(sqstest.WithBaseURL("http://" + ts.Listener.Addr().String()))
	ts.Config.Handler = srv.Handler()
	ts.Start()
	defer ts.Close()
	defer srv.Close()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := srv.Client(func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(ts.URL)
		o.HTTPClient = &http.Client{Transport: tr}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()

	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("wire")})
	require.NoError(t, err)
	require.Equal(t, ts.URL+"/123456789012/wire", *q.QueueUrl)
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("ü and 😀")})
	require.NoError(t, err)
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
	require.NoError(t, err, "MD5OfBody validated by the SDK over the wire")
	require.Len(t, out.Messages, 1)
	require.Equal(t, "ü and 😀", *out.Messages[0].Body)

	start := time.Now()
	out, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
	require.NoError(t, err)
	require.Empty(t, out.Messages)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "the long poll waited on the real clock")

	err = srvDelete(ctx, c, *q.QueueUrl, "garbage")
	code, _ := apiError(t, err)
	require.Equal(t, "ReceiptHandleIsInvalid", code)
}

func srvDelete(ctx context.Context, c *sqs.Client, url, h string) error {
	_, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &h})
	return err
}

// Every answer over HTTP carries its Content-Length, as AWS's do, so a client knows
// where the body ends without waiting for more from the connection.
func TestHandlerSetsContentLength(t *testing.T) {
	t.Parallel()
	srv := sqstest.NewServer()
	defer srv.Close()
	url, err := srv.CreateQueue("q", nil)
	require.NoError(t, err)
	_, err = srv.Send(url, strings.Repeat("x", 5000)) // an answer larger than net/http's 2 KiB buffer
	require.NoError(t, err)
	for _, c := range []struct{ action, body string }{
		{"ReceiveMessage", `{"QueueUrl":"` + url + `","MessageSystemAttributeNames":["All"]}`},
		{"ReceiveMessage", `{"QueueUrl":"` + url + `"}`}, // empty
		{"DeleteMessage", `{"QueueUrl":"` + url + `","ReceiptHandle":"garbage"}`},
	} {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
		req.Header.Set("X-Amz-Target", "AmazonSQS."+c.action)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		require.Equal(t, strconv.Itoa(rec.Body.Len()), rec.Header().Get("Content-Length"), "%s %s", c.action, rec.Body)
	}
}

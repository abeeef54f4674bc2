package sqstest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// handlerTransport runs each request through h in memory, as if h served
// endpoint over a socket (the request's Host is endpoint's).
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	if req.Host == "" {
		req.Host = req.URL.Host // as a server reads it from the Host header
	}
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// HostCheckingHandler answers a QueueUrl on another host or port as SQS answers a
// queue that does not exist; the base URL's host and port, and those the request
// was sent to, reach the queue. Handler routes by path whatever the host.
func TestHostCheckingHandler(t *testing.T) {
	t.Parallel()
	srv := sqstest.New(t, sqstest.WithBaseURL("http://127.0.0.1:9324"))
	_, err := srv.CreateQueue("jobs", nil)
	require.NoError(t, err)
	client := func(h http.Handler, endpoint string) *sqs.Client {
		return sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), RetryMaxAttempts: 1,
			HTTPClient:  &http.Client{Transport: handlerTransport{h}},
			Credentials: aws.AnonymousCredentials{}})
	}
	send := func(c *sqs.Client, queueURL string) error {
		_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String("x")})
		return err
	}
	checked := client(srv.HostCheckingHandler(), "http://127.0.0.1:9324")
	for _, u := range []string{
		"http://127.0.0.1:9324/123456789012/jobs",
		"HTTP://127.0.0.1:9324/123456789012/jobs/",
		"jobs", // a bare name is not a URL: routed as ever
	} {
		require.NoError(t, send(checked, u), u)
	}
	for _, u := range []string{
		"http://127.0.0.1:9325/123456789012/jobs",               // another port
		"http://127.0.0.1/123456789012/jobs",                    // port 80
		"http://10.0.0.7:9324/123456789012/jobs",                // another host
		"https://sqs.eu-west-1.amazonaws.com/123456789012/jobs", // AWS
	} {
		err := send(checked, u)
		var dne *sqstypes.QueueDoesNotExist
		require.ErrorAs(t, err, &dne, u)
		code, msg := apiError(t, err)
		require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", code, u)
		require.Contains(t, msg, "The specified queue does not exist.")
		require.Contains(t, msg, "this server answers for 127.0.0.1:9324)", "each address once")
	}
	// The address the client reached the server at counts as the server's.
	viaLocalhost := client(srv.HostCheckingHandler(), "http://localhost:9324")
	require.NoError(t, send(viaLocalhost, "http://localhost:9324/123456789012/jobs"))
	require.Error(t, send(viaLocalhost, "http://localhost:9999/123456789012/jobs"))

	// Handler accepts any host, as it documents.
	require.NoError(t, send(client(srv.Handler(), "http://127.0.0.1:9324"), "http://10.0.0.7:1/123456789012/jobs"))
	require.Len(t, srv.Messages("jobs"), 5, "only the accepted sends arrived")
}

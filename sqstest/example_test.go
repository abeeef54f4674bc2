package sqstest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// A queue, a message, one receive and a delete through the real SDK client, then the
// server's record of what happened. In a test, wrap this in synctest.Test and use
// sqstest.New(t).
func ExampleServer() {
	srv := sqstest.NewServer()
	defer srv.Close()
	c := srv.Client()
	ctx := context.Background()

	url, err := srv.CreateQueue("jobs", map[string]string{"VisibilityTimeout": "60"})
	if err != nil {
		panic(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: ptr("resize photo 42")}); err != nil {
		panic(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil {
		panic(err)
	}
	m := out.Messages[0]
	fmt.Println(*m.Body, "received", m.Attributes["ApproximateReceiveCount"], "time")

	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
		panic(err)
	}
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: ptr("made-up")})
	fmt.Println(err != nil)

	for _, st := range srv.Messages(url) {
		fmt.Printf("%s: receives=%d deleted=%v\n", st.Body, len(st.Receives), st.Deleted)
	}
	fmt.Println(srv.Calls())
	// Output:
	// resize photo 42 received 1 time
	// true
	// resize photo 42: receives=1 deleted=true
	// map[DeleteMessage:2 ReceiveMessage:1 SendMessage:1]
}

func ptr[T any](v T) *T { return &v }

// An SDK client reaching the server over a real listener, as another process reaches
// cmd/sqstest: its HTTP client wraps the transport with RebufferingTransport so that
// no receive's answer is lost to the race described under "Over a real socket".
func ExampleRebufferingTransport() {
	ts := httptest.NewUnstartedServer(nil) // 127.0.0.1, a free port
	srv := sqstest.NewServer(sqstest.WithBaseURL("http://" + ts.Listener.Addr().String()))
	ts.Config.Handler = srv.Handler()
	ts.Start()
	defer ts.Close()
	defer srv.Close()

	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ts.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: sqstest.RebufferingTransport(tr)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	url, err := srv.CreateQueue("jobs", nil)
	if err != nil {
		panic(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("over the wire")}); err != nil {
		panic(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url})
	if err != nil {
		panic(err)
	}
	fmt.Println(*out.Messages[0].Body)
	// Output:
	// over the wire
}

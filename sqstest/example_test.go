package sqstest_test

import (
	"context"
	"fmt"

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

package payload_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/payload"
	"github.com/sqskit/sqsconsumer/sqstest"
)

type Order struct {
	ID     string `json:"order_id"`
	Amount int64  `json:"amount_cents"`
}

// A queue subscribed to an SNS topic: Unwrap takes the SNS envelope off
// and Handle decodes the published message into an Order.
func Example() {
	srv := sqstest.NewServer()
	defer srv.Close()
	queueURL, _ := srv.CreateQueue("orders", nil)
	// What SNS puts in the queue for a message published to a topic
	// (signature fields left out).
	srv.Send(queueURL, `{"Type":"Notification","MessageId":"8e1f4b2a-0c3d-4e5f-a6b7-c8d9e0f1a2b3",`+
		`"TopicArn":"arn:aws:sns:us-east-1:123456789012:orders","Subject":"new order",`+
		`"Message":"{\"order_id\":\"o-1001\",\"amount_cents\":2599}","Timestamp":"2026-03-14T12:00:00.000Z"}`)

	ctx, stop := context.WithCancel(context.Background())
	handler, err := payload.Handle(func(ctx context.Context, m *sqsconsumer.Message, o Order) error {
		sns := payload.FromContext(ctx).SNS
		fmt.Printf("order %s, %d cents, from %s (%q)\n", o.ID, o.Amount, sns.TopicARN, sns.Subject)
		stop()
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	unwrap, err := payload.Unwrap(payload.SNS)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := sqsconsumer.New(srv.Client(), queueURL, handler,
		sqsconsumer.WithMiddleware(unwrap),
		sqsconsumer.WithWaitTime(time.Second)) // a short long poll: the example stops soon after its message

	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output: order o-1001, 2599 cents, from arn:aws:sns:us-east-1:123456789012:orders ("new order")
}

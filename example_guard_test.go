package sqsconsumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// A message that can never be handled goes to the dead-letter queue at
// once, with the reason attached, instead of being retried until the
// redrive policy gives up on it.
func ExamplePermanent() {
	srv := sqstest.NewServer()
	defer srv.Close()
	dlqURL, _ := srv.CreateQueue("orders-dlq", nil)
	queueURL, _ := srv.CreateQueue("orders", map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:orders-dlq","maxReceiveCount":5}`,
	})
	srv.Send(queueURL, "{not json")

	ctx, stop := context.WithCancel(context.Background())
	handler := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		defer stop() // one message is enough here
		var order struct{ ID string }
		if err := json.Unmarshal([]byte(m.Body), &order); err != nil {
			return sqsconsumer.Permanent(fmt.Errorf("decoding the order: %w", err))
		}
		return nil
	})
	c, err := sqsconsumer.New(srv.Client(), queueURL, handler,
		sqsconsumer.WithVisibilityTimeout(30*time.Second), sqsconsumer.WithWaitTime(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Run(ctx); err != nil {
		fmt.Println(err)
	}

	fmt.Println("deleted from orders:", srv.Messages(queueURL)[0].Deleted)
	out, _ := srv.Client().ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(dlqURL), MessageAttributeNames: []string{"All"},
	})
	for _, m := range out.Messages {
		fmt.Println("in orders-dlq:", aws.ToString(m.Body))
		fmt.Println("reason:", aws.ToString(m.MessageAttributes["sqsconsumer.error"].StringValue))
	}
	// Output:
	// deleted from orders: true
	// in orders-dlq: {not json
	// reason: permanent: decoding the order: invalid character 'n' looking for beginning of object key string
}

// A worker for an orchestrator: a breaker that stops receiving while the
// database is down (checked by Probe, so the outage costs no receive
// counts), and a health check that reports a stall.
func ExampleWithBreaker() {
	var (
		client   *sqs.Client // sqs.NewFromConfig(cfg)
		queueURL string
		handler  sqsconsumer.Handler
		pingDB   func(context.Context) error
	)
	c, err := sqsconsumer.New(client, queueURL, handler,
		sqsconsumer.WithBreaker(sqsconsumer.Breaker{
			Failures: 10,     // handler failures in a row
			Probe:    pingDB, // closes the breaker when the database answers
		}),
		sqsconsumer.WithHealthLimits(5*time.Minute, 0),
	)
	if err != nil {
		return
	}
	http.Handle("/healthz", c.HealthHandler()) // a Kubernetes livenessProbe, an ECS health check
	go http.ListenAndServe(":8080", nil)
	_ = c.Run(context.Background())
}

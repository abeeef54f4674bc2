package fleet_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/fleet"
)

// Three queues in one process: at most 64 handlers at once between them,
// orders getting three times the slot time of emails under load, and the
// audit queue only what the other two leave.
func Example() {
	var client sqsconsumer.Client // an *sqs.Client
	var ctx context.Context       // cancelled on SIGTERM
	handle := func(context.Context, *sqsconsumer.Message) error { return nil }

	orders, err := sqsconsumer.New(client, "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
		sqsconsumer.HandlerFunc(handle), sqsconsumer.WithConcurrency(64), sqsconsumer.WithRateLimit(200, 20))
	if err != nil {
		log.Fatal(err)
	}
	emails, err := sqsconsumer.New(client, "https://sqs.us-east-1.amazonaws.com/123456789012/emails",
		sqsconsumer.HandlerFunc(handle), sqsconsumer.WithConcurrency(32), sqsconsumer.WithVisibilityTimeout(2*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	audit, err := sqsconsumer.New(client, "https://sqs.us-east-1.amazonaws.com/123456789012/audit",
		sqsconsumer.HandlerFunc(handle), sqsconsumer.WithConcurrency(8))
	if err != nil {
		log.Fatal(err)
	}

	f, err := fleet.New(64)
	if err != nil {
		log.Fatal(err)
	}
	for _, add := range []error{
		f.Add(orders, fleet.WithWeight(3)),
		f.Add(emails),
		f.Add(audit, fleet.WithPriority(-1)),
	} {
		if add != nil {
			log.Fatal(add)
		}
	}
	// emails.Pause() and emails.Resume() at any time, from any goroutine.
	// 200 while every queue is healthy, else 503 naming the queue:
	http.Handle("/healthz", f.HealthHandler())
	if err := f.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

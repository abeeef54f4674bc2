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

// A platform SDK whose Consume is called once per queue, at different
// times: one budget, and one /healthz, /readyz and /scaling for the whole
// process, with each queue in them while its Consume runs.
func ExampleFleet_Serve() {
	var client sqsconsumer.Client // an *sqs.Client
	var ctx context.Context       // cancelled on SIGTERM

	process, err := fleet.New(64) // one for the process
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/healthz", process.HealthHandler())
	http.Handle("/readyz", process.ReadyHandler())
	http.Handle("/scaling", process.ScalingHandler())

	// Consume blocks until ctx is cancelled or the queue fails; the queue
	// leaves the budget when it returns, and the view if it returned nil.
	consume := func(ctx context.Context, queueURL string, h sqsconsumer.Handler, opts ...sqsconsumer.Option) error {
		c, err := sqsconsumer.New(client, queueURL, h, opts...)
		if err != nil {
			return err
		}
		return process.Serve(ctx, c)
	}

	handle := sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil })
	go func() {
		if err := consume(ctx, "https://sqs.us-east-1.amazonaws.com/123456789012/orders", handle, sqsconsumer.WithConcurrency(32)); err != nil {
			log.Print(err) // still listed as failed: /healthz answers 503 until process.Remove
		}
	}()
	// ... later, from anywhere in the process:
	go func() {
		_ = consume(ctx, "https://sqs.us-east-1.amazonaws.com/123456789012/emails", handle)
	}()

	// A Consumer that runs on its own (its own slots) can join the view
	// only: process.Watch(c) before or after c.Run(ctx).
}

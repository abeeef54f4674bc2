package sqsconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// A platform's company defaults are one value; a team passes it first and
// overrides what it must after it. Settings tells what the Consumer ended
// up with, for a startup line or a policy check.
func ExampleOptions() {
	srv := sqstest.NewServer()
	defer srv.Close()
	queueURL, _ := srv.CreateQueue("orders", nil)

	// The platform's SDK.
	defaults := sqsconsumer.Options(
		sqsconsumer.WithConcurrency(20),
		sqsconsumer.WithRequireDeadLetterQueue(),
		sqsconsumer.LeaseOptions(sqsconsumer.WithVisibilityTimeout(time.Minute)),
	)

	// A team: its own concurrency, the rest from the platform.
	c, err := sqsconsumer.New(srv.Client(), queueURL,
		sqsconsumer.HandlerFunc(func(context.Context, *sqsconsumer.Message) error { return nil }),
		defaults, sqsconsumer.WithConcurrency(50))
	if err != nil {
		fmt.Println(err)
		return
	}
	s := c.Settings()
	fmt.Println("concurrency:", s.Concurrency)
	fmt.Println("visibility:", s.VisibilityTimeout, "heartbeat:", s.HeartbeatInterval)
	fmt.Println("require DLQ:", s.RequireDeadLetterQueue, "known at Run:", s.Pending)

	// The queue has no dead-letter queue: Run refuses it.
	err = c.Run(context.Background())
	fmt.Println(errors.Is(err, sqsconsumer.ErrInvalidOption))
	// Output:
	// concurrency: 50
	// visibility: 1m0s heartbeat: 20s
	// require DLQ: true known at Run: [fifo dead_letter_queue dead_letter_source]
	// true
}

// Logger gives a handler the Consumer's logger with its message's fields;
// a PanicPolicy decides what a panic becomes and how it is logged.
func ExampleLogger() {
	srv := sqstest.NewServer()
	defer srv.Close()
	queueURL, _ := srv.CreateQueue("orders", nil)
	srv.Send(queueURL, "order-1")

	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "message_id" || a.Key == "queue_url" || a.Key == "settings" {
				return slog.Attr{} // dropped: they change from run to run
			}
			return a
		},
		Level: slog.LevelWarn,
	}))
	ctx, stop := context.WithCancel(context.Background())
	handler := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		defer stop()
		sqsconsumer.Logger(ctx).Warn("parsing", "body", m.Body)
		panic("unexpected field")
	})
	policy := func(ctx context.Context, m *sqsconsumer.Message, p *sqsconsumer.PanicError) error {
		sqsconsumer.Logger(ctx).Error("platform: handler panicked", "panic", p.Value)
		return sqsconsumer.RetryAfter(p, time.Minute)
	}
	c, err := sqsconsumer.New(srv.Client(), queueURL, handler,
		sqsconsumer.WithLogger(log), sqsconsumer.WithPanicPolicy(policy),
		sqsconsumer.WithVisibilityTimeout(30*time.Second), sqsconsumer.WithShutdownTimeout(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = c.Run(ctx)
	// Output:
	// level=WARN msg=parsing receive_count=1 body=order-1
	// level=ERROR msg="platform: handler panicked" receive_count=1 panic="unexpected field"
	// level=WARN msg="sqsconsumer: handler failed; message released for a retry" receive_count=1 error="sqsconsumer: handler panicked: unexpected field (retry after 1m0s)" retry_after=1m0s
}

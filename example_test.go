package sqsconsumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// A Consumer reads a queue (here an in-memory one from sqstest), runs the
// handler for each message under a lease, and deletes each message once its
// handler returned nil. Cancelling Run's context shuts it down cleanly.
func Example() {
	srv := sqstest.NewServer()
	defer srv.Close()
	queueURL, _ := srv.CreateQueue("orders", nil)
	for _, body := range []string{"order-1", "order-2", "order-3"} {
		srv.Send(queueURL, body)
	}

	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var handled []string
	handler := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		// ctx is cancelled, with context.Cause telling why, if the lease is
		// lost or nears the 12-hour ceiling.
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, m.Body)
		if len(handled) == 3 {
			stop() // done: shut the consumer down
		}
		return nil // success: the message is deleted
	})

	c, err := sqsconsumer.New(srv.Client(), queueURL, handler,
		sqsconsumer.WithVisibilityTimeout(30*time.Second), // renewed every 10 s while a handler runs
		sqsconsumer.WithConcurrency(4),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Run(ctx); err != nil { // blocks until shut down
		fmt.Println(err)
	}

	slices.Sort(handled)
	fmt.Println("handled:", handled)
	deleted := 0
	for _, m := range srv.Messages(queueURL) {
		if m.Deleted {
			deleted++
		}
	}
	fmt.Println("deleted:", deleted)
	// Output:
	// handled: [order-1 order-2 order-3]
	// deleted: 3
}

// A bad option is an error that names it; New never panics on input.
func ExampleNew_invalidOption() {
	_, err := sqsconsumer.New(nil, "", nil, sqsconsumer.WithBatchSize(25))
	fmt.Println(err)
	// Output:
	// sqsconsumer: invalid option: client is nil
	// sqsconsumer: invalid option: queue URL is empty
	// sqsconsumer: invalid option: handler is nil
	// sqsconsumer: invalid option: WithBatchSize(25): must be from 1 to 10
}

package sqsconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/sqstest"
)

// A batch handler gets several messages at once (here up to 5, gathered
// for at most 100 ms) and reports which failed; each message is still
// leased, deleted or retried on its own.
func ExampleBatch() {
	srv := sqstest.NewServer()
	defer srv.Close()
	queueURL, _ := srv.CreateQueue("orders", nil)
	for _, body := range []string{"order-1", "order-2", "order-3", "order-4", "order-5"} {
		srv.Send(queueURL, body)
	}

	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	handled := 0
	h, err := sqsconsumer.Batch(func(ctx context.Context, msgs []*sqsconsumer.Message) error {
		// One bulk write for the whole batch would go here.
		failed := sqsconsumer.BatchFailures{}
		for _, m := range msgs {
			if m.Body == "order-3" && m.ReceiveCount == 1 {
				// Only this message is retried, at once.
				failed[m.ID] = sqsconsumer.RetryAfter(errors.New("inventory busy"), 0)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("batch of %d, %d failed\n", len(msgs), len(failed))
		if handled += len(msgs) - len(failed); handled == 5 {
			stop()
		}
		return failed // nil or empty: all succeeded
	}, 5, 100*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := sqsconsumer.New(srv.Client(), queueURL, h,
		sqsconsumer.WithVisibilityTimeout(30*time.Second),
		sqsconsumer.WithConcurrency(5), // each message of a batch holds a handler slot
		sqsconsumer.WithWaitTime(time.Second),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Run(ctx); err != nil {
		fmt.Println(err)
	}
	deleted := 0
	for _, m := range srv.Messages(queueURL) {
		if m.Deleted {
			deleted++
		}
	}
	fmt.Println("deleted:", deleted)
	// Output:
	// batch of 5, 1 failed
	// batch of 1, 0 failed
	// deleted: 5
}

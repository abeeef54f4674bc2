package sqsconsumer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) sqsconsumer.IdempotencyStore {
		return sqsconsumer.NewMemoryStore()
	}, storetest.WithSynctest())
}

func BenchmarkMemoryStore(b *testing.B) {
	storetest.RunBenchmarks(b, sqsconsumer.NewMemoryStore())
}

// SQS delivered the invoice message twice, and a second message about the
// same invoice arrived too: the invoice is sent once.
func ExampleNewIdempotent() {
	ctx := context.Background()
	store := sqsconsumer.NewMemoryStore() // Redis, PostgreSQL or DynamoDB when several processes consume
	send := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		fmt.Println("sending invoice", m.Body)
		return sqsconsumer.SetIdempotencyResult(ctx, []byte("mail-4711"))
	})
	idempotent, err := sqsconsumer.NewIdempotent(store,
		sqsconsumer.WithIdempotencyKey(func(m *sqsconsumer.Message) (string, error) { return "invoice/" + m.Body, nil }),
		sqsconsumer.WithDuplicateHook(func(ctx context.Context, m *sqsconsumer.Message, result []byte) error {
			fmt.Printf("message %s: invoice %s already sent as %s\n", m.ID, m.Body, result)
			return nil
		}),
	)
	if err != nil {
		panic(err) // an invalid option
	}
	h := idempotent(send)
	// A Consumer does this with sqsconsumer.WithMiddleware(idempotent).

	for _, m := range []*sqsconsumer.Message{
		{ID: "m-1", Body: "inv_48812"},
		{ID: "m-1", Body: "inv_48812"}, // redelivered
		{ID: "m-2", Body: "inv_48812"}, // sent twice by the producer
	} {
		if err := h.HandleMessage(ctx, m); err != nil {
			fmt.Println("error:", err)
		}
	}
	// Output:
	// sending invoice inv_48812
	// message m-1: invoice inv_48812 already sent as mail-4711
	// message m-2: invoice inv_48812 already sent as mail-4711
}

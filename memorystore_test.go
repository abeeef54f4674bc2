package sqsconsumer_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) sqsconsumer.IdempotencyStore {
		return sqsconsumer.NewMemoryStore()
	}, storetest.WithSynctest())
}

// Expired records are deleted by the sweep that runs, at most once a
// minute, inside Claim and Complete.
func TestMemoryStoreSweepsExpiredRecords(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := sqsconsumer.NewMemoryStore()
		for _, k := range []string{"a", "b", "c"} {
			_, err := s.Claim(ctx, k, "t", time.Now().Add(10*time.Second), "")
			require.NoError(t, err)
		}
		_, err := s.Claim(ctx, "done", "t", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, "done", "t", nil, 30*time.Second))
		_, err = s.Claim(ctx, "long", "t", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
		require.Equal(t, 5, s.Len())

		time.Sleep(45 * time.Second) // all but "long" expired; no sweep is due yet
		require.Equal(t, 5, s.Len())
		time.Sleep(20 * time.Second) // a minute since the last sweep
		_, err = s.Claim(ctx, "new", "t", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
		require.Equal(t, 2, s.Len(), "got %d records, want long and new", s.Len())
	})
}

func BenchmarkMemoryStore(b *testing.B) {
	storetest.RunBenchmarks(b, sqsconsumer.NewMemoryStore())
}

// SQS delivered the invoice message twice, and a second message about the
// same invoice arrived too: the invoice is sent once.
func ExampleIdempotent() {
	ctx := context.Background()
	store := sqsconsumer.NewMemoryStore() // Redis, PostgreSQL or DynamoDB when several processes consume
	send := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		fmt.Println("sending invoice", m.Body)
		return sqsconsumer.SetIdempotencyResult(ctx, []byte("mail-4711"))
	})
	h := sqsconsumer.Idempotent(store,
		sqsconsumer.WithIdempotencyKey(func(m *sqsconsumer.Message) (string, error) { return "invoice/" + m.Body, nil }),
		sqsconsumer.WithDuplicateHook(func(ctx context.Context, m *sqsconsumer.Message, result []byte) error {
			fmt.Printf("message %s: invoice %s already sent as %s\n", m.ID, m.Body, result)
			return nil
		}),
	)(send)
	// A Consumer does this with sqsconsumer.WithMiddleware(sqsconsumer.Idempotent(store, ...)).

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

package pgstore_test

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/pgstore"
)

// A handler that writes an invoice row and records the message as handled
// in the same transaction: both commit, or neither does.
func ExampleStore_CompleteInTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool)
	if err != nil {
		panic(err)
	}
	if err := store.CreateSchema(ctx); err != nil { // or run store.Schema() in a migration
		panic(err)
	}

	handler := sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO invoices (id, body) VALUES ($1, $2)", m.ID, m.Body); err != nil {
				return err
			}
			return store.CompleteInTx(ctx, tx, nil) // commits with the invoice, or fails tx
		})
	})
	idempotent, err := sqsconsumer.NewIdempotent(store)
	if err != nil {
		panic(err)
	}
	_ = idempotent(handler) // or give idempotent to sqsconsumer.New with WithMiddleware
}

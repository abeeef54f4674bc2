package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/pgstore"
	"github.com/sqskit/sqsconsumer/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup connects to the database named by SQSCONSUMER_POSTGRES_URL (or
// skips), and creates a store on a table of its own, dropped at the end.
func setup(t testing.TB) (*pgxpool.Pool, *pgstore.Store, string) {
	t.Helper()
	url := os.Getenv("SQSCONSUMER_POSTGRES_URL")
	if url == "" {
		t.Skip("SQSCONSUMER_POSTGRES_URL is not set; run `source .ci/setup.d/30-postgres.sh` (or bash .ci/run), or point it at a scratch database, e.g. postgres://postgres@127.0.0.1:5432/sqsconsumer_test?sslmode=disable")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [5]byte
	_, _ = rand.Read(b[:])
	table := "idem_test_" + hex.EncodeToString(b[:])
	s, err := pgstore.New(pool, pgstore.WithTable(table))
	require.NoError(t, err)
	require.NoError(t, s.CreateSchema(ctx), "PostgreSQL at %s", url)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
	})
	return pool, s, table
}

// The suite's expiry cases wait on the real clock: the store keeps time by
// the server's clock_timestamp(). A 500 ms tick keeps the suite short
// while staying far above a loopback round trip.
func TestConformance(t *testing.T) {
	_, s, _ := setup(t)
	storetest.Run(t, func(t *testing.T) sqsconsumer.IdempotencyStore { return s }, storetest.WithTick(500*time.Millisecond))
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := pgstore.New(nil)
	require.ErrorContains(t, err, "db is nil")
	var db pgstore.DB = (*pgxpool.Pool)(nil)
	for _, name := range []string{"", "a..b", "a.b.c", ".x"} {
		_, err := pgstore.New(db, pgstore.WithTable(name))
		require.ErrorContains(t, err, "WithTable", "table %q", name)
	}
	s, err := pgstore.New(db, pgstore.WithTable(`app.Idem"x`))
	require.NoError(t, err)
	require.Contains(t, s.Schema(), `CREATE TABLE IF NOT EXISTS "app"."Idem""x" (`)
	require.Contains(t, s.Schema(), `CREATE INDEX IF NOT EXISTS "Idem""x_expires_at_idx" ON "app"."Idem""x" (expires_at);`)
}

func TestCreateSchemaIsIdempotentAndDeleteExpired(t *testing.T) {
	pool, s, table := setup(t)
	ctx := t.Context()
	require.NoError(t, s.CreateSchema(ctx), "a second CreateSchema is a no-op")
	_, err := s.Claim(ctx, "live", "t", time.Now().Add(time.Hour), "")
	require.NoError(t, err)
	for _, k := range []string{"old1", "old2"} {
		_, err := s.Claim(ctx, k, "t", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
	}
	forceExpire(t, pool, table, "old1", "old2")
	n, err := s.DeleteExpired(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	var left int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&left))
	require.Equal(t, 1, left)
}

// forceExpire ends the claims on keys now, as if their time had run out
// (the suite tests real expiry; here it would only slow the test down).
func forceExpire(t *testing.T, pool *pgxpool.Pool, table string, keys ...string) {
	t.Helper()
	_, err := pool.Exec(t.Context(), "UPDATE "+pgx.Identifier{table}.Sanitize()+
		" SET expires_at = clock_timestamp() - interval '1 second' WHERE key = ANY($1)", keys)
	require.NoError(t, err)
}

// invoices is the handler's business table in the in-transaction tests.
func invoices(t *testing.T, pool *pgxpool.Pool) (table string, count func() int) {
	t.Helper()
	table = pgx.Identifier{"invoices_" + randomHex()}.Sanitize()
	_, err := pool.Exec(t.Context(), "CREATE TABLE "+table+" (id text PRIMARY KEY, message_id text NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return table, func() int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
}

func randomHex() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// The handler writes its effect and the completion in one transaction:
// duplicates are skipped; a rolled-back transaction leaves the key
// unclaimed, so the retry runs.
func TestCompleteInTx(t *testing.T) {
	pool, s, _ := setup(t)
	ctx := t.Context()
	inv, count := invoices(t, pool)
	failCommit := true
	h := idempotent(t, s)(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+inv+" (id, message_id) VALUES ($1, $2)", m.Body, m.ID); err != nil {
				return err
			}
			if err := s.CompleteInTx(ctx, tx, []byte("pdf:"+m.Body)); err != nil {
				return err
			}
			if failCommit {
				failCommit = false
				return errors.New("the e-mail service refused; roll back") // BeginFunc rolls back
			}
			return nil
		})
	}))
	m := &sqsconsumer.Message{ID: "msg-1", Body: "inv_48812"}

	err := h.HandleMessage(ctx, m)
	require.ErrorContains(t, err, "roll back")
	require.Equal(t, 0, count(), "the rolled-back transaction left no invoice")
	res, err := s.Claim(ctx, m.ID, "probe", time.Now().Add(time.Minute), "")
	require.NoError(t, err)
	require.Equal(t, sqsconsumer.ClaimAcquired, res.Status, "and left the key unclaimed")
	require.NoError(t, s.Release(ctx, m.ID, "probe"))

	require.NoError(t, h.HandleMessage(ctx, m), "the retry runs and commits")
	require.Equal(t, 1, count())
	require.NoError(t, h.HandleMessage(ctx, m), "a duplicate is skipped")
	require.Equal(t, 1, count())
	res, err = s.Claim(ctx, m.ID, "probe", time.Now().Add(time.Minute), "")
	require.NoError(t, err)
	require.Equal(t, sqsconsumer.ClaimCompleted, res.Status)
	require.Equal(t, []byte("pdf:inv_48812"), res.Result, "the in-transaction result, not overwritten by the middleware")

	require.ErrorIs(t, s.CompleteInTx(ctx, nil, nil), sqsconsumer.ErrNotIdempotent)
}

// A worker whose claim expired and was taken over cannot commit its
// effect: CompleteInTx fails and so does its transaction, even when the
// handler ignores the error and commits.
func TestCompleteInTxAfterTakeover(t *testing.T) {
	pool, s, table := setup(t)
	ctx := t.Context()
	inv, count := invoices(t, pool)
	var completeErr, commitErr error
	h := idempotent(t, s)(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = tx.Exec(ctx, "INSERT INTO "+inv+" (id, message_id) VALUES ($1, $2)", m.Body, m.ID)
		require.NoError(t, err)

		// Meanwhile this worker's claim runs out (its lease lapsed) and
		// another worker takes the key over.
		forceExpire(t, pool, table, m.ID)
		res, err := s.Claim(ctx, m.ID, "worker-B", time.Now().Add(time.Minute), "")
		require.NoError(t, err)
		require.Equal(t, sqsconsumer.ClaimAcquired, res.Status)

		completeErr = s.CompleteInTx(ctx, tx, nil)
		commitErr = tx.Commit(ctx) // a careless handler commits anyway
		return commitErr
	}))
	err := h.HandleMessage(ctx, &sqsconsumer.Message{ID: "msg-1", Body: "inv_1"})
	require.ErrorIs(t, completeErr, sqsconsumer.ErrClaimLost)
	require.ErrorIs(t, commitErr, pgx.ErrTxCommitRollback, "the commit turned into a rollback")
	require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
	require.Equal(t, 0, count(), "the business row rolled back with it")
	res, err := s.Claim(ctx, "msg-1", "probe", time.Now().Add(time.Minute), "")
	require.NoError(t, err)
	require.Equal(t, sqsconsumer.ClaimInProgress, res.Status, "worker B's claim is untouched")
	require.NoError(t, s.Complete(ctx, "msg-1", "worker-B", nil, time.Hour))
}

// While a transaction that called CompleteInTx is open, a worker trying to
// take the key over (its claim time having run out) waits for it, then
// sees the outcome: completed after a commit, free after a rollback. The
// claim lasts one real second (WithClaimTTL's minimum), hence the short
// sleep: expiry here is the server's clock.
func TestCompleteInTxHoldsTheKey(t *testing.T) {
	pool, s, _ := setup(t)
	for _, commit := range []bool{true, false} {
		ctx := t.Context()
		key := "msg-" + randomHex()
		h := idempotent(t, s, sqsconsumer.WithClaimTTL(time.Second))(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, s.CompleteInTx(ctx, tx, nil))
			time.Sleep(1200 * time.Millisecond) // the claim's time runs out while tx is open

			type claimed struct {
				res sqsconsumer.ClaimResult
				err error
			}
			got := make(chan claimed, 1)
			go func() {
				res, err := s.Claim(context.Background(), m.ID, "worker-B", time.Now().Add(time.Minute), "")
				got <- claimed{res, err}
			}()
			select {
			case c := <-got:
				t.Errorf("Claim returned %v, %v while the transaction was open", c.res.Status, c.err)
			case <-time.After(200 * time.Millisecond):
			}
			if commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			c := <-got
			require.NoError(t, c.err)
			if commit {
				require.Equal(t, sqsconsumer.ClaimCompleted, c.res.Status, "after the commit")
				return nil
			}
			require.Equal(t, sqsconsumer.ClaimAcquired, c.res.Status, "after the rollback the expired claim is free")
			return errors.New("rolled back")
		}))
		err := h.HandleMessage(ctx, &sqsconsumer.Message{ID: key})
		if commit {
			require.NoError(t, err)
		} else {
			require.ErrorContains(t, err, "rolled back")
		}
	}
}

func BenchmarkPgStore(b *testing.B) {
	_, s, _ := setup(b)
	storetest.RunBenchmarks(b, s)
}

// idempotent is sqsconsumer.NewIdempotent for options known to be valid.
func idempotent(t *testing.T, s sqsconsumer.IdempotencyStore, opts ...sqsconsumer.IdempotencyOption) sqsconsumer.Middleware {
	t.Helper()
	mw, err := sqsconsumer.NewIdempotent(s, opts...)
	require.NoError(t, err)
	return mw
}

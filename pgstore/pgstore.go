// Package pgstore is an sqsconsumer.IdempotencyStore in PostgreSQL, with
// one thing the other stores cannot offer: a handler whose effects are rows
// in the same database can record the completion inside its own
// transaction (Store.CompleteInTx), so the effect and the idempotency
// record commit or roll back together, and a worker whose claim was taken
// over cannot commit a second effect.
//
// # Schema
//
// One table (DefaultTable unless WithTable says otherwise), created by
// Store.CreateSchema when asked and never implicitly; Store.Schema returns
// the same DDL for a migration tool:
//
//	CREATE TABLE IF NOT EXISTS sqsconsumer_idempotency (
//	    key          text        PRIMARY KEY,  -- the idempotency key
//	    token        text        NOT NULL,     -- fencing token of the claim or completion
//	    status       text        NOT NULL CHECK (status IN ('in_progress', 'completed')),
//	    payload_hash text        NOT NULL DEFAULT '',  -- '' when not validated
//	    result       bytea,                    -- completions only; NULL when none
//	    expires_at   timestamptz NOT NULL      -- end of the claim or of the completion
//	);
//	CREATE INDEX IF NOT EXISTS sqsconsumer_idempotency_expires_at_idx
//	    ON sqsconsumer_idempotency (expires_at);
//
// A row whose expires_at has passed counts as absent; the next Claim of
// its key takes it over. Rows of keys never seen again stay until
// Store.DeleteExpired deletes them: run it from time to time (a cron job,
// a ticker in the service).
//
// # Time and concurrency
//
// Expiry follows the database server's clock (clock_timestamp(), so a long
// transaction does not stretch it): the store sends durations, never the
// caller's absolute times. Claims are one INSERT ... ON CONFLICT DO UPDATE
// whose update only happens when the existing row has expired, so racing
// claims have one winner; Extend and Complete are single UPDATEs that check
// the token, the status and the expiry in their WHERE clause, so they
// cannot overwrite a newer owner's row.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqskit/sqsconsumer"
)

// DefaultTable is the table the store uses unless WithTable says otherwise.
const DefaultTable = "sqsconsumer_idempotency"

// maxClaimAttempts bounds the retries of a Claim that raced with a
// concurrent insert or expiry it could not see (see claimSQL).
const maxClaimAttempts = 5

// DB is what the Store needs from PostgreSQL. A *pgxpool.Pool satisfies it
// and is what to pass: the store runs statements from many goroutines at
// once. (A *pgx.Conn also satisfies it but is not safe for concurrent use.)
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is an sqsconsumer.IdempotencyStore in a PostgreSQL table. Make one
// with New; create the table with CreateSchema or a migration (Schema).
// Safe for concurrent use, from many processes at once.
type Store struct {
	db        DB
	table     string // quoted, possibly schema-qualified
	indexName string // quoted, unqualified

	claimSQL, extendSQL, completeSQL, releaseSQL, deleteExpiredSQL string
}

var _ sqsconsumer.IdempotencyStore = (*Store)(nil)

// Option configures New.
type Option func(*Store) error

// WithTable sets the table, "name" or "schema.name" (each part an
// identifier, quoted as given: case matters). Default DefaultTable in the
// connection's search_path.
func WithTable(name string) Option {
	return func(s *Store) error {
		parts := strings.Split(name, ".")
		if len(parts) > 2 {
			return fmt.Errorf("pgstore: WithTable(%q): want name or schema.name", name)
		}
		for _, p := range parts {
			if p == "" {
				return fmt.Errorf("pgstore: WithTable(%q): empty identifier", name)
			}
		}
		s.table = pgx.Identifier(parts).Sanitize()
		s.indexName = pgx.Identifier{parts[len(parts)-1] + "_expires_at_idx"}.Sanitize()
		return nil
	}
}

// New returns a Store that keeps its records in a table of db. It does not
// touch the database (see CreateSchema). It returns an error for a nil db
// or a bad option.
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("pgstore: New: db is nil")
	}
	s := &Store{db: db}
	if err := WithTable(DefaultTable)(s); err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.prepareSQL()
	return s, nil
}

// Schema returns the DDL CreateSchema runs, for a migration tool.
func (s *Store) Schema() string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    key          text        PRIMARY KEY,
    token        text        NOT NULL,
    status       text        NOT NULL CHECK (status IN ('in_progress', 'completed')),
    payload_hash text        NOT NULL DEFAULT '',
    result       bytea,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (expires_at);
`, s.table, s.indexName)
}

// CreateSchema creates the store's table and index if they do not exist.
// The schema named by WithTable must exist.
func (s *Store) CreateSchema(ctx context.Context) error {
	if _, err := s.db.Exec(ctx, s.Schema()); err != nil {
		return fmt.Errorf("pgstore: CreateSchema: %w", err)
	}
	return nil
}

// DeleteExpired deletes every expired row and returns how many it deleted.
// Expired rows already count as absent; this only reclaims their space.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	tag, err := s.db.Exec(ctx, s.deleteExpiredSQL)
	if err != nil {
		return 0, fmt.Errorf("pgstore: DeleteExpired: %w", err)
	}
	return tag.RowsAffected(), nil
}

func (s *Store) prepareSQL() {
	t := s.table
	// The INSERT takes an absent or expired key; when the key is live it
	// updates nothing, and the second SELECT reports the live row. That
	// SELECT sees the snapshot taken when the statement started, so a row
	// inserted (or one that expired) concurrently can leave both parts
	// empty or the row reported expired: Claim then tries again.
	s.claimSQL = fmt.Sprintf(`WITH ins AS (
    INSERT INTO %[1]s AS t (key, token, status, payload_hash, result, expires_at)
    VALUES ($1, $2, 'in_progress', $3, NULL, clock_timestamp() + $4::interval)
    ON CONFLICT (key) DO UPDATE
        SET token = excluded.token, status = excluded.status, payload_hash = excluded.payload_hash,
            result = NULL, expires_at = excluded.expires_at
        WHERE t.expires_at <= clock_timestamp()
    RETURNING t.expires_at
)
SELECT true, 'in_progress', '', NULL::bytea, expires_at, true FROM ins
UNION ALL
SELECT false, status, payload_hash, result, expires_at, expires_at > clock_timestamp()
FROM %[1]s WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM ins)`, t)
	s.extendSQL = fmt.Sprintf(`UPDATE %[1]s SET expires_at = clock_timestamp() + $3::interval
WHERE key = $1 AND token = $2 AND status = 'in_progress' AND expires_at > clock_timestamp()`, t)
	// True when token's live claim became a completion now, or token had
	// completed the key already (the second EXISTS reads the snapshot from
	// before the UPDATE, so it only sees an earlier completion).
	s.completeSQL = fmt.Sprintf(`WITH done AS (
    UPDATE %[1]s SET status = 'completed', result = $3, expires_at = clock_timestamp() + $4::interval
    WHERE key = $1 AND token = $2 AND status = 'in_progress' AND expires_at > clock_timestamp()
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM done)
    OR EXISTS (SELECT 1 FROM %[1]s WHERE key = $1 AND token = $2 AND status = 'completed'
               AND expires_at > clock_timestamp())`, t)
	s.releaseSQL = fmt.Sprintf(`DELETE FROM %[1]s WHERE key = $1 AND token = $2 AND status = 'in_progress'`, t)
	s.deleteExpiredSQL = fmt.Sprintf(`DELETE FROM %[1]s WHERE expires_at <= clock_timestamp()`, t)
}

// abortSQL fails the transaction it runs in, so that its COMMIT turns into
// a ROLLBACK: the only way to stop a caller that ignores CompleteInTx's
// error from committing.
const abortSQL = `DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'P0001',
    MESSAGE = 'sqsconsumer: idempotency claim lost: this transaction must roll back'; END $$`

// interval turns a caller's duration into the one sent: at least 1 ms,
// rounded up to microseconds (PostgreSQL's resolution).
func interval(d time.Duration) time.Duration {
	return max(d, time.Millisecond).Round(time.Microsecond)
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, context.Cause(ctx))
	}
	return nil
}

// Claim implements sqsconsumer.IdempotencyStore.
func (s *Store) Claim(ctx context.Context, key, token string, until time.Time, payloadHash string) (sqsconsumer.ClaimResult, error) {
	if err := ctxErr(ctx, "Claim"); err != nil {
		return sqsconsumer.ClaimResult{}, err
	}
	d := interval(time.Until(until))
	for range maxClaimAttempts {
		var (
			acquired, live bool
			status, hash   string
			result         []byte
			expires        time.Time
		)
		err := s.db.QueryRow(ctx, s.claimSQL, key, token, payloadHash, d).Scan(&acquired, &status, &hash, &result, &expires, &live)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !acquired && !live) {
			continue // raced with a concurrent insert or expiry: look again
		}
		if err != nil {
			return sqsconsumer.ClaimResult{}, fmt.Errorf("pgstore: Claim %q: %w", key, err)
		}
		switch {
		case acquired:
			return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimAcquired, Until: expires}, nil
		case payloadHash != "" && hash != "" && hash != payloadHash:
			return sqsconsumer.ClaimResult{}, fmt.Errorf("pgstore: Claim %q: %w", key, sqsconsumer.ErrPayloadMismatch)
		case status == "completed":
			if len(result) == 0 {
				result = nil
			}
			return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimCompleted, Result: result, Until: expires}, nil
		default:
			return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimInProgress, Until: expires}, nil
		}
	}
	return sqsconsumer.ClaimResult{}, fmt.Errorf("pgstore: Claim %q: the row kept changing under %d attempts", key, maxClaimAttempts)
}

// Extend implements sqsconsumer.IdempotencyStore.
func (s *Store) Extend(ctx context.Context, key, token string, until time.Time) error {
	if err := ctxErr(ctx, "Extend"); err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, s.extendSQL, key, token, interval(time.Until(until)))
	if err != nil {
		return fmt.Errorf("pgstore: Extend %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: Extend %q: %w", key, sqsconsumer.ErrClaimLost)
	}
	return nil
}

// Complete implements sqsconsumer.IdempotencyStore.
func (s *Store) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if err := ctxErr(ctx, "Complete"); err != nil {
		return err
	}
	ok, err := s.complete(ctx, s.db, key, token, result, ttl)
	if err != nil {
		return fmt.Errorf("pgstore: Complete %q: %w", key, err)
	}
	if !ok {
		return fmt.Errorf("pgstore: Complete %q: %w", key, sqsconsumer.ErrClaimLost)
	}
	return nil
}

func (s *Store) complete(ctx context.Context, db DB, key, token string, result []byte, ttl time.Duration) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, s.completeSQL, key, token, result, interval(ttl)).Scan(&ok)
	return ok, err
}

// Release implements sqsconsumer.IdempotencyStore.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := ctxErr(ctx, "Release"); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, s.releaseSQL, key, token); err != nil {
		return fmt.Errorf("pgstore: Release %q: %w", key, err)
	}
	return nil
}

// CompleteInTx records, inside tx, the completion of the claim that the
// sqsconsumer.NewIdempotent middleware holds for the handler call ctx belongs
// to, storing result (nil for none; the middleware's size limit does not
// apply here). Call it from the handler, with the transaction that writes
// the handler's effects, before committing: then the effects and the
// completion commit together, or neither does.
//
// The claim's token is checked inside tx, and the row stays locked until
// tx ends, so no other worker can take the key over meanwhile. If the
// claim is no longer this worker's (it expired and another worker took the
// key over), CompleteInTx returns an error matching sqsconsumer.ErrClaimLost
// and also fails tx, so that a Commit rolls back: the effects of a worker
// that lost its claim can never commit. Return an error from the handler
// then (the middleware releases nothing that is not its own).
//
// After the handler returns nil, the middleware's own Complete finds the
// key completed by its token and leaves it as it is. If tx rolls back
// instead and the handler returns an error, the middleware releases the
// claim, so the key is free for the retry.
//
// It returns sqsconsumer.ErrNotIdempotent when ctx does not come from a
// handler wrapped by sqsconsumer.NewIdempotent's middleware.
func (s *Store) CompleteInTx(ctx context.Context, tx pgx.Tx, result []byte) error {
	claim, ok := sqsconsumer.ClaimFromContext(ctx)
	if !ok {
		return fmt.Errorf("pgstore: CompleteInTx: %w", sqsconsumer.ErrNotIdempotent)
	}
	done, err := s.complete(ctx, tx, claim.Key, claim.Token, result, claim.TTL)
	if err != nil {
		return fmt.Errorf("pgstore: CompleteInTx %q: %w", claim.Key, err)
	}
	if !done {
		// Fail the transaction on the server; its error is the expected one.
		_, _ = tx.Exec(ctx, abortSQL)
		return fmt.Errorf("pgstore: CompleteInTx %q: %w; the transaction was failed so it cannot commit", claim.Key, sqsconsumer.ErrClaimLost)
	}
	return nil
}

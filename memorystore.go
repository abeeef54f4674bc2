package sqsconsumer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memorySweepInterval is how often, at most, a MemoryStore scans for
// expired records. The scan runs inside a write call, so an idle store
// costs nothing.
const memorySweepInterval = time.Minute

// MemoryStore is an IdempotencyStore in the process's memory: the default
// for a single consumer process, and for tests. Duplicates are only
// recognised within the process, and records are lost when it exits; use a
// shared store (Redis, PostgreSQL, DynamoDB) when several processes consume
// the same queue.
//
// Expiry follows time.Now, so it works under testing/synctest. Expired
// records count as absent at once and are deleted by a sweep that runs, at
// most once a minute, during a Claim or Complete; no goroutine is started.
// The zero value is not usable: call NewMemoryStore. Safe for concurrent
// use.
type MemoryStore struct {
	mu        sync.Mutex // guards the fields below
	records   map[string]memoryRecord
	lastSweep time.Time
}

type memoryRecord struct {
	token     string
	completed bool
	hash      string
	result    []byte
	until     time.Time
}

var _ IdempotencyStore = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{records: make(map[string]memoryRecord), lastSweep: time.Now()}
}

// size returns the number of records held, counting expired ones the sweep
// has not deleted yet.
func (s *MemoryStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// lookupLocked returns key's record if it exists and has not expired.
func (s *MemoryStore) lookupLocked(key string, now time.Time) (memoryRecord, bool) {
	r, ok := s.records[key]
	if !ok || !now.Before(r.until) {
		return memoryRecord{}, false
	}
	return r, true
}

func (s *MemoryStore) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < memorySweepInterval {
		return
	}
	s.lastSweep = now
	for k, r := range s.records {
		if !now.Before(r.until) {
			delete(s.records, k)
		}
	}
}

// expiry turns an absolute time into one at least 1 ms after now.
func expiry(now, until time.Time) time.Time {
	if until.Sub(now) < time.Millisecond {
		return now.Add(time.Millisecond)
	}
	return until
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqsconsumer: MemoryStore.%s: %w", op, context.Cause(ctx))
	}
	return nil
}

// Claim implements IdempotencyStore.
func (s *MemoryStore) Claim(ctx context.Context, key, token string, until time.Time, payloadHash string) (ClaimResult, error) {
	if err := ctxErr(ctx, "Claim"); err != nil {
		return ClaimResult{}, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	if r, ok := s.lookupLocked(key, now); ok {
		if payloadHash != "" && r.hash != "" && payloadHash != r.hash {
			return ClaimResult{}, fmt.Errorf("%w: key %q", ErrPayloadMismatch, key)
		}
		if r.completed {
			var result []byte
			if len(r.result) > 0 {
				result = append([]byte(nil), r.result...)
			}
			return ClaimResult{Status: ClaimCompleted, Result: result, Until: r.until}, nil
		}
		return ClaimResult{Status: ClaimInProgress, Until: r.until}, nil
	}
	until = expiry(now, until)
	s.records[key] = memoryRecord{token: token, hash: payloadHash, until: until}
	return ClaimResult{Status: ClaimAcquired, Until: until}, nil
}

// Extend implements IdempotencyStore.
func (s *MemoryStore) Extend(ctx context.Context, key, token string, until time.Time) error {
	if err := ctxErr(ctx, "Extend"); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.lookupLocked(key, now)
	if !ok || r.completed || r.token != token {
		return fmt.Errorf("%w: key %q", ErrClaimLost, key)
	}
	r.until = expiry(now, until)
	s.records[key] = r
	return nil
}

// Complete implements IdempotencyStore. It keeps a copy of result.
func (s *MemoryStore) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if err := ctxErr(ctx, "Complete"); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	r, ok := s.lookupLocked(key, now)
	if !ok || r.token != token {
		return fmt.Errorf("%w: key %q", ErrClaimLost, key)
	}
	if r.completed {
		return nil
	}
	r.completed = true
	if len(result) > 0 {
		r.result = append([]byte(nil), result...)
	}
	r.until = now.Add(max(ttl, time.Millisecond))
	s.records[key] = r
	return nil
}

// Release implements IdempotencyStore.
func (s *MemoryStore) Release(ctx context.Context, key, token string) error {
	if err := ctxErr(ctx, "Release"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.records[key]; ok && !r.completed && r.token == token {
		delete(s.records, key)
	}
	return nil
}

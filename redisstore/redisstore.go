// Package redisstore is an sqsconsumer.IdempotencyStore in Redis, for
// consumers in several processes that share one Redis (or Valkey) server.
//
// Each idempotency key is one Redis hash, named the prefix (default
// "sqsconsumer:idempotency:") followed by the key, with the fields
//
//	t  the fencing token of the claim or completion
//	s  "p" while in progress, "c" once completed
//	h  the payload hash ("" when not validated)
//	r  the stored result (completions only)
//
// and the record's expiry as the key's own expiry (PEXPIRE), so Redis
// deletes expired records by itself. Every operation is one Lua script,
// which Redis runs atomically, so claims racing from many processes have
// exactly one winner and tokens are checked and changed in one step.
// Expiry follows the Redis server's clock: the store sends durations
// (time.Until of the caller's times, in milliseconds), never absolute times.
//
// Each script touches a single key, so the store works with Redis Cluster
// too (pass a *redis.ClusterClient). Redis 6.2 or newer.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqskit/sqsconsumer"
)

// DefaultPrefix is the prefix of every record's Redis key unless
// WithPrefix says otherwise.
const DefaultPrefix = "sqsconsumer:idempotency:"

// Store is an sqsconsumer.IdempotencyStore in Redis. Make one with New.
// Safe for concurrent use, from many processes at once.
type Store struct {
	client redis.Scripter
	prefix string
}

var _ sqsconsumer.IdempotencyStore = (*Store)(nil)

// Option configures New.
type Option func(*Store)

// WithPrefix sets the prefix of the Redis keys the store uses, so several
// applications (or queues) can share one Redis database without their
// idempotency keys meeting. Default DefaultPrefix.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// New returns a Store that keeps its records through client: a
// *redis.Client, *redis.ClusterClient, *redis.Ring or anything else that
// runs scripts. The caller owns client and closes it after the Store's
// last use.
func New(client redis.Scripter, opts ...Option) *Store {
	s := &Store{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Scripts. ARGV durations are whole milliseconds, at least 1.
var (
	// ARGV: token, claim ms, payload hash.
	// Returns {1, ttl} acquired, {2, ttl, result} completed,
	// {3, ttl} in progress, {0} payload mismatch.
	claimScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 's', 'h', 'r')
if not rec[1] then
  redis.call('HSET', KEYS[1], 't', ARGV[1], 's', 'p', 'h', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(ARGV[2])}
end
if ARGV[3] ~= '' and rec[2] and rec[2] ~= '' and rec[2] ~= ARGV[3] then
  return {0}
end
local ttl = redis.call('PTTL', KEYS[1])
if rec[1] == 'c' then
  return {2, ttl, rec[3] or ''}
end
return {3, ttl}
`)
	// ARGV: token, claim ms. Returns 1 when extended, 0 when not held.
	extendScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 't', 's')
if rec[1] ~= ARGV[1] or rec[2] ~= 'p' then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)
	// ARGV: token, result, completion ms. Returns 1 when completed (now or
	// before, by this token), 0 when not held.
	completeScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 't', 's')
if rec[1] ~= ARGV[1] then
  return 0
end
if rec[2] == 'c' then
  return 1
end
redis.call('HSET', KEYS[1], 's', 'c', 'r', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)
	// ARGV: token. Deletes the record if token holds it in progress.
	releaseScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 't', 's')
if rec[1] == ARGV[1] and rec[2] == 'p' then
  redis.call('DEL', KEYS[1])
end
return 0
`)
)

// millis turns a duration into the whole milliseconds Redis is sent,
// rounded up, at least 1.
func millis(d time.Duration) int64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return max(int64(ms), 1)
}

func (s *Store) run(ctx context.Context, op string, script *redis.Script, key string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w", op, context.Cause(ctx))
	}
	v, err := script.Run(ctx, s.client, []string{s.prefix + key}, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: %s %q: %w", op, key, err)
	}
	return v, nil
}

// Claim implements sqsconsumer.IdempotencyStore.
func (s *Store) Claim(ctx context.Context, key, token string, until time.Time, payloadHash string) (sqsconsumer.ClaimResult, error) {
	v, err := s.run(ctx, "Claim", claimScript, key, token, millis(time.Until(until)), payloadHash)
	if err != nil {
		return sqsconsumer.ClaimResult{}, err
	}
	now := time.Now()
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return sqsconsumer.ClaimResult{}, fmt.Errorf("redisstore: Claim %q: unexpected reply %v", key, v)
	}
	code, _ := reply[0].(int64)
	var expires time.Time
	if len(reply) > 1 {
		if ms, ok := reply[1].(int64); ok && ms >= 0 {
			expires = now.Add(time.Duration(ms) * time.Millisecond)
		}
	}
	switch code {
	case 1:
		return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimAcquired, Until: expires}, nil
	case 2:
		res := sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimCompleted, Until: expires}
		if len(reply) > 2 {
			if r, _ := reply[2].(string); r != "" {
				res.Result = []byte(r)
			}
		}
		return res, nil
	case 3:
		return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimInProgress, Until: expires}, nil
	case 0:
		return sqsconsumer.ClaimResult{}, fmt.Errorf("redisstore: Claim %q: %w", key, sqsconsumer.ErrPayloadMismatch)
	}
	return sqsconsumer.ClaimResult{}, fmt.Errorf("redisstore: Claim %q: unexpected reply %v", key, v)
}

// Extend implements sqsconsumer.IdempotencyStore.
func (s *Store) Extend(ctx context.Context, key, token string, until time.Time) error {
	v, err := s.run(ctx, "Extend", extendScript, key, token, millis(time.Until(until)))
	if err != nil {
		return err
	}
	if v != int64(1) {
		return fmt.Errorf("redisstore: Extend %q: %w", key, sqsconsumer.ErrClaimLost)
	}
	return nil
}

// Complete implements sqsconsumer.IdempotencyStore.
func (s *Store) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if result == nil {
		result = []byte{}
	}
	v, err := s.run(ctx, "Complete", completeScript, key, token, result, millis(ttl))
	if err != nil {
		return err
	}
	if v != int64(1) {
		return fmt.Errorf("redisstore: Complete %q: %w", key, sqsconsumer.ErrClaimLost)
	}
	return nil
}

// Release implements sqsconsumer.IdempotencyStore.
func (s *Store) Release(ctx context.Context, key, token string) error {
	_, err := s.run(ctx, "Release", releaseScript, key, token)
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

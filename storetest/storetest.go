// Package storetest is the conformance suite every
// sqsconsumer.IdempotencyStore runs, in the manner of gocloud.dev's
// drivertest: a store's own test calls Run with a function that makes a
// fresh store, and the suite checks the contract documented on
// IdempotencyStore — claims, fencing tokens, expiry, payload hashes,
// results, and exactly one winner when many goroutines claim one key.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) sqsconsumer.IdempotencyStore {
//			return mystore.New(...)
//		})
//	}
//
// Expiry cases wait for claims and completions to run out. For a store
// that keeps time with Go's clock and does no network I/O (the in-memory
// store), WithSynctest runs every case in a testing/synctest bubble, where
// the waits take no real time. Stores whose server keeps the time (Redis,
// PostgreSQL) or that talk over sockets wait on the real clock, in steps of
// WithTick (default 1 s); those cases run in parallel, so the suite takes
// a few seconds.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

// Option configures Run and RunBenchmarks.
type Option func(*config)

type config struct {
	synctest    bool
	tick        time.Duration
	concurrency int
}

// WithSynctest runs each case inside testing/synctest.Test, with the store
// made inside the bubble. Only for stores that use Go's clock and no
// sockets.
func WithSynctest() Option { return func(c *config) { c.synctest = true } }

// WithTick sets the unit of the expiry cases: claims and completions last
// one tick, and the suite waits a tick and a half for them to run out.
// Default 1 s. It must be well above the store's round-trip time and clock
// granularity.
func WithTick(d time.Duration) Option { return func(c *config) { c.tick = d } }

// WithConcurrency sets how many goroutines race to claim one key in the
// concurrency cases. Default 16.
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

func newConfig(opts []Option) config {
	c := config{tick: time.Second, concurrency: 16}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// env is what every case gets: the store under test, a context, and the
// tick.
type env struct {
	t     *testing.T
	s     sqsconsumer.IdempotencyStore
	ctx   context.Context
	tick  time.Duration
	conc  int
	keyID string
}

// key returns a key unique to this case and run, so stores shared between
// cases (and left over from earlier runs) never see a key twice.
func (e *env) key(name string) string { return e.keyID + "/" + name }

// far is a claim expiry no case waits for.
func (e *env) far() time.Time { return time.Now().Add(time.Hour) }

func (e *env) claim(key, token string, until time.Time, hash string) sqsconsumer.ClaimResult {
	e.t.Helper()
	res, err := e.s.Claim(e.ctx, key, token, until, hash)
	require.NoError(e.t, err, "Claim(%q, %q)", key, token)
	return res
}

func (e *env) requireStatus(key, token string, want sqsconsumer.ClaimStatus) sqsconsumer.ClaimResult {
	e.t.Helper()
	res := e.claim(key, token, e.far(), "")
	require.Equal(e.t, want, res.Status, "Claim(%q, %q): got %v, want %v", key, token, res.Status, want)
	return res
}

// sleep waits d: real time, or fake time in a synctest bubble.
func (e *env) sleep(d time.Duration) { time.Sleep(d) }

type testCase struct {
	name string
	// timed cases wait for expiry; they run in parallel with each other.
	timed bool
	run   func(e *env)
}

// Run runs the conformance suite against stores made by newStore, which is
// called once per case (inside the bubble under WithSynctest) and should
// register any cleanup with t.Cleanup. Stores may be shared between cases:
// every case uses keys of its own.
func Run(t *testing.T, newStore func(t *testing.T) sqsconsumer.IdempotencyStore, opts ...Option) {
	cfg := newConfig(opts)
	runID := randomID()
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			if tc.timed || !cfg.synctest {
				t.Parallel()
			}
			body := func(t *testing.T) {
				e := &env{t: t, s: newStore(t), ctx: t.Context(), tick: cfg.tick, conc: cfg.concurrency,
					keyID: "storetest/" + runID + "/" + tc.name}
				tc.run(e)
			}
			if cfg.synctest {
				synctest.Test(t, body)
				return
			}
			body(t)
		})
	}
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func cases() []testCase {
	return []testCase{
		{name: "ClaimAbsentKey", run: func(e *env) {
			k := e.key("k")
			until := time.Now().Add(time.Hour)
			res := e.claim(k, "t1", until, "")
			require.Equal(e.t, sqsconsumer.ClaimAcquired, res.Status)
			require.Nil(e.t, res.Result)
		}},
		{name: "ClaimHeldKeyIsInProgress", run: func(e *env) {
			k := e.key("k")
			until := time.Now().Add(time.Hour)
			e.claim(k, "t1", until, "")
			for _, tok := range []string{"t2", "t1"} { // the holder itself gets no second claim
				res := e.claim(k, tok, e.far(), "")
				require.Equal(e.t, sqsconsumer.ClaimInProgress, res.Status, "claim by %s", tok)
				require.WithinDuration(e.t, until, res.Until, 2*time.Second, "Until is the holder's expiry")
			}
		}},
		{name: "KeysAreIndependent", run: func(e *env) {
			keys := []string{e.key("a"), e.key("a2"), e.key("A"), e.key("a b"), e.key("ключ/ü/🙂"), e.key("x") + strings.Repeat("z", sqsconsumer.MaxIdempotencyKeyLen-len(e.key("x")))}
			for i, k := range keys {
				res := e.claim(k, "t"+itoa(i), e.far(), "")
				require.Equal(e.t, sqsconsumer.ClaimAcquired, res.Status, "key %q", k)
			}
			require.NoError(e.t, e.s.Complete(e.ctx, keys[0], "t0", []byte("r0"), time.Hour))
			e.requireStatus(keys[0], "u", sqsconsumer.ClaimCompleted)
			for _, k := range keys[1:] {
				e.requireStatus(k, "u", sqsconsumer.ClaimInProgress)
			}
		}},
		{name: "CompleteThenClaimReturnsResult", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "")
			result := []byte("{\"pdf\":\"s3://bucket/inv_1.pdf\"}\x00\xff binary")
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", result, time.Hour))
			res := e.requireStatus(k, "t2", sqsconsumer.ClaimCompleted)
			require.Equal(e.t, result, res.Result)
			require.WithinDuration(e.t, time.Now().Add(time.Hour), res.Until, 5*time.Second, "Until is the completion's expiry")
		}},
		{name: "LargeResultRoundTrip", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "")
			result := make([]byte, sqsconsumer.MaxResultSize)
			_, _ = rand.Read(result)
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", result, time.Hour))
			res := e.requireStatus(k, "t2", sqsconsumer.ClaimCompleted)
			require.Equal(e.t, result, res.Result)
		}},
		{name: "CompleteWithoutResult", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "")
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", nil, time.Hour))
			res := e.requireStatus(k, "t2", sqsconsumer.ClaimCompleted)
			require.Empty(e.t, res.Result)
		}},
		{name: "ResultIsCopied", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "")
			result := []byte("abc")
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", result, time.Hour))
			result[0] = 'X'
			res := e.requireStatus(k, "t2", sqsconsumer.ClaimCompleted)
			require.Equal(e.t, []byte("abc"), res.Result)
			res.Result[1] = 'Y'
			res = e.requireStatus(k, "t3", sqsconsumer.ClaimCompleted)
			require.Equal(e.t, []byte("abc"), res.Result)
		}},
		{name: "CompleteTwiceWithSameTokenIsNoOp", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "")
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", []byte("first"), time.Hour))
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", []byte("second"), time.Hour))
			res := e.requireStatus(k, "t2", sqsconsumer.ClaimCompleted)
			require.Equal(e.t, []byte("first"), res.Result)
		}},
		{name: "FencingWrongToken", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "owner", e.far(), "")
			require.ErrorIs(e.t, e.s.Extend(e.ctx, k, "intruder", e.far()), sqsconsumer.ErrClaimLost)
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "intruder", []byte("x"), time.Hour), sqsconsumer.ErrClaimLost)
			require.NoError(e.t, e.s.Release(e.ctx, k, "intruder"), "Release of someone else's claim is a no-op")
			e.requireStatus(k, "other", sqsconsumer.ClaimInProgress)
			// The owner is unaffected.
			require.NoError(e.t, e.s.Extend(e.ctx, k, "owner", e.far()))
			require.NoError(e.t, e.s.Complete(e.ctx, k, "owner", []byte("ok"), time.Hour))
			res := e.requireStatus(k, "other", sqsconsumer.ClaimCompleted)
			require.Equal(e.t, []byte("ok"), res.Result)
			// A completion is not released, nor re-completed by another token.
			require.NoError(e.t, e.s.Release(e.ctx, k, "owner"))
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "intruder", nil, time.Hour), sqsconsumer.ErrClaimLost)
			require.ErrorIs(e.t, e.s.Extend(e.ctx, k, "owner", e.far()), sqsconsumer.ErrClaimLost, "a completion cannot be extended")
			e.requireStatus(k, "other", sqsconsumer.ClaimCompleted)
		}},
		{name: "UnknownKey", run: func(e *env) {
			k := e.key("never-claimed")
			require.ErrorIs(e.t, e.s.Extend(e.ctx, k, "t", e.far()), sqsconsumer.ErrClaimLost)
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "t", nil, time.Hour), sqsconsumer.ErrClaimLost)
			require.NoError(e.t, e.s.Release(e.ctx, k, "t"))
			e.requireStatus(k, "t", sqsconsumer.ClaimAcquired)
		}},
		{name: "ReleaseFreesKey", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "")
			require.NoError(e.t, e.s.Release(e.ctx, k, "t1"))
			require.NoError(e.t, e.s.Release(e.ctx, k, "t1"), "a second Release is a no-op")
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "t1", nil, time.Hour), sqsconsumer.ErrClaimLost, "a released claim cannot complete")
			e.requireStatus(k, "t2", sqsconsumer.ClaimAcquired)
			require.ErrorIs(e.t, e.s.Extend(e.ctx, k, "t1", e.far()), sqsconsumer.ErrClaimLost, "the old token cannot extend the new claim")
		}},
		{name: "PayloadMismatch", run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "hash-a")
			_, err := e.s.Claim(e.ctx, k, "t2", e.far(), "hash-b")
			require.ErrorIs(e.t, err, sqsconsumer.ErrPayloadMismatch, "in progress")
			res := e.claim(k, "t2", e.far(), "hash-a")
			require.Equal(e.t, sqsconsumer.ClaimInProgress, res.Status)
			res = e.claim(k, "t2", e.far(), "")
			require.Equal(e.t, sqsconsumer.ClaimInProgress, res.Status, "an empty hash skips the check")
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", []byte("r"), time.Hour))
			_, err = e.s.Claim(e.ctx, k, "t3", e.far(), "hash-b")
			require.ErrorIs(e.t, err, sqsconsumer.ErrPayloadMismatch, "completed")
			res = e.claim(k, "t3", e.far(), "hash-a")
			require.Equal(e.t, sqsconsumer.ClaimCompleted, res.Status)
			require.Equal(e.t, []byte("r"), res.Result)
			// A record stored without a hash matches any payload.
			k2 := e.key("k2")
			e.claim(k2, "t1", e.far(), "")
			res = e.claim(k2, "t2", e.far(), "hash-b")
			require.Equal(e.t, sqsconsumer.ClaimInProgress, res.Status)
		}},
		{name: "CancelledContext", run: func(e *env) {
			k := e.key("k")
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			_, err := e.s.Claim(ctx, k, "t1", e.far(), "")
			require.ErrorIs(e.t, err, context.Canceled)
			e.requireStatus(k, "t2", sqsconsumer.ClaimAcquired)
			require.ErrorIs(e.t, e.s.Extend(ctx, k, "t2", e.far()), context.Canceled)
			require.ErrorIs(e.t, e.s.Complete(ctx, k, "t2", nil, time.Hour), context.Canceled)
			require.ErrorIs(e.t, e.s.Release(ctx, k, "t2"), context.Canceled)
			e.requireStatus(k, "t3", sqsconsumer.ClaimInProgress)
		}},
		{name: "ConcurrentClaimsOneWinner", run: func(e *env) {
			for round := range 3 {
				k := e.key("k" + string(rune('0'+round)))
				winners := concurrentClaims(e, k)
				require.Len(e.t, winners, 1, "round %d: exactly one goroutine acquires the key", round)
			}
		}},
		{name: "ConcurrentCompleteAndClaim", run: func(e *env) {
			// While the owner completes, racers see either in progress or
			// completed, never acquire.
			k := e.key("k")
			e.claim(k, "owner", e.far(), "")
			var wg sync.WaitGroup
			statuses := make([]sqsconsumer.ClaimStatus, e.conc)
			errs := make([]error, e.conc)
			for i := range e.conc {
				wg.Go(func() {
					res, err := e.s.Claim(e.ctx, k, "racer"+itoa(i), e.far(), "")
					statuses[i], errs[i] = res.Status, err
				})
			}
			require.NoError(e.t, e.s.Complete(e.ctx, k, "owner", []byte("done"), time.Hour))
			wg.Wait()
			for i := range e.conc {
				require.NoError(e.t, errs[i])
				require.Contains(e.t, []sqsconsumer.ClaimStatus{sqsconsumer.ClaimInProgress, sqsconsumer.ClaimCompleted}, statuses[i])
			}
			e.requireStatus(k, "late", sqsconsumer.ClaimCompleted)
		}},

		// Timed cases.
		{name: "ClaimExpires", timed: true, run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", time.Now().Add(e.tick), "hash-a")
			e.requireStatus(k, "t2", sqsconsumer.ClaimInProgress)
			e.sleep(e.tick * 3 / 2)
			res := e.claim(k, "t2", e.far(), "hash-b") // an expired record's hash no longer counts
			require.Equal(e.t, sqsconsumer.ClaimAcquired, res.Status)
			// The first owner was taken over: fenced off.
			require.ErrorIs(e.t, e.s.Extend(e.ctx, k, "t1", e.far()), sqsconsumer.ErrClaimLost)
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "t1", []byte("late"), time.Hour), sqsconsumer.ErrClaimLost)
			require.NoError(e.t, e.s.Release(e.ctx, k, "t1"))
			e.requireStatus(k, "t3", sqsconsumer.ClaimInProgress)
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t2", []byte("new"), time.Hour))
			res = e.requireStatus(k, "t3", sqsconsumer.ClaimCompleted)
			require.Equal(e.t, []byte("new"), res.Result)
		}},
		{name: "ExpiredClaimCannotExtendOrComplete", timed: true, run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", time.Now().Add(e.tick), "")
			e.sleep(e.tick * 3 / 2)
			require.ErrorIs(e.t, e.s.Extend(e.ctx, k, "t1", e.far()), sqsconsumer.ErrClaimLost)
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "t1", nil, time.Hour), sqsconsumer.ErrClaimLost)
			e.requireStatus(k, "t2", sqsconsumer.ClaimAcquired)
		}},
		{name: "ExtendKeepsClaim", timed: true, run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", time.Now().Add(e.tick), "")
			e.sleep(e.tick / 2)
			until := time.Now().Add(2 * e.tick)
			require.NoError(e.t, e.s.Extend(e.ctx, k, "t1", until))
			e.sleep(e.tick) // half a tick past the first expiry, a tick before the second
			res := e.requireStatus(k, "t2", sqsconsumer.ClaimInProgress)
			require.WithinDuration(e.t, until, res.Until, e.tick/2+time.Second/2, "Until follows the extension")
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", nil, time.Hour))
			e.requireStatus(k, "t2", sqsconsumer.ClaimCompleted)
		}},
		{name: "CompletionExpires", timed: true, run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", e.far(), "hash-a")
			require.NoError(e.t, e.s.Complete(e.ctx, k, "t1", []byte("r"), e.tick))
			e.requireStatus(k, "t2", sqsconsumer.ClaimCompleted)
			e.sleep(e.tick * 3 / 2)
			res := e.claim(k, "t2", e.far(), "hash-b")
			require.Equal(e.t, sqsconsumer.ClaimAcquired, res.Status, "an expired completion is forgotten")
			require.Nil(e.t, res.Result)
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "t1", nil, time.Hour), sqsconsumer.ErrClaimLost, "the old token's completion is gone")
		}},
		{name: "PastUntilExpiresAtOnce", timed: true, run: func(e *env) {
			k := e.key("k")
			e.claim(k, "t1", time.Now().Add(-time.Hour), "")
			e.sleep(e.tick / 2)
			e.requireStatus(k, "t2", sqsconsumer.ClaimAcquired)
		}},
		{name: "ConcurrentTakeoverOneWinner", timed: true, run: func(e *env) {
			k := e.key("k")
			e.claim(k, "crashed", time.Now().Add(e.tick), "")
			e.sleep(e.tick * 3 / 2)
			winners := concurrentClaims(e, k)
			require.Len(e.t, winners, 1, "exactly one goroutine takes over the expired claim")
			require.ErrorIs(e.t, e.s.Complete(e.ctx, k, "crashed", nil, time.Hour), sqsconsumer.ErrClaimLost)
			require.NoError(e.t, e.s.Complete(e.ctx, k, winners[0], nil, time.Hour))
		}},
	}
}

// concurrentClaims has e.conc goroutines claim k at once and returns the
// tokens that acquired it; every other must see it in progress.
func concurrentClaims(e *env, k string) []string {
	e.t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		errs    []error
	)
	start := make(chan struct{})
	for i := range e.conc {
		wg.Go(func() {
			tok := "racer" + itoa(i)
			<-start
			res, err := e.s.Claim(e.ctx, k, tok, e.far(), "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case res.Status == sqsconsumer.ClaimAcquired:
				winners = append(winners, tok)
			case res.Status != sqsconsumer.ClaimInProgress:
				errs = append(errs, errors.New("unexpected status "+res.Status.String()))
			}
		})
	}
	close(start)
	wg.Wait()
	require.NoError(e.t, errors.Join(errs...))
	return winners
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}

package sqsconsumer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// effects counts how often each key's side effect happened.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) add(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[key]++
}

func (e *effects) get(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

// idemLease receives the next message of b's queue with a 30 s visibility
// and returns it as a handler sees it, with a started Lease, and the
// lease's context. The lease is stopped at the end of the test.
func (b bundle) idemLease(t *testing.T) (*Message, context.Context) {
	t.Helper()
	raw, sent := b.receiveNext(t, 30*time.Second)
	l, err := NewLease(b.client, b.url, raw, WithVisibilityTimeout(30*time.Second), WithReceivedAt(sent))
	require.NoError(t, err)
	ctx := l.Start(context.Background())
	t.Cleanup(l.Stop)
	return idemMessage(raw, sent, l), ctx
}

func idemMessage(raw types.Message, sent time.Time, l *Lease) *Message {
	return &Message{ID: aws.ToString(raw.MessageId), Body: aws.ToString(raw.Body), Attributes: raw.Attributes, ReceivedAt: sent, Lease: l}
}

// probe reports the state of key as another worker would find it (a
// completed key stays completed; probing an absent key claims it, so use
// it only where the key is expected to be held).
func probe(t *testing.T, s IdempotencyStore, key string) ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), key, "probe", time.Now().Add(time.Hour), "")
	require.NoError(t, err)
	return res
}

func retryDelayOf(t *testing.T, err error) time.Duration {
	t.Helper()
	d, ok := retryAfterOf(err)
	require.True(t, ok, "error %v carries no RetryAfter", err)
	return d
}

// countingHandler counts its calls in fx under the message's key (its
// body) and returns what fail says.
func countingHandler(fx *effects, fail func(m *Message) error) Handler {
	return HandlerFunc(func(ctx context.Context, m *Message) error {
		if fail != nil {
			if err := fail(m); err != nil {
				return err
			}
		}
		fx.add(m.Body)
		return nil
	})
}

func TestIdempotentFlow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := NewMemoryStore()
		var fx effects
		var hooked [][]byte
		h := mustIdempotent(store, WithDuplicateHook(func(ctx context.Context, m *Message, result []byte) error {
			hooked = append(hooked, result)
			return nil
		}))(HandlerFunc(func(ctx context.Context, m *Message) error {
			fx.add(m.ID)
			claim, ok := ClaimFromContext(ctx)
			require.True(t, ok)
			require.Equal(t, m.ID, claim.Key)
			require.Len(t, claim.Token, 26, "crypto/rand.Text: 128 random bits")
			require.Equal(t, DefaultIdempotencyTTL, claim.TTL)
			return SetIdempotencyResult(ctx, []byte("receipt-"+m.ID))
		}))
		m := &Message{ID: "m1", Body: "b"}

		require.NoError(t, h.HandleMessage(ctx, m))
		require.Equal(t, 1, fx.get("m1"))
		res := probe(t, store, "m1")
		require.Equal(t, ClaimCompleted, res.Status)
		require.Equal(t, []byte("receipt-m1"), res.Result)
		require.WithinDuration(t, time.Now().Add(DefaultIdempotencyTTL), res.Until, time.Second)

		// A duplicate is skipped: nil (delete it), hook gets the result.
		require.NoError(t, h.HandleMessage(ctx, m))
		require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m1", Body: "other body"}))
		require.Equal(t, 1, fx.get("m1"))
		require.Equal(t, [][]byte{[]byte("receipt-m1"), []byte("receipt-m1")}, hooked)

		// Another message is its own key.
		require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m2"}))
		require.Equal(t, 1, fx.get("m2"))

		// Completions expire after the TTL; then the message runs again.
		time.Sleep(DefaultIdempotencyTTL + time.Second)
		require.NoError(t, h.HandleMessage(ctx, m))
		require.Equal(t, 2, fx.get("m1"))
	})
}

func TestIdempotentInProgressBacksOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := NewMemoryStore()
		holderUntil := time.Now().Add(95 * time.Second)
		_, err := store.Claim(ctx, "m1", "other-worker", holderUntil, "")
		require.NoError(t, err)
		var fx effects
		m := &Message{ID: "m1", Body: "m1"}

		err = mustIdempotent(store)(countingHandler(&fx, nil)).HandleMessage(ctx, m)
		require.ErrorIs(t, err, ErrInProgress)
		require.Equal(t, 96*time.Second, retryDelayOf(t, err), "until the holder's claim expires, plus a second")
		require.Equal(t, 0, fx.get("m1"), "the handler must not run while another worker holds the key")

		err = mustIdempotent(store, WithInProgressRetry(7*time.Second))(countingHandler(&fx, nil)).HandleMessage(ctx, m)
		require.ErrorIs(t, err, ErrInProgress)
		require.Equal(t, 7*time.Second, retryDelayOf(t, err))

		// Once the holder's claim expires, the message runs.
		time.Sleep(96 * time.Second)
		require.NoError(t, mustIdempotent(store)(countingHandler(&fx, nil)).HandleMessage(ctx, m))
		require.Equal(t, 1, fx.get("m1"))
	})
}

func TestInProgressDelay(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name  string
		until time.Time
		want  time.Duration
	}{
		{"unknown expiry", time.Time{}, defaultVisibilityTimeout},
		{"whole seconds", now.Add(29 * time.Second), 30 * time.Second},
		{"rounded up", now.Add(29*time.Second + time.Millisecond), 31 * time.Second},
		{"already expired", now.Add(-time.Minute), time.Second},
		{"just expired", now, time.Second},
		{"beyond 12 h", now.Add(13 * time.Hour), MaxVisibilityTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := inProgressDelay(now, tt.until)
			require.Equal(t, tt.want, got, "got %v, want %v", got, tt.want)
		})
	}
}

func TestIdempotentFailureReleasesClaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := NewMemoryStore()
		var fx effects
		boom := errors.New("boom")
		calls := 0
		h := mustIdempotent(store)(countingHandler(&fx, func(m *Message) error {
			calls++
			if calls == 1 {
				return RetryAfter(boom, 3*time.Second)
			}
			return nil
		}))
		m := &Message{ID: "m1", Body: "m1"}
		err := h.HandleMessage(ctx, m)
		require.ErrorIs(t, err, boom, "the handler's error is returned unchanged")
		require.Equal(t, 3*time.Second, retryDelayOf(t, err), "including its RetryAfter")
		require.Equal(t, 0, store.size(), "the claim was released")

		require.NoError(t, h.HandleMessage(ctx, m), "the retry runs at once")
		require.Equal(t, 2, calls)
		require.Equal(t, 1, fx.get("m1"))
		require.Equal(t, ClaimCompleted, probe(t, store, "m1").Status)
	})
}

func TestIdempotentPanicReleasesClaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := NewMemoryStore()
		h := mustIdempotent(store)(HandlerFunc(func(ctx context.Context, m *Message) error { panic("kaboom") }))
		require.PanicsWithValue(t, "kaboom", func() {
			_ = h.HandleMessage(context.Background(), &Message{ID: "m1"})
		})
		require.Equal(t, 0, store.size(), "the claim was released")
	})
}

func TestIdempotentKeyFunction(t *testing.T) {
	t.Parallel()
	invoiceID := func(m *Message) (string, error) {
		id, ok := strings.CutPrefix(m.Body, "invoice:")
		if !ok {
			return "", errors.New("no invoice id in body")
		}
		return "invoice/" + id, nil
	}
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := NewMemoryStore()
		var fx effects
		h := mustIdempotent(store, WithIdempotencyKey(invoiceID))(countingHandler(&fx, nil))

		// Two messages (different IDs) about the same invoice: one effect.
		require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m1", Body: "invoice:48812"}))
		require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m2", Body: "invoice:48812"}))
		require.Equal(t, 1, fx.get("invoice:48812"))
		require.Equal(t, ClaimCompleted, probe(t, store, "invoice/48812").Status)

		err := h.HandleMessage(ctx, &Message{ID: "m3", Body: "garbage"})
		require.ErrorIs(t, err, ErrIdempotencyKey)
		require.ErrorContains(t, err, "no invoice id in body")
		require.ErrorContains(t, err, "m3")
		require.Equal(t, 0, fx.get("garbage"))
	})

	bad := []struct {
		name string
		key  string
		want string
	}{
		{"empty", "", "the key is empty"},
		{"too long", strings.Repeat("k", MaxIdempotencyKeyLen+1), "the key is 1025 bytes, limit 1024"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			h := mustIdempotent(NewMemoryStore(), WithIdempotencyKey(func(*Message) (string, error) { return tt.key, nil }))(
				HandlerFunc(func(context.Context, *Message) error { called = true; return nil }))
			err := h.HandleMessage(context.Background(), &Message{ID: "m1"})
			require.ErrorIs(t, err, ErrIdempotencyKey)
			require.ErrorContains(t, err, tt.want)
			require.False(t, called)
		})
	}
}

func TestIdempotentPayloadValidation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := NewMemoryStore()
		var fx effects
		sameKey := WithIdempotencyKey(func(*Message) (string, error) { return "order-7", nil })
		h := mustIdempotent(store, sameKey, WithPayloadValidation())(countingHandler(&fx, nil))
		require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m1", Body: "ship 3 boxes"}))
		require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m2", Body: "ship 3 boxes"}), "same payload: a duplicate")
		err := h.HandleMessage(ctx, &Message{ID: "m3", Body: "ship 300 boxes"})
		require.ErrorIs(t, err, ErrPayloadMismatch, "a different payload under the same key is not silently skipped")
		require.Equal(t, 1, fx.get("ship 3 boxes"))
		require.Equal(t, 0, fx.get("ship 300 boxes"))

		// Without validation the different payload is skipped as a duplicate.
		require.NoError(t, mustIdempotent(store, sameKey)(countingHandler(&fx, nil)).HandleMessage(ctx, &Message{ID: "m3", Body: "ship 300 boxes"}))
		require.Equal(t, 0, fx.get("ship 300 boxes"))
	})
}

func TestIdempotentResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.ErrorIs(t, SetIdempotencyResult(ctx, []byte("x")), ErrNotIdempotent)
	_, ok := ClaimFromContext(ctx)
	require.False(t, ok)

	store := NewMemoryStore()
	var setErr error
	h := mustIdempotent(store, WithMaxResultSize(4))(HandlerFunc(func(ctx context.Context, m *Message) error {
		buf := []byte("abcd")
		require.NoError(t, SetIdempotencyResult(ctx, buf))
		buf[0] = 'X' // the middleware kept a copy
		setErr = SetIdempotencyResult(ctx, []byte("abcde"))
		return nil
	}))
	require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m1"}))
	require.ErrorIs(t, setErr, ErrResultTooLarge)
	require.ErrorContains(t, setErr, "5 bytes, limit 4")
	require.Equal(t, []byte("abcd"), probe(t, store, "m1").Result, "a refused result leaves the earlier one")
}

func TestIdempotentDuplicateHookError(t *testing.T) {
	t.Parallel()
	store := NewMemoryStore()
	hookErr := errors.New("cannot resend the reply")
	h := mustIdempotent(store, WithDuplicateHook(func(context.Context, *Message, []byte) error { return hookErr }))(
		HandlerFunc(func(context.Context, *Message) error { return nil }))
	m := &Message{ID: "m1"}
	require.NoError(t, h.HandleMessage(context.Background(), m))
	require.ErrorIs(t, h.HandleMessage(context.Background(), m), hookErr)
	require.Equal(t, ClaimCompleted, probe(t, store, "m1").Status, "the completion stays")
}

func TestIdempotentOptionsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		store IdempotencyStore
		opt   IdempotencyOption
		want  string
	}{
		{"nil store", nil, nil, "store is nil"},
		{"nil key", NewMemoryStore(), WithIdempotencyKey(nil), "WithIdempotencyKey(nil)"},
		{"ttl 0", NewMemoryStore(), WithIdempotencyTTL(0), "WithIdempotencyTTL(0s)"},
		{"ttl too long", NewMemoryStore(), WithIdempotencyTTL(MaxIdempotencyTTL + time.Hour), "WithIdempotencyTTL"},
		{"claim ttl", NewMemoryStore(), WithClaimTTL(time.Millisecond), "WithClaimTTL(1ms)"},
		{"retry", NewMemoryStore(), WithInProgressRetry(13 * time.Hour), "WithInProgressRetry(13h0m0s)"},
		{"result size", NewMemoryStore(), WithMaxResultSize(MaxResultSize + 1), "WithMaxResultSize(262145)"},
		{"negative result size", NewMemoryStore(), WithMaxResultSize(-1), "WithMaxResultSize(-1)"},
		{"nil hook", NewMemoryStore(), WithDuplicateHook(nil), "WithDuplicateHook(nil)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := NewIdempotent(tt.store, tt.opt)
			require.Nil(t, mw)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, tt.want)
		})
	}
	mw, err := NewIdempotent(NewMemoryStore(), nil, WithIdempotencyTTL(time.Second), WithMaxResultSize(0), WithClaimTTL(MaxVisibilityTimeout))
	require.NoError(t, err)
	require.NotNil(t, mw)
}

// flakyStore fails the first n calls of each named method with a
// transient error, then passes them to the wrapped store.
type flakyStore struct {
	IdempotencyStore
	mu    sync.Mutex
	fails map[string]int
	calls map[string]int
	err   error
}

func (f *flakyStore) fail(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	if f.fails[op] > 0 {
		f.fails[op]--
		return f.err
	}
	return nil
}

func (f *flakyStore) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *flakyStore) Claim(ctx context.Context, key, token string, until time.Time, hash string) (ClaimResult, error) {
	if err := f.fail("Claim"); err != nil {
		return ClaimResult{}, err
	}
	return f.IdempotencyStore.Claim(ctx, key, token, until, hash)
}

func (f *flakyStore) Extend(ctx context.Context, key, token string, until time.Time) error {
	if err := f.fail("Extend"); err != nil {
		return err
	}
	return f.IdempotencyStore.Extend(ctx, key, token, until)
}

func (f *flakyStore) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if err := f.fail("Complete"); err != nil {
		return err
	}
	return f.IdempotencyStore.Complete(ctx, key, token, result, ttl)
}

func (f *flakyStore) Release(ctx context.Context, key, token string) error {
	if err := f.fail("Release"); err != nil {
		return err
	}
	return f.IdempotencyStore.Release(ctx, key, token)
}

func TestIdempotentStoreErrors(t *testing.T) {
	t.Parallel()
	down := errors.New("store unreachable")
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var fx effects

		// A failed claim fails the message without running the handler.
		s := &flakyStore{IdempotencyStore: NewMemoryStore(), err: down, fails: map[string]int{"Claim": 1}}
		h := mustIdempotent(s)(countingHandler(&fx, nil))
		err := h.HandleMessage(ctx, &Message{ID: "m1", Body: "m1"})
		require.ErrorIs(t, err, down)
		require.ErrorContains(t, err, `claiming idempotency key "m1"`)
		require.Equal(t, 0, fx.get("m1"))

		// Transient Complete and Release errors are retried.
		s = &flakyStore{IdempotencyStore: NewMemoryStore(), err: down, fails: map[string]int{"Complete": 3, "Release": 2}}
		h = mustIdempotent(s)(countingHandler(&fx, nil))
		require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m2", Body: "m2"}))
		require.Equal(t, 4, s.count("Complete"))
		require.Equal(t, ClaimCompleted, probe(t, s, "m2").Status)
		boom := errors.New("boom")
		h = mustIdempotent(s)(HandlerFunc(func(context.Context, *Message) error { return boom }))
		require.ErrorIs(t, h.HandleMessage(ctx, &Message{ID: "m3"}), boom)
		require.Equal(t, 3, s.count("Release"))
		require.Equal(t, ClaimAcquired, probe(t, s, "m3").Status, "released after the retries")

		// A store that stays down: the handler's error still comes back,
		// with the release failure noted, after a bounded wait.
		s = &flakyStore{IdempotencyStore: NewMemoryStore(), err: down, fails: map[string]int{"Release": 1 << 30, "Complete": 1 << 30}}
		start := time.Now()
		err = mustIdempotent(s)(HandlerFunc(func(context.Context, *Message) error { return boom })).HandleMessage(ctx, &Message{ID: "m4"})
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "releasing idempotency key \"m4\" failed: store unreachable")
		require.Equal(t, idempotencyStoreTimeout, time.Since(start))
		err = mustIdempotent(s)(HandlerFunc(func(context.Context, *Message) error { return nil })).HandleMessage(ctx, &Message{ID: "m5"})
		require.ErrorIs(t, err, down)
		require.ErrorContains(t, err, `recording completion of idempotency key "m5"`)
	})
}

// fakeStatusStore answers every Claim with a status the middleware does not
// know.
type fakeStatusStore struct{ IdempotencyStore }

func (fakeStatusStore) Claim(context.Context, string, string, time.Time, string) (ClaimResult, error) {
	return ClaimResult{Status: 42}, nil
}

func TestIdempotentUnknownStatus(t *testing.T) {
	t.Parallel()
	err := mustIdempotent(fakeStatusStore{})(HandlerFunc(func(context.Context, *Message) error {
		t.Fatal("handler ran")
		return nil
	})).HandleMessage(context.Background(), &Message{ID: "m1"})
	require.ErrorContains(t, err, "ClaimStatus(42)")
}

func TestIdempotentCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrShutdown)
	store := NewMemoryStore()
	err := mustIdempotent(store)(HandlerFunc(func(context.Context, *Message) error { return nil })).HandleMessage(ctx, &Message{ID: "m1"})
	require.ErrorIs(t, err, ErrShutdown)
	require.Equal(t, 0, store.size(), "nothing was claimed")
}

// A handler that finishes after its context was cancelled (shutdown grace
// ran out, but the work was done) is still recorded as completed.
func TestIdempotentCompletesAfterCancellation(t *testing.T) {
	t.Parallel()
	store := NewMemoryStore()
	ctx, cancel := context.WithCancelCause(context.Background())
	h := mustIdempotent(store)(HandlerFunc(func(ctx context.Context, m *Message) error {
		cancel(ErrShutdown)
		return nil
	}))
	require.NoError(t, h.HandleMessage(ctx, &Message{ID: "m1"}))
	require.Equal(t, ClaimCompleted, probe(t, store, "m1").Status)
}

// --- With leases, on sqstest ------------------------------------------------

// The claim lasts until the lease's deadline and moves with every renewal,
// so while the handler runs for many lease lengths, another worker finds
// the key in progress until exactly the lease's deadline.
func TestIdempotentClaimFollowsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		_, err := b.srv.Send(b.url, "long job")
		require.NoError(t, err)
		m, ctx := b.idemLease(t)
		store := NewMemoryStore()
		var fx effects
		done := make(chan error, 1)
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait) // on failure, let the handler finish inside the bubble
		wg.Go(func() {
			done <- mustIdempotent(store)(HandlerFunc(func(ctx context.Context, m *Message) error {
				time.Sleep(10 * time.Minute)
				fx.add(m.Body)
				return ctx.Err()
			})).HandleMessage(ctx, m)
		})
		for range 59 {
			time.Sleep(10 * time.Second)
			synctest.Wait()
			res := probe(t, store, m.ID)
			require.Equal(t, ClaimInProgress, res.Status)
			require.Equal(t, m.Lease.Deadline(), res.Until, "the claim expires with the lease")
		}
		require.NoError(t, <-done)
		require.Equal(t, 1, fx.get("long job"))
		require.Equal(t, ClaimCompleted, probe(t, store, m.ID).Status)
		require.GreaterOrEqual(t, len(b.state(t, m.ID).VisibilityChanges), 59, "the lease was renewed throughout")
	})
}

// Duplicate delivery: the handler succeeded but the message was not
// deleted (a lost delete, a crash before it), so SQS delivers it again.
// The handler's effect happens once.
func TestIdempotentDuplicateDeliveryRunsOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		id, err := b.srv.Send(b.url, "invoice 48812")
		require.NoError(t, err)
		store := NewMemoryStore()
		var fx effects
		h := mustIdempotent(store)(countingHandler(&fx, nil))

		m, ctx := b.idemLease(t)
		require.NoError(t, h.HandleMessage(ctx, m))
		m.Lease.Stop() // no delete: the message comes back when its visibility ends
		time.Sleep(31 * time.Second)

		m2, ctx2 := b.idemLease(t)
		require.Equal(t, id, m2.ID)
		require.Equal(t, 2, b.state(t, id).ReceiveCount, "delivered twice")
		require.NoError(t, h.HandleMessage(ctx2, m2), "a duplicate returns nil so it is deleted")
		require.NoError(t, m2.Lease.Delete(context.Background()))
		require.Equal(t, 1, fx.get("invoice 48812"))
		require.True(t, b.state(t, id).Deleted)
	})
}

// Two workers hold the same message at once (the first one's visibility
// lapsed while it worked): the second backs off without running the
// handler; the effect happens once.
func TestIdempotentConcurrentDeliveryOneRuns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		id, err := b.srv.Send(b.url, "render")
		require.NoError(t, err)
		store := NewMemoryStore()
		var fx effects
		finish := make(chan struct{})
		var finishOnce sync.Once
		h := mustIdempotent(store)(HandlerFunc(func(ctx context.Context, m *Message) error {
			<-finish // a slow render that does not watch its context
			fx.add(m.Body)
			return nil
		}))

		mA, ctxA := b.idemLease(t)
		doneA := make(chan error, 1)
		var wg sync.WaitGroup
		t.Cleanup(func() { // on failure, let the handler finish inside the bubble
			finishOnce.Do(func() { close(finish) })
			wg.Wait()
		})
		wg.Go(func() { doneA <- h.HandleMessage(ctxA, mA) })
		time.Sleep(5 * time.Second)
		require.NoError(t, b.srv.Expire(b.url, id)) // the lease lapses (e.g. a GC pause)

		mB, ctxB := b.idemLease(t)
		require.Equal(t, id, mB.ID)
		errB := h.HandleMessage(ctxB, mB)
		require.ErrorIs(t, errB, ErrInProgress)
		require.Equal(t, 26*time.Second, retryDelayOf(t, errB), "until A's claim (its lease deadline, 30 s after receive) expires, plus a second")
		require.Equal(t, 0, fx.get("render"))

		// A's next renewal finds its handle stale: its context is
		// cancelled, but the render finishes and is recorded.
		time.Sleep(10 * time.Second)
		require.ErrorIs(t, context.Cause(ctxA), ErrLeaseLost)
		finishOnce.Do(func() { close(finish) })
		require.NoError(t, <-doneA)
		require.Equal(t, 1, fx.get("render"))

		// B's retry finds the key completed.
		require.NoError(t, h.HandleMessage(ctxB, mB))
		require.Equal(t, 1, fx.get("render"))
	})
}

// A worker crashes after claiming (its handler never returns and its lease
// stops renewing): the claim expires with the lease, and the next delivery
// runs the handler.
func TestIdempotentCrashedWorkerClaimExpiresWithLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		id, err := b.srv.Send(b.url, "job")
		require.NoError(t, err)
		store := NewMemoryStore()
		var fx effects
		hang := make(chan struct{})
		var hangOnce sync.Once
		var crashed atomic.Bool
		h := mustIdempotent(store)(HandlerFunc(func(ctx context.Context, m *Message) error {
			if !crashed.Swap(true) {
				<-hang // the "crashed" worker: never returns on its own
			}
			fx.add(m.Body)
			return nil
		}))

		mA, ctxA := b.idemLease(t)
		doneA := make(chan error, 1)
		var wg sync.WaitGroup
		t.Cleanup(func() { // on failure, let the handler finish inside the bubble
			hangOnce.Do(func() { close(hang) })
			wg.Wait()
		})
		wg.Go(func() { doneA <- h.HandleMessage(ctxA, mA) })
		time.Sleep(12 * time.Second) // one renewal happened and moved the claim
		synctest.Wait()
		require.Equal(t, mA.Lease.Deadline(), probe(t, store, id).Until)
		require.Equal(t, mA.ReceivedAt.Add(40*time.Second), mA.Lease.Deadline())
		mA.Lease.Stop() // the process froze: no more renewals

		time.Sleep(time.Until(mA.Lease.Deadline()) + time.Second)
		mB, ctxB := b.idemLease(t)
		require.Equal(t, id, mB.ID)
		require.NoError(t, h.HandleMessage(ctxB, mB), "the next delivery runs the handler")
		require.Equal(t, 1, fx.get("job"))

		// The frozen worker wakes up: fencing keeps it from recording a
		// completion over the new owner's.
		hangOnce.Do(func() { close(hang) })
		errA := <-doneA
		require.ErrorIs(t, errA, ErrClaimLost)
		require.Equal(t, ClaimCompleted, probe(t, store, id).Status)
	})
}

// When an extension finds the claim gone (another worker took the key over),
// the handler's context is cancelled with ErrClaimLost, and a handler that
// returns nil anyway does not complete over the new owner.
func TestIdempotentClaimLostCancelsHandler(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		_, err := b.srv.Send(b.url, "job")
		require.NoError(t, err)
		store := NewMemoryStore()
		claimed := make(chan IdempotencyClaim, 1)
		var cause error
		h := mustIdempotent(store)(HandlerFunc(func(ctx context.Context, m *Message) error {
			c, _ := ClaimFromContext(ctx)
			claimed <- c
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		}))
		m, ctx := b.idemLease(t)
		done := make(chan error, 1)
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait)
		wg.Go(func() { done <- h.HandleMessage(ctx, m) })
		c := <-claimed
		// Someone else takes the key over.
		require.NoError(t, store.Release(context.Background(), c.Key, c.Token))
		res, err := store.Claim(context.Background(), c.Key, "thief", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
		require.Equal(t, ClaimAcquired, res.Status)

		err = <-done // after the lease's first renewal, 10 s in
		require.ErrorIs(t, cause, ErrClaimLost)
		require.ErrorIs(t, err, ErrClaimLost)
		require.NoError(t, m.Lease.Err(), "the lease itself is fine")
		require.Equal(t, ClaimInProgress, probe(t, store, c.Key).Status, "the thief's claim is untouched")
	})
}

// A transient Extend failure is retried; the claim keeps following the lease.
func TestIdempotentExtendRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		_, err := b.srv.Send(b.url, "job")
		require.NoError(t, err)
		mem := NewMemoryStore()
		s := &flakyStore{IdempotencyStore: mem, err: errors.New("timeout"), fails: map[string]int{"Extend": 2}}
		m, ctx := b.idemLease(t)
		done := make(chan error, 1)
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait) // on failure, let the handler finish inside the bubble
		wg.Go(func() {
			done <- mustIdempotent(s)(HandlerFunc(func(ctx context.Context, m *Message) error {
				time.Sleep(15 * time.Second)
				return nil
			})).HandleMessage(ctx, m)
		})
		time.Sleep(12 * time.Second)
		synctest.Wait()
		require.Equal(t, 3, s.count("Extend"))
		require.Equal(t, m.Lease.Deadline(), probe(t, mem, m.ID).Until)
		require.NoError(t, <-done)
	})
}

// --- Through a Consumer -----------------------------------------------------

// The delete after a success is lost, so the message comes back: the
// Consumer's second delivery is skipped and deleted.
func TestIdempotentConsumerLostDelete(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"VisibilityTimeout": "30"})
		ids := b.send(t, 3)
		b.srv.FailNextEntries("DeleteMessageBatch", 1, sqstest.FaultMessageNotInflight)
		var fx effects
		store := NewMemoryStore()
		c, err := New(b.client, b.url, countingHandler(&fx, nil), WithMiddleware(mustIdempotent(store)), WithWaitTime(time.Second))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(2 * time.Minute)
		require.NoError(t, stop())
		redelivered := 0
		for i, id := range ids {
			st := b.state(t, id)
			require.True(t, st.Deleted, "message %d deleted in the end", i)
			if st.ReceiveCount > 1 {
				redelivered++
			}
			require.Equal(t, 1, fx.get(st.Body), "message %d: effect once", i)
		}
		require.Equal(t, 1, redelivered, "one delete was lost and the message delivered again")
	})
}

// Two consumers (two processes) receive the same message at once because
// the first one's lease lapsed: only one handler runs at a time, the other
// consumer backs off until the key is completed or released, and the effect
// happens once. In "first finishes" the first handler completes before it
// notices anything; in "first aborts" its long job sees its context
// cancelled with ErrLeaseLost and gives up, and the second consumer's retry
// does the work.
func TestIdempotentTwoConsumersOneRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		work time.Duration
		runs int32
	}{
		{"first finishes", 8 * time.Second, 1},
		{"first aborts", time.Minute, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, map[string]string{"VisibilityTimeout": "30"})
				id, err := b.srv.Send(b.url, "render")
				require.NoError(t, err)
				store := NewMemoryStore() // shared, as Redis or PostgreSQL would be
				var fx effects
				var active, runs atomic.Int32
				h := HandlerFunc(func(ctx context.Context, m *Message) error {
					if active.Add(1) > 1 {
						t.Error("two handlers ran at once")
					}
					defer active.Add(-1)
					runs.Add(1)
					select {
					case <-time.After(tc.work):
					case <-ctx.Done():
						return context.Cause(ctx)
					}
					fx.add(m.Body)
					return nil
				})
				var stops []func() error
				for range 2 {
					// Concurrency 1: the consumer holding the message does not
					// poll, so the redelivery goes to the other one.
					c, err := New(b.client, b.url, h, WithMiddleware(mustIdempotent(store)), WithWaitTime(time.Second), WithConcurrency(1))
					require.NoError(t, err)
					stops = append(stops, running(t, c))
				}
				time.Sleep(5 * time.Second)
				require.Equal(t, int32(1), runs.Load())
				require.NoError(t, b.srv.Expire(b.url, id)) // the lease lapses (a long GC pause, say)
				time.Sleep(5 * time.Minute)
				for _, stop := range stops {
					require.NoError(t, stop())
				}
				st := b.state(t, id)
				require.Equal(t, 1, fx.get("render"), "effect once")
				require.Equal(t, tc.runs, runs.Load())
				require.True(t, st.Deleted)
				require.GreaterOrEqual(t, st.ReceiveCount, 3, "received by the second consumer while in progress, then again")
			})
		})
	}
}

// A failed handler's claim is removed, so the Consumer's retry runs it.
func TestIdempotentConsumerRetryAfterFailure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, map[string]string{"VisibilityTimeout": "30"})
		id, err := b.srv.Send(b.url, "flaky")
		require.NoError(t, err)
		var calls atomic.Int32
		var fx effects
		h := countingHandler(&fx, func(m *Message) error {
			if calls.Add(1) == 1 {
				return errors.New("dependency down")
			}
			return nil
		})
		c, err := New(b.client, b.url, h, WithMiddleware(mustIdempotent(NewMemoryStore())), WithWaitTime(time.Second),
			WithBackoff(func(int) time.Duration { return 5 * time.Second }))
		require.NoError(t, err)
		stop := running(t, c)
		time.Sleep(time.Minute)
		require.NoError(t, stop())
		require.Equal(t, int32(2), calls.Load())
		require.Equal(t, 1, fx.get("flaky"))
		st := b.state(t, id)
		require.True(t, st.Deleted)
		require.Equal(t, 2, st.ReceiveCount)
	})
}

// --- Benchmarks ----------------------------------------------------------------

// BenchmarkIdempotentOverhead measures what the middleware adds to each
// message with the in-memory store: claim, context, complete. Keys are
// fresh each time (the common case); the store grows by one record per
// message, as it would in a busy process within the TTL.
func BenchmarkIdempotentOverhead(b *testing.B) {
	noop := HandlerFunc(func(context.Context, *Message) error { return nil })
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		m := &Message{ID: "m"}
		b.ReportAllocs()
		for b.Loop() {
			_ = noop.HandleMessage(ctx, m)
		}
	})
	b.Run("memory", func(b *testing.B) {
		h := mustIdempotent(NewMemoryStore())(noop)
		msgs := make([]Message, b.N) // the Consumer allocates these anyway
		for i := range msgs {
			msgs[i].ID = "msg-" + strconv.Itoa(100000000+i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := h.HandleMessage(ctx, &msgs[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memory-with-lease", func(b *testing.B) {
		// As under a Consumer: the claim follows the message's lease (never
		// renewed here: the handler returns at once).
		h := mustIdempotent(NewMemoryStore())(noop)
		l, err := NewLease(&sqs.Client{}, "https://sqs.example/q", types.Message{MessageId: aws.String("m"), ReceiptHandle: aws.String("h")})
		require.NoError(b, err)
		msgs := make([]Message, b.N)
		for i := range msgs {
			msgs[i].ID = "msg-" + strconv.Itoa(100000000+i)
			msgs[i].Lease = l
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := h.HandleMessage(ctx, &msgs[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memory-duplicate", func(b *testing.B) {
		h := mustIdempotent(NewMemoryStore())(noop)
		m := &Message{ID: "dup"}
		_ = h.HandleMessage(ctx, m)
		b.ReportAllocs()
		for b.Loop() {
			if err := h.HandleMessage(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// mustIdempotent is NewIdempotent for tests whose options are valid.
func mustIdempotent(store IdempotencyStore, opts ...IdempotencyOption) Middleware {
	mw, err := NewIdempotent(store, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// Expired records are deleted by the sweep that runs, at most once a
// minute, inside Claim and Complete.
func TestMemoryStoreSweepsExpiredRecords(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := NewMemoryStore()
		for _, k := range []string{"a", "b", "c"} {
			_, err := s.Claim(ctx, k, "t", time.Now().Add(10*time.Second), "")
			require.NoError(t, err)
		}
		_, err := s.Claim(ctx, "done", "t", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, "done", "t", nil, 30*time.Second))
		_, err = s.Claim(ctx, "long", "t", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
		require.Equal(t, 5, s.size())

		time.Sleep(45 * time.Second) // all but "long" expired; no sweep is due yet
		require.Equal(t, 5, s.size())
		time.Sleep(20 * time.Second) // a minute since the last sweep
		_, err = s.Claim(ctx, "new", "t", time.Now().Add(time.Hour), "")
		require.NoError(t, err)
		require.Equal(t, 2, s.size(), "got %d records, want long and new", s.size())
	})
}

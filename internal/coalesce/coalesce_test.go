package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBatcherCoalescesAndRoutesEntryResults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		var mu sync.Mutex
		var sizes []int
		b := New(10, 25*time.Millisecond, 0, func(ctx context.Context, es []int) []error {
			calls.Add(1)
			mu.Lock()
			sizes = append(sizes, len(es))
			mu.Unlock()
			errs := make([]error, len(es))
			for i, e := range es {
				if e%7 == 0 {
					errs[i] = fmt.Errorf("entry %d failed", e)
				}
			}
			return errs
		})
		defer b.Close()

		var wg sync.WaitGroup
		results := make([]error, 35)
		for i := range 35 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = b.Do(context.Background(), i)
			}()
		}
		wg.Wait()
		for i, err := range results {
			if i%7 == 0 {
				require.EqualError(t, err, fmt.Sprintf("entry %d failed", i), "entry %d", i)
			} else {
				require.NoError(t, err, "entry %d", i)
			}
		}
		require.Equal(t, int32(4), calls.Load(), "35 entries at once: 3 full batches and one of 5")
		require.ElementsMatch(t, []int{10, 10, 10, 5}, sizes)
	})
}

func TestBatcherSendsPartialBatchAfterWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sentAt time.Time
		b := New(10, 25*time.Millisecond, 0, func(ctx context.Context, es []int) []error {
			sentAt = time.Now()
			return make([]error, len(es))
		})
		defer b.Close()
		start := time.Now()
		require.NoError(t, b.Do(context.Background(), 1))
		require.Equal(t, 25*time.Millisecond, sentAt.Sub(start), "a lone entry waits exactly one window")
	})
}

func TestBatcherCallerContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var gotDeadline time.Time
		b := New(2, time.Second, 0, func(ctx context.Context, es []int) []error {
			gotDeadline, _ = ctx.Deadline()
			<-release
			return make([]error, len(es))
		})
		defer b.Close()
		ctx1, cancel1 := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel1()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel2()
		start := time.Now()
		var wg sync.WaitGroup
		var err1, err2 error
		wg.Add(2)
		go func() { defer wg.Done(); err1 = b.Do(ctx1, 1) }()
		go func() { defer wg.Done(); err2 = b.Do(ctx2, 2) }()
		synctest.Wait()
		require.Equal(t, start.Add(3*time.Second), gotDeadline, "the batch call gets the earliest entry deadline")
		time.Sleep(3 * time.Second) // virtual: ctx2 times out while the call hangs
		synctest.Wait()
		close(release)
		wg.Wait()
		require.NoError(t, err1)
		require.ErrorIs(t, err2, context.DeadlineExceeded)
	})
}

func TestBatcherClosed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := New(10, time.Second, 0, func(ctx context.Context, es []int) []error { return make([]error, len(es)) })
		b.Close()
		b.Close()
		require.True(t, errors.Is(b.Do(context.Background(), 1), ErrClosed))
	})
}

func TestBatcherShortResultSlice(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := New(1, time.Second, 0, func(ctx context.Context, es []int) []error { return nil })
		defer b.Close()
		require.ErrorContains(t, b.Do(context.Background(), 1), "no result")
	})
}

func TestBatcherSubmitCallsBackOnceWithoutWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		b := New(3, 25*time.Millisecond, 0, func(ctx context.Context, es []int) []error {
			<-release
			errs := make([]error, len(es))
			errs[1] = errors.New("second failed")
			return errs
		})
		defer b.Close()
		var mu sync.Mutex
		got := map[int][]error{}
		for i := range 3 {
			require.NoError(t, b.Submit(i, time.Time{}, func(_ int, err error) {
				mu.Lock()
				got[i] = append(got[i], err)
				mu.Unlock()
			}))
		}
		synctest.Wait()
		mu.Lock()
		require.Empty(t, got, "no callback before the call returns; Submit did not wait for it")
		mu.Unlock()
		close(release)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int][]error{0: {nil}, 1: {errors.New("second failed")}, 2: {nil}}, got)
	})
}

func TestBatcherSubmitDeadlineBoundsTheCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var got time.Time
		b := New(2, time.Second, 0, func(ctx context.Context, es []int) []error {
			got, _ = ctx.Deadline()
			return make([]error, len(es))
		})
		defer b.Close()
		start := time.Now()
		done := make(chan error, 2)
		send := func(_ int, err error) { done <- err }
		require.NoError(t, b.Submit(1, start.Add(7*time.Second), send))
		require.NoError(t, b.Submit(2, start.Add(4*time.Second), send))
		require.NoError(t, <-done)
		require.NoError(t, <-done)
		require.Equal(t, start.Add(4*time.Second), got)
	})
}

func TestBatcherCloseSendsPendingAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sentAt time.Time
		b := New(10, time.Hour, 0, func(ctx context.Context, es []int) []error {
			sentAt = time.Now()
			return make([]error, len(es))
		})
		start := time.Now()
		var result error = errors.New("not called")
		require.NoError(t, b.Submit(1, time.Time{}, func(_ int, err error) { result = err }))
		b.Close()
		require.NoError(t, result, "Close waits for the pending entry's callback")
		require.Equal(t, start, sentAt, "Close does not wait out the window")
		require.ErrorIs(t, b.Submit(2, time.Time{}, func(int, error) { t.Error("callback after ErrClosed") }), ErrClosed)
	})
}

func TestBatcherPartialBatchTimerDoesNotCutALaterBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sizes []int
		b := New(2, 25*time.Millisecond, 0, func(ctx context.Context, es []int) []error {
			mu.Lock()
			sizes = append(sizes, len(es))
			mu.Unlock()
			return make([]error, len(es))
		})
		defer b.Close()
		noop := func(int, error) {}
		require.NoError(t, b.Submit(1, time.Time{}, noop))
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, b.Submit(2, time.Time{}, noop)) // full: sent now, first window disarmed
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, b.Submit(3, time.Time{}, noop)) // a new window, ending at +45 ms
		time.Sleep(10 * time.Millisecond)                  // +30 ms: the first window would have ended
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []int{2}, sizes, "the third entry waits for its own window")
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []int{2, 1}, sizes)
		mu.Unlock()
	})
}

func TestBatcherLimitsCallsInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var inFlight, peak atomic.Int32
		var mu sync.Mutex
		startedAt := map[int]time.Duration{}
		start := time.Now()
		b := New(1, time.Second, 2, func(ctx context.Context, es []int) []error {
			n := inFlight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			mu.Lock()
			startedAt[es[0]] = time.Since(start)
			mu.Unlock()
			time.Sleep(time.Second)
			inFlight.Add(-1)
			return make([]error, len(es))
		})
		defer b.Close()
		done := make(chan error, 6)
		for i := range 6 {
			require.NoError(t, b.Submit(i, time.Time{}, func(_ int, err error) { done <- err }))
		}
		for range 6 {
			require.NoError(t, <-done)
		}
		require.Equal(t, int32(2), peak.Load(), "never more than 2 calls at once")
		require.Equal(t, 3*time.Second, time.Since(start), "6 one-second calls, 2 at a time")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]time.Duration{0: 0, 1: 0, 2: time.Second, 3: time.Second, 4: 2 * time.Second, 5: 2 * time.Second},
			startedAt, "waiting batches go in the order they were cut")
	})
}

// SetBase's context is the parent of every batch call: cancelling it
// abandons a call in flight, and the entries get its error.
func TestBatcherBaseAbandonsCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		base, cancel := context.WithCancel(context.Background())
		b := New(10, time.Millisecond, 0, func(ctx context.Context, es []int) []error {
			<-ctx.Done() // a call that never answers
			errs := make([]error, len(es))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		})
		b.SetBase(base)
		defer b.Close()
		res := make(chan error, 1)
		go func() { res <- b.Do(context.Background(), 1) }()
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case err := <-res:
			t.Fatalf("the call answered before its base was cancelled: %v", err)
		default:
		}
		cancel()
		require.ErrorIs(t, <-res, context.Canceled)
	})
}

// A new base applies to the entries added after it. The entries added
// before keep theirs, whether their call is in flight, pending in its
// window or queued behind maxCalls, and cancelling the old base abandons
// those alone.
func TestBatcherNewBaseForLaterEntries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		first, cancelFirst := context.WithCancel(context.Background())
		second, cancelSecond := context.WithCancel(context.Background())
		defer cancelSecond()
		b := New(2, time.Second, 1, func(ctx context.Context, es []int) []error {
			errs := make([]error, len(es))
			if es[0] < 10 {
				<-ctx.Done() // the old base's calls never answer
				for i := range errs {
					errs[i] = ctx.Err()
				}
			}
			return errs
		})
		b.SetBase(first)
		defer b.Close()
		res := make(chan error, 5)
		for _, e := range []int{1, 2, 3, 4, 5} { // a call in flight, one queued behind it, one pending
			go func() { res <- b.Do(context.Background(), e) }()
			synctest.Wait()
		}
		b.SetBase(second)
		later := make(chan error, 1)
		go func() { later <- b.Do(context.Background(), 10) }() // queued behind the old calls (maxCalls)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Empty(t, res, "no entry of the old base answered before it was cancelled")
		require.Empty(t, later)
		cancelFirst()
		for range 5 {
			require.ErrorIs(t, <-res, context.Canceled, "the entries added before keep their base")
		}
		require.NoError(t, <-later, "an entry added later takes the new base")
	})
}

// A call whose entries all came from Do is abandoned once every caller
// stopped waiting (its context ended), whatever its base: a base that
// outlives the callers must not keep a call going for nobody. While one
// caller still waits, or an entry came from Submit, the call goes on.
func TestBatcherCallEndsWithItsLastCaller(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var ended atomic.Int32 // calls whose context ended
		b := New(10, time.Millisecond, 0, func(ctx context.Context, es []int) []error {
			select {
			case <-ctx.Done(): // a call that never answers
				ended.Add(1)
			case <-time.After(time.Hour):
			}
			return make([]error, len(es))
		})
		defer b.Close()

		first, cancelFirst := context.WithCancel(context.Background())
		second, cancelSecond := context.WithCancel(context.Background())
		res := make(chan error, 2)
		go func() { res <- b.Do(first, 1) }()
		go func() { res <- b.Do(second, 2) }()
		time.Sleep(time.Second) // one call of both entries
		cancelFirst()
		require.ErrorIs(t, <-res, context.Canceled)
		synctest.Wait()
		require.Zero(t, ended.Load(), "the second caller still waits")
		cancelSecond()
		require.ErrorIs(t, <-res, context.Canceled)
		synctest.Wait()
		require.Equal(t, int32(1), ended.Load(), "the call ends with its last caller")

		third, cancelThird := context.WithCancel(context.Background())
		submitted := make(chan error, 1)
		go func() { res <- b.Do(third, 3) }()
		require.NoError(t, b.Submit(4, time.Time{}, func(_ int, err error) { submitted <- err }))
		time.Sleep(time.Second)
		cancelThird()
		require.ErrorIs(t, <-res, context.Canceled)
		synctest.Wait()
		require.Equal(t, int32(1), ended.Load(), "a submitted entry keeps its call going")
		time.Sleep(time.Hour)
		require.NoError(t, <-submitted)
	})
}

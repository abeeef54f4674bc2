package batch

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
		b := New(10, 25*time.Millisecond, func(ctx context.Context, es []int) []error {
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
		b := New(10, 25*time.Millisecond, func(ctx context.Context, es []int) []error {
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
		b := New(2, time.Second, func(ctx context.Context, es []int) []error {
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
		b := New(10, time.Second, func(ctx context.Context, es []int) []error { return make([]error, len(es)) })
		b.Close()
		b.Close()
		require.True(t, errors.Is(b.Do(context.Background(), 1), ErrClosed))
	})
}

func TestBatcherShortResultSlice(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := New(1, time.Second, func(ctx context.Context, es []int) []error { return nil })
		defer b.Close()
		require.ErrorContains(t, b.Do(context.Background(), 1), "no result")
	})
}

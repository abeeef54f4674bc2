package sqsconsumer_test

import (
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

package journal

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAppendRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	w, err := Create(path)
	require.NoError(t, err)
	at := time.Unix(1700000000, 123456789)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			require.NoError(t, w.Append(Entry{Kind: Done, Time: at, PID: 7, MessageID: "m", ReceiveCount: i, Detail: "a\tb\nc"}, i%10 == 0))
		})
	}
	wg.Wait()
	require.NoError(t, w.Append(Entry{Kind: Exit, Time: at, PID: 7}, false))
	require.NoError(t, w.Close())

	got, err := Read(path)
	require.NoError(t, err)
	require.Len(t, got, 51)
	seen := map[int]bool{}
	for _, e := range got[:50] {
		require.Equal(t, Entry{Kind: Done, Time: at, PID: 7, MessageID: "m", ReceiveCount: e.ReceiveCount, Detail: "a b c"}, e)
		seen[e.ReceiveCount] = true
	}
	require.Len(t, seen, 50, "every concurrent line intact")
	require.Equal(t, Entry{Kind: Exit, Time: at, PID: 7, MessageID: "-"}, got[50])
}

func TestReadTornTailAndErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	torn := filepath.Join(dir, "torn")
	require.NoError(t, os.WriteFile(torn, []byte("start\t1\t2\tm\t1\t\ndone\t1\t2"), 0o644))
	got, err := Read(torn)
	require.NoError(t, err)
	require.Len(t, got, 1, "the unfinished last line is ignored")

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("start\tx\t2\tm\t1\t\n"), 0o644))
	_, err = Read(bad)
	require.ErrorContains(t, err, "line 1: time \"x\"")

	got, err = Read(filepath.Join(dir, "missing"))
	require.NoError(t, err)
	require.Empty(t, got, "no file yet is an empty journal")
}

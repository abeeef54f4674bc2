package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

// TestRun runs the quickstart on a smaller batch inside a synctest bubble:
// the in-memory server and the handlers' sleeps run on the bubble's clock,
// so the minutes of simulated work take milliseconds.
func TestRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Messages = 60
		cfg.Concurrency = 8
		var out bytes.Buffer
		start := time.Now()
		require.NoError(t, run(context.Background(), &out, cfg), out.String())
		t.Logf("virtual time %v\n%s", time.Since(start), out.String())

		report := out.String()
		require.Contains(t, report, "processed    60/60")
		require.Contains(t, report, "duplicates   0")
		require.Contains(t, report, "redelivered  0")
		require.Contains(t, report, "leases lost  0")
		require.NotContains(t, report, "\r", "no progress line unless asked for")

		// The comparison table: the Consumer's column has no duplicates,
		// the plain loop's has some.
		require.Contains(t, report, "plain receive/delete loop (8 goroutines, visibility timeout 3s, no heartbeat)")
		m := regexp.MustCompile(`(?m)^  duplicates +(\d+) +(\d+) `).FindStringSubmatch(report)
		require.NotNil(t, m, "duplicates row of the comparison")
		require.Equal(t, "0", m[1], "Consumer's duplicates")
		require.NotEqual(t, "0", m[2], "plain loop's duplicates")
		require.Regexp(t, `(?m)^  wasted handler time +0s +[1-9]`, report)
		require.Regexp(t, `(?m)^  redelivered +0 +[1-9]`, report)
		for line := range strings.Lines(report) {
			require.Equal(t, strings.TrimRight(line, " \n"), strings.TrimSuffix(line, "\n"), "trailing blanks")
		}
	})
}

// TestRunProgress checks the progress line: rewritten in place while the
// run lasts, erased before the report.
func TestRunProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Messages = 20
		cfg.Concurrency = 4
		cfg.Progress = true
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), &out, cfg), out.String())

		report := out.String()
		progress, rest, ok := strings.Cut(report, "sqsconsumer quickstart:")
		require.True(t, ok, report)
		require.NotContains(t, rest, "\r", "progress line stopped before the report")
		require.True(t, strings.HasSuffix(progress, "\r\033[K"), "line erased: %q", progress)
		require.NotContains(t, progress, "\n", "one line, rewritten")
		updates := strings.Split(strings.TrimSuffix(progress, "\r\033[K"), "\r\033[K")[1:]
		require.Greater(t, len(updates), 10, "updated every %v while the run lasts", progressEvery)
		require.Regexp(t, `^  0\.2s  done: Consumer \d+/20, plain loop \d+/20  duplicates: 0 vs 0$`, updates[0])
		last := updates[len(updates)-1]
		require.Regexp(t, `done: Consumer \d+/20, plain loop \d+/20  duplicates: 0 vs [1-9]\d*$`, last)
		for _, u := range updates {
			require.LessOrEqual(t, len(u), 79, "fits an 80-column terminal: %q", u)
		}
	})
}

// TestIsTerminal checks that files and pipes get no progress line.
func TestIsTerminal(t *testing.T) {
	t.Parallel()
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "regular file")

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, isTerminal(w), "pipe")

	require.NoError(t, f.Close())
	require.False(t, isTerminal(f), "closed file: Stat fails")
}

// TestNaiveDuplicates runs the same jobs through the Consumer and through
// the plain receive/delete loop: the loop handles the jobs that outlive
// the visibility timeout more than once (and only those), the Consumer
// handles every job once.
func TestNaiveDuplicates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Messages = 60
		cfg.Concurrency = 20
		jobs := makeJobs(cfg)
		ctx := context.Background()

		q, err := memoryQueue()
		require.NoError(t, err)
		ids, err := q.send(ctx, jobs)
		require.NoError(t, err)
		res, err := consume(ctx, q, cfg, jobs, ids, newTally(ids))
		require.NoError(t, err)
		require.NoError(t, res.verdict())
		require.Zero(t, res.t.wasted())

		nq, err := memoryQueue()
		require.NoError(t, err)
		nids, err := nq.send(ctx, jobs)
		require.NoError(t, err)
		nt := newTally(nids)
		nres, err := runNaive(ctx, nq, cfg, jobs[0].Run, nt)
		require.NoError(t, err)

		nt.mu.Lock()
		require.Len(t, nt.ran, 60, "every job ran once at least")
		var overrunning, duplicated int
		var minWaste time.Duration
		for i, id := range nids {
			work := jobs[i].work()
			if work > cfg.Lease {
				overrunning++
			}
			if nt.calls[id] > 1 {
				duplicated++
				require.Greater(t, work, cfg.Lease, "job #%d (%v) ran %d times", i, work, nt.calls[id])
				// The first repeat starts when the visibility timeout ends
				// and runs at least until the first run completes.
				minWaste += work - cfg.Lease
			}
		}
		nt.mu.Unlock()
		require.Positive(t, overrunning)
		require.Equal(t, overrunning, duplicated, "every job longer than the lease ran twice or more")
		require.Positive(t, nt.duplicates())
		require.GreaterOrEqual(t, nt.wasted(), minWaste)
		require.Equal(t, overrunning, nres.redelivered())
		require.Positive(t, nres.undeleted(), "superseded receipt handles delete nothing")
		require.LessOrEqual(t, nres.undeleted(), overrunning)
		require.Less(t, nres.elapsed, 4*cfg.Lease)
	})
}

// TestResult checks the verdict and the counts behind the report directly.
func TestResult(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Messages = 40
		q, err := memoryQueue()
		require.NoError(t, err)
		jobs := makeJobs(cfg)
		ids, err := q.send(context.Background(), jobs)
		require.NoError(t, err)
		res, err := consume(context.Background(), q, cfg, jobs, ids, newTally(ids))
		require.NoError(t, err)
		require.NoError(t, res.verdict())
		require.Equal(t, 40, res.processed())
		require.Equal(t, 0, res.duplicates())
		require.Equal(t, 0, res.redelivered)
		res.t.mu.Lock()
		defer res.t.mu.Unlock()
		require.Len(t, res.t.calls, 40, "every message handled")
		for id, n := range res.t.calls {
			require.Equal(t, 1, n, "handler calls of %s", id)
		}
		require.Positive(t, res.t.events[sqsconsumer.EventRenewed], "long handlers were renewed")
	})
}

// TestMakeJobs checks that the work mix has handlers longer than the lease.
func TestMakeJobs(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	jobs := makeJobs(cfg)
	require.Len(t, jobs, cfg.Messages)
	var longer int
	var longest time.Duration
	for _, j := range jobs {
		require.Positive(t, j.work())
		if j.work() > cfg.Lease {
			longer++
		}
		longest = max(longest, j.work())
	}
	require.GreaterOrEqual(t, longer, cfg.Messages/20, "handlers longer than the lease")
	require.Greater(t, longest, 3*cfg.Lease, "longest handler vs lease")
	require.LessOrEqual(t, longest, 4*cfg.Lease, "keeps the run short")
}

// TestVerdict checks that duplicates and missing messages fail the run.
func TestVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		calls   map[string]int
		deleted map[string]bool
		want    string
	}{
		{"clean", map[string]int{"a": 1, "b": 1}, map[string]bool{"a": true, "b": true}, ""},
		{"duplicate", map[string]int{"a": 2, "b": 1}, map[string]bool{"a": true, "b": true}, "1 duplicate handler calls"},
		{"missing", map[string]int{"a": 1}, map[string]bool{"a": true}, "only 1 of 2 messages processed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := newTally([]string{"a", "b"})
			tl.calls, tl.deleted = tt.calls, tt.deleted
			r := &result{ids: []string{"a", "b"}, t: tl}
			err := r.verdict()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

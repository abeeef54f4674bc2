package main

import (
	"bytes"
	"context"
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
		res, err := consume(context.Background(), q, cfg, jobs, ids)
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

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

func plan(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw bytes.Buffer
	code = runPlan(strings.NewReader(stdin), args, &out, &errw)
	return code, out.String(), errw.String()
}

var planArgs = []string{"-p50", "80ms", "-p99", "400ms", "-rate", "20", "-peak", "2000", "-target", "30s", "-concurrency", "10"}

func TestPlanText(t *testing.T) {
	t.Parallel()
	code, out, errs := plan(t, "", planArgs...)
	require.Equal(t, exitOK, code, errs)
	require.Empty(t, errs)
	for _, want := range []string{
		"peak     2000 msg/s: 23 (slots 88% busy)",
		"lease\n  visibility timeout 10s, heartbeat every 3.33s",
		"$0.40 per million requests",
		"free tier",
	} {
		require.Contains(t, out, want)
	}
}

func TestPlanDispatch(t *testing.T) {
	t.Parallel()
	// Through run, as main calls it: "plan" is a subcommand.
	var out, errw bytes.Buffer
	code := run(context.Background(), append([]string{"plan"}, planArgs...), &out, &errw, nil)
	require.Equal(t, exitOK, code, errw.String())
	require.Contains(t, out.String(), "requests a month")
}

func TestPlanJSON(t *testing.T) {
	t.Parallel()
	code, out, _ := plan(t, "", append(planArgs, "-json", "-fifo", "-max-receive-count", "3")...)
	require.Equal(t, exitOK, code)
	var v struct {
		Input struct {
			Price float64 `json:"price_per_million"`
		} `json:"input"`
		Average struct {
			Replicas int `json:"replicas"`
		} `json:"average"`
		Peak struct {
			Replicas int `json:"replicas"`
		} `json:"peak"`
		Lease struct {
			MaxReceiveCount int     `json:"max_receive_count"`
			TimeToDLQ       float64 `json:"time_to_dlq_seconds"`
		} `json:"lease"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, 0.50, v.Input.Price, "FIFO list price")
	require.Equal(t, 1, v.Average.Replicas)
	require.Equal(t, 23, v.Peak.Replicas)
	require.Equal(t, 3, v.Lease.MaxReceiveCount)
	require.Equal(t, 30.0, v.Lease.TimeToDLQ, "3 × 10 s")
}

func TestPlanBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing", []string{"-p50", "1s"}, []string{"-concurrency is required", "-p99 is required", "-rate is required", "-target is required"}},
		{"p99 below p50", []string{"-p50", "1s", "-p99", "500ms", "-rate", "1", "-target", "1m", "-concurrency", "4"}, []string{"-p99 500ms is below -p50 (1s)"}},
		{"negative rate", []string{"-p50", "1s", "-p99", "2s", "-rate", "-3", "-target", "1m", "-concurrency", "4"}, []string{"-rate -3 must be a finite rate"}},
		{"peak below rate", []string{"-p50", "1s", "-p99", "2s", "-rate", "3", "-peak", "2", "-target", "1m", "-concurrency", "4"}, []string{"-peak 2 is below -rate (3)"}},
		{"zero concurrency", []string{"-p50", "1s", "-p99", "2s", "-rate", "3", "-target", "1m", "-concurrency", "0"}, []string{"-concurrency 0 must be at least 1"}},
		{"utilization", []string{"-p50", "1s", "-p99", "2s", "-rate", "3", "-target", "1m", "-concurrency", "2", "-utilization", "2"}, []string{"-utilization 2 must be above 0 and at most 1"}},
		{"unknown flag", []string{"-nope"}, []string{"flag provided but not defined: -nope"}},
		{"arguments", append(append([]string{}, planArgs...), "extra"), []string{"unexpected arguments: extra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := plan(t, "", tc.args...)
			require.Equal(t, exitUsage, code)
			require.Empty(t, out)
			for _, w := range tc.want {
				require.Contains(t, errs, w)
			}
			// With -json the same reason is one object on stdout.
			code, out, _ = plan(t, "", append([]string{"-json"}, tc.args...)...)
			require.Equal(t, exitUsage, code)
			var e errorJSON
			require.NoError(t, json.Unmarshal([]byte(out), &e), out)
			require.Equal(t, exitUsage, e.ExitCode)
			require.Contains(t, e.Error, tc.want[0])
		})
	}
}

func TestPlanStats(t *testing.T) {
	t.Parallel()
	st := sqsconsumer.Stats{Processed: 5000, P50: 2 * time.Second, P99: 6 * time.Second, Mean: 2500 * time.Millisecond, RenewalsPerMessage: 0.02}
	b, err := json.Marshal(st)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "stats.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	rest := []string{"-rate", "40", "-target", "1m", "-concurrency", "10", "-json"}
	var v struct {
		Input struct {
			P50  float64 `json:"handler_p50_seconds"`
			Mean float64 `json:"handler_mean_seconds"`
		} `json:"input"`
		CapacityPerReplica float64 `json:"capacity_per_replica"`
		Average            struct {
			Replicas int `json:"replicas"`
		} `json:"average"`
		Lease struct {
			Vis float64 `json:"visibility_timeout_seconds"`
		} `json:"lease"`
		Requests struct {
			Renewals float64 `json:"renewals_per_message"`
		} `json:"requests"`
	}
	for _, src := range []struct{ name, arg, stdin string }{{"file", path, ""}, {"stdin", "-", string(b)}} {
		code, out, errs := plan(t, src.stdin, append([]string{"-stats", src.arg}, rest...)...)
		require.Equal(t, exitOK, code, "%s: %s", src.name, errs)
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		// 10 slots / 2.5 s mean = 4 msg/s; × 0.9 = 3.6: 40 / 3.6 → 12 replicas.
		require.Equal(t, 2.0, v.Input.P50, src.name)
		require.Equal(t, 4.0, v.CapacityPerReplica, src.name)
		require.Equal(t, 12, v.Average.Replicas, src.name)
		require.Equal(t, 12.0, v.Lease.Vis, "AdaptiveVisibility(6s) = 12 s")
		require.Equal(t, 0.02, v.Requests.Renewals, "measured, not estimated")
	}
	// A flag given wins over the Stats: mean 1 s, 10 msg/s: 40 / 9 → 5.
	code, out, _ := plan(t, "", append([]string{"-stats", path, "-mean", "1s"}, rest...)...)
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, 1.0, v.Input.Mean)
	require.Equal(t, 5, v.Average.Replicas)

	code, _, errs := plan(t, "", append([]string{"-stats", filepath.Join(t.TempDir(), "none.json")}, rest...)...)
	require.Equal(t, exitRead, code)
	require.Contains(t, errs, "-stats: open")
	code, _, errs = plan(t, "{not json", append([]string{"-stats", "-"}, rest...)...)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "not a sqsconsumer.Stats in JSON")
	code, _, errs = plan(t, "{}", append([]string{"-stats", "-"}, rest...)...)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "holds no processed message")
}

// A Stats with handler times and a concurrency needs no -concurrency, and
// its handler times, not its receive-to-settle ones, size the replicas.
func TestPlanStatsWithHandlerTimes(t *testing.T) {
	t.Parallel()
	st := sqsconsumer.Stats{Processed: 5000, P50: 3 * time.Second, P99: 8 * time.Second, Mean: 3 * time.Second,
		HandlerP50: 2 * time.Second, HandlerP99: 6 * time.Second, HandlerMean: 2500 * time.Millisecond, Concurrency: 10,
		Received: 5000, Deleted: 5000, Calls: sqsconsumer.CallCounts{Receive: 1500, EmptyReceive: 500, DeleteBatch: 1000}}
	b, err := json.Marshal(st)
	require.NoError(t, err)
	code, out, errs := plan(t, string(b), "-stats", "-", "-rate", "40", "-target", "1m", "-json")
	require.Equal(t, exitOK, code, errs)
	var v struct {
		Input struct {
			P50         float64 `json:"handler_p50_seconds"`
			Concurrency int     `json:"concurrency"`
		} `json:"input"`
		Average struct {
			Replicas int `json:"replicas"`
		} `json:"average"`
		Requests struct {
			BatchFill  float64 `json:"batch_fill"`
			DeleteFill float64 `json:"delete_fill"`
		} `json:"requests"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, 2.0, v.Input.P50)
	require.Equal(t, 10, v.Input.Concurrency)
	require.Equal(t, 12, v.Average.Replicas)     // 10 / 2.5 s × 0.9 = 3.6 msg/s: 40 / 3.6 → 12
	require.Equal(t, 5.0, v.Requests.BatchFill)  // 5,000 messages over 1,000 full receives
	require.Equal(t, 5.0, v.Requests.DeleteFill) // 5,000 deletes over 1,000 calls
}

// The plan says where its bill comes from: the batch fills it assumes and why
// (estimated from the rate, the round trip and the batch size; given with a
// flag; measured by -stats), and the bill's range beside the estimate.
func TestPlanExplainsTheBill(t *testing.T) {
	t.Parallel()
	args := []string{"-p50", "100ms", "-p99", "1s", "-rate", "2000", "-target", "1s", "-concurrency", "10"}
	code, out, errs := plan(t, "", args...)
	require.Equal(t, exitOK, code, errs)
	for _, want := range []string{
		"5,256,000,000 messages",
		"range: $422 with full batches (10 messages per receive, 10 per delete and renewal call) to $4.21k with one message per call",
		"batch fill: 1.42 messages per receive, estimated from the rate, the receive round trip and the batch size",
		"2.35 deletes per delete call, estimated from the rate",
	} {
		require.Contains(t, out, want)
	}

	code, out, errs = plan(t, "", append(args, "-batch-fill", "4", "-batch-size", "5")...)
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "batch fill: 4 messages per receive, given with -batch-fill")
	require.Contains(t, out, "with full batches (5 messages per receive")

	st := sqsconsumer.Stats{Processed: 5000, P50: 100 * time.Millisecond, P99: time.Second, Mean: 200 * time.Millisecond, Concurrency: 10,
		Received: 5000, Deleted: 5000, Calls: sqsconsumer.CallCounts{Receive: 1500, EmptyReceive: 500, DeleteBatch: 2000}}
	b, err := json.Marshal(st)
	require.NoError(t, err)
	code, out, errs = plan(t, string(b), "-stats", "-", "-rate", "2000", "-target", "1s")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "batch fill: 5 messages per receive, measured by the Consumer's Stats: 5000 messages over 1000 non-empty receives (-stats stdin)")
	require.Contains(t, out, "2.5 deletes per delete call, measured by the Consumer's Stats: 5000 deletes over 2000 delete calls (-stats stdin)")

	code, out, _ = plan(t, "", append(args, "-json")...)
	require.Equal(t, exitOK, code)
	var v struct {
		Requests struct {
			Basis  string             `json:"batch_fill_basis"`
			Full   map[string]float64 `json:"full_batches"`
			Single map[string]float64 `json:"single_messages"`
		} `json:"requests"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Contains(t, v.Requests.Basis, "estimated from the rate")
	require.Contains(t, v.Requests.Full, "dollars")
	require.Contains(t, v.Requests.Single, "requests")
}

package scalesim_test

import (
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/scalesim"
)

// ciScale is the scale factor of the tests: 1/80 of the full rate, one handler
// slot per replica instead of 80, so that a step to 2,000 msg/s is 25 msg/s of
// simulated work (about 1,150 messages per CPU second under -race: a full-rate
// run is for bench/scaling).
const ciScale = 80

// claimsScale is the scale at which issue 26's claims are held
// (SCALESIM_CLAIMS=1; CI runs them without -race): 1/10, 8 handler slots per
// replica and some 100 messages in flight at 2,000 msg/s. At 1/80 the few
// messages in flight (about 15) make SQS's in-flight count, and the arrival
// rate the signal infers from it, too noisy for replicas within 25 % of the
// fewest: the noise is a property of the scale-down, not of a service at
// full rate.
const claimsScale = 10

// claims reports whether the claims run (SCALESIM_CLAIMS=1).
func claims() bool { return os.Getenv("SCALESIM_CLAIMS") != "" }

// scale is the scale of this run's tests.
func scale() int {
	if claims() {
		return claimsScale
	}
	return ciScale
}

// stepInput is the step of issue 26, 20 to 2,000 msg/s, with the default handler
// (lognormal, p50 400 ms, p99 1.2 s) and 80 slots per replica.
func stepInput(p scalesim.Policy) scalesim.StepInput {
	in := scalesim.StepInput{
		HandlerP50: scalesim.DefaultHandlerP50, HandlerP99: scalesim.DefaultHandlerP99,
		ArrivalAvg: 20, ArrivalPeak: 2000, Target: scalesim.DefaultTarget,
		Concurrency: scalesim.DefaultConcurrency, Scale: scale(), Policy: p, Seed: 26,
	}
	if !claims() {
		in.After = ciStepAfter
	}
	return in
}

// ciStepAfter is how long the CI scale's step runs after the step: long
// enough for ours to scale out, hold its window (5 min), wait out the
// autoscaler's cooldown (5 min) and scale in under the target, and for
// the baselines to scale in to 1 twice (4 reversals, as in 20 minutes);
// 80 % of the default 20 minutes' messages, which the claims still run.
const ciStepAfter = 16 * time.Minute

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// requireSafe holds what every run must hold, whatever the policy: every message
// handled, and duplicates only where a replica stopped at a scale-in released a
// message whose handler had started (SQS's at-least-once delivery).
func requireSafe(t *testing.T, r *scalesim.Result) {
	t.Helper()
	require.Empty(t, r.Errors, "replicas' Run errors")
	require.Positive(t, r.Sent)
	require.Zero(t, r.Lost, "messages never handled, of %d sent", r.Sent)
	require.LessOrEqual(t, r.Duplicates, r.ReleasedStarted, "duplicates beyond the releases at scale-in")
}

func logResult(t *testing.T, r *scalesim.Result) {
	t.Helper()
	t.Logf("%s/%s: sent %d, replica-minutes %.0f, wait p50 %v p99 %v, steady p99 %v, settled p99 %v, settled replicas %d-%d (fewest %d, peak %d), reversals %d, lost %d, duplicates %d (releases %d), capacity %.1f msg/s/replica",
		r.Trace, r.Policy, r.Sent, r.ReplicaMinutes, r.WaitP50, r.WaitP99, r.SteadyP99, r.SettledP99,
		r.SteadyMinReplicas, r.SteadyMaxReplicas, r.Fewest, r.PeakReplicas, r.Reversals, r.Lost, r.Duplicates, r.ReleasedStarted, r.CapacityPerReplica)
	for _, d := range r.Decisions {
		if d.Before != d.After {
			t.Logf("  %v: %d -> %d (asked %d, visible %d, in flight %d)", d.At, d.Before, d.After, d.Asked, d.Visible, d.InFlight)
		}
	}
}

// TestStep runs the step under every policy and holds ours to issue 26's claims.
func TestStep(t *testing.T) {
	t.Parallel()
	c0 := cpu()
	var mu sync.Mutex
	results := map[string]*scalesim.Result{}
	t.Run("policy", func(t *testing.T) {
		for _, name := range scalesim.PolicyNames {
			p, err := scalesim.PolicyByName(name)
			require.NoError(t, err)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				res, err := scalesim.MeasureStep(t, stepInput(p))
				require.NoError(t, err)
				logResult(t, res)
				requireSafe(t, res)
				mu.Lock()
				results[name] = res
				mu.Unlock()
			})
		}
	})
	var sent int64
	for _, r := range results {
		sent += r.Sent
	}
	t.Logf("%d messages in %v of CPU", sent, cpu()-c0)
	for _, name := range []string{"keda", "backlog"} {
		r := results[name]
		require.NotNil(t, r, name)
		// What the baselines do with AWS's figure: once the backlog is drained
		// their metric reads about 0, so they scale in to 1 and the backlog
		// builds up again. Asserted so that a change in the harness that hides
		// it shows.
		require.False(t, r.MeetsTarget(), "%s meets the target: steady p99 %v", name, r.SteadyP99)
		require.Greater(t, r.Reversals, 2, "%s reversals", name)
	}
	requireOurs(t, results)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tr := scalesim.Step(1, 2, time.Minute, time.Minute)
	cases := []struct {
		name string
		cfg  scalesim.Config
		want string
	}{
		{"no policy", scalesim.Config{Trace: tr}, "Policy is nil"},
		{"no trace", scalesim.Config{Policy: scalesim.KEDA{}}, "Trace.Duration"},
		{"scale", scalesim.Config{Trace: tr, Policy: scalesim.KEDA{}, Concurrency: 10, Scale: 3}, "multiple of Scale"},
		{"p99", scalesim.Config{Trace: tr, Policy: scalesim.KEDA{}, HandlerP50: time.Second, HandlerP99: time.Millisecond}, "HandlerP99"},
		{"delays", scalesim.Config{Trace: tr, Policy: scalesim.KEDA{}, StartDelayMin: time.Minute, StartDelayMax: time.Second}, "start delay"},
		{"replicas", scalesim.Config{Trace: tr, Policy: scalesim.KEDA{}, MinReplicas: 3, MaxReplicas: 2}, "replicas [3, 2]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := scalesim.Run(t, tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestPolicyFigures(t *testing.T) {
	t.Parallel()
	s := scalesim.Setup{Target: 30 * time.Second, Concurrency: 80, MeanHandler: 447200 * time.Microsecond}
	// 30 s / 0.4472 s × 80 = 5366.7
	require.Equal(t, 5367.0, scalesim.KEDA{}.QueueLength(s))
	require.InDelta(t, 5366.7, scalesim.BacklogPerInstance{}.TargetValue(s), 0.1)
	s.Concurrency, s.Target = 1, time.Millisecond
	require.Equal(t, 1.0, scalesim.KEDA{}.QueueLength(s), "at least 1")
	mean := scalesim.Config{HandlerP50: 200 * time.Millisecond, HandlerP99: 600 * time.Millisecond}.MeanHandler()
	require.InDelta(t, 223.6, float64(mean)/float64(time.Millisecond), 0.1)
}

func TestStandardTraces(t *testing.T) {
	t.Parallel()
	for _, name := range scalesim.Names {
		tr, err := scalesim.Standard(name)
		require.NoError(t, err, name)
		require.Equal(t, name, tr.Name)
		require.Less(t, tr.Steady.From, tr.Steady.To, name)
		require.Less(t, tr.ReplicasWindow.From, tr.ReplicasWindow.To, name)
		require.LessOrEqual(t, tr.ReplicasWindow.To, tr.Duration, name)
	}
	_, err := scalesim.Standard("nope")
	require.ErrorContains(t, err, `unknown trace "nope"`)
	step, _ := scalesim.Standard("step")
	require.Equal(t, 20.0, step.Rate(9*time.Minute))
	require.Equal(t, 2000.0, step.Rate(10*time.Minute))
	ramp, _ := scalesim.Standard("ramp")
	require.InDelta(t, 200, ramp.Rate(0), 1e-9)
	require.InDelta(t, 2000, ramp.Rate(30*time.Minute), 1e-9)
	slow, _ := scalesim.Standard("slow")
	require.Equal(t, 2.0, slow.Slowdown(15*time.Minute))
	require.Equal(t, 1.0, slow.Slowdown(25*time.Minute))
}
